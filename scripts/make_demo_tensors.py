#!/usr/bin/python3
"""Writes the demo's tensors with NumPy (Debian's python3-numpy), the way a training job dumps them.

Usage: make_demo_tensors.py OUT_DIR [STEP]   (STEP > 0: gradients grow 4x per step, as after a
loss spike, so a delayed scale from the previous step overflows)


activations_bf16.npy  512 x 1024 BF16 activations as raw '<u2' bits (numpy has no bfloat16):
                      unit-normal values with four outlier channels, as LLM hidden states have.
gradients.npy         256 x 1024 float32 weight gradients around 1e-6, the regime where E4M3
                      underflows and E5M2's extra exponent range matters.
"""
import sys
import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "."
step = int(sys.argv[2]) if len(sys.argv) > 2 else 0
rng = np.random.default_rng(2026 + step)

act = rng.standard_normal((512, 1024), dtype=np.float32)
act[:, [17, 240, 511, 777]] *= 60.0
bits = act.view(np.uint32)
bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")  # round to nearest even
np.save(f"{out}/activations_bf16.npy", bf16)

grad = (rng.standard_normal((256, 1024)) * 1e-6 * 4.0 ** step * rng.lognormal(0.0, 1.5, (256, 1)))
np.save(f"{out}/gradients.npy", grad.astype("<f4"))
print(f"wrote {out}/activations_bf16.npy and {out}/gradients.npy")
