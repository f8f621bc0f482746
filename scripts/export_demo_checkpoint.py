#!/usr/bin/python3
"""Exports the demo's BF16 run as a serving team would ship it, with NumPy only.

Usage: export_demo_checkpoint.py WEIGHTS OUT_DIR

WEIGHTS is tiny_trainer --save-weights output (per layer: rows, cols as int32, then fp32 values).
Writes three Hugging Face checkpoint directories (config.json + model.safetensors):

  OUT_DIR/bf16          the trained weights in BF16: the reference
  OUT_DIR/fp8           per-tensor FP8 as vLLM's "fp8" method loads it: weight F8_E4M3 and
                        weight_scale F32 [1] = amax / 448, codes cast as training casts them
                        (fp32 w * (448 / amax), nearest even, saturated at 448)
  OUT_DIR/fp8-inverted  the same, but mlp.1's weight_scale stored as 448 / amax: the classic
                        mistake of writing the scale where its inverse is expected

The E4M3 cast is written here from the OCP FP8 spec, not taken from fp8scope, so the checker is
held to an independent producer.
"""
import json
import os
import struct
import sys

import numpy as np


def read_weights(path):
    layers, data = [], open(path, "rb").read()
    at = 0
    while at < len(data):
        rows, cols = struct.unpack_from("<ii", data, at)
        at += 8
        layers.append(np.frombuffer(data, "<f4", rows * cols, at).reshape(rows, cols))
        at += 4 * rows * cols
    return layers


def bf16_bits(x):
    bits = x.astype("<f4").view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")  # nearest even


def bf16_values(bits):
    return (bits.astype("<u4") << 16).view("<f4")


# E4M3 (OCP): bias 7, no infinities, 0x7F/0xFF are NaN, so the largest finite code is 0x7E = 448.
E4M3_CODES = np.arange(0x7F)
E4M3_VALUES = np.where(E4M3_CODES >= 8,
                       (1 + (E4M3_CODES & 7) / 8) * 2.0 ** ((E4M3_CODES >> 3) - 7),
                       (E4M3_CODES & 7) * 2.0 ** -9)


def e4m3(x):
    """Codes of fp32 values: round to nearest, ties to the even code, saturated at +-448."""
    a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    hi = np.clip(np.searchsorted(E4M3_VALUES, a), 1, 0x7E)
    lo = hi - 1
    d_lo, d_hi = a - E4M3_VALUES[lo], E4M3_VALUES[hi] - a
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def write_checkpoint(path, config, tensors):
    """config.json and one .safetensors file (safetensors README "Format")."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    header, offset, blobs = {}, 0, []
    for name, dtype, array in tensors:
        blob = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    weights_path, out = sys.argv[1], sys.argv[2]
    architecture = {"architectures": ["TinyMLP"], "model_type": "tiny_mlp"}
    reference, right, inverted = [], [], []
    for index, w in enumerate(read_weights(weights_path)):
        name = f"mlp.{index}"
        bits = bf16_bits(w)
        values = bf16_values(bits)
        reference.append((f"{name}.weight", "BF16", bits))
        scale = np.float32(448.0) / np.float32(np.abs(values).max())
        codes = e4m3(values * scale)
        scale_inv = np.array([np.float32(1.0) / scale], dtype="<f4")
        right += [(f"{name}.weight", "F8_E4M3", codes), (f"{name}.weight_scale", "F32", scale_inv)]
        stored = np.array([scale], dtype="<f4") if index == 1 else scale_inv
        inverted += [(f"{name}.weight", "F8_E4M3", codes), (f"{name}.weight_scale", "F32", stored)]
    fp8 = dict(architecture, quantization_config={"quant_method": "fp8", "activation_scheme": "dynamic"})
    write_checkpoint(os.path.join(out, "bf16"), dict(architecture, torch_dtype="bfloat16"), reference)
    write_checkpoint(os.path.join(out, "fp8"), fp8, right)
    write_checkpoint(os.path.join(out, "fp8-inverted"), fp8, inverted)
    print(f"wrote {out}/bf16, {out}/fp8 and {out}/fp8-inverted ({len(reference)} layers)")


if __name__ == "__main__":
    main()
