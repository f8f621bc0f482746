#!/usr/bin/python3
"""The README's demo, run as a new user runs it: it succeeds, a tensor it analyzed gives the same
numbers when analyzed again afterwards (its per-step tensors live elsewhere), and the planted
outlier's story holds: the loss table it prints peaks where `compare` says the baseline peaks, and
the FP8 run recovers the step after; the BF16 run's FP8 export passes `fp8scope checkpoint` and
the one with an inverted scale fails it, by name.

    tests/ops/demo_test.py --build build
"""
import os
import re
import subprocess
import unittest

from ops_sources import run_tests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = None  # set by main()


class Demo(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FP8SCOPE_")}
        env["FP8SCOPE_BUILD"] = BUILD
        r = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
        cls.out = r.stdout
        assert r.returncode == 0, f"demo.sh exit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"

    def test_a_tensor_it_analyzed_gives_the_same_numbers_afterwards(self):
        again = subprocess.run([os.path.join(BUILD, "cli", "fp8scope"), "analyze",
                                os.path.join(BUILD, "demo", "gradients.npy"), "--recipe", "tensor_current", "--recipe",
                                "mxfp8"], capture_output=True, text=True, check=True).stdout
        self.assertIn("tensor_current", again)
        self.assertIn(again, self.out)

    def test_the_planted_outlier_tells_its_story(self):
        if not os.path.exists(os.path.join(BUILD, "tests", "trainer", "tiny_trainer")):
            self.assertNotIn("planted outlier", self.out)  # the demo leaves that part out without CUDA headers
            return
        table = self.out.split("== The planted outlier, step by step")[1].split("==")[0]
        losses = {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
                  for m in re.finditer(r"(?m)^\s+(\d+)\s+(\S+)\s+(\S+)$", table)}
        self.assertEqual(sorted(losses), list(range(58, 67)))
        bf16_peak = max(losses, key=lambda step: losses[step][0])
        # compare's spike table: "step N   -   HEIGHTx, K steps" for a baseline-only spike.
        compare = self.out.split("== fp8scope compare --run fp8 --baseline bf16")[1]
        baseline_peak = int(re.search(r"(?m)^\s+step (\d+)\s+-\s+[0-9.]+x", compare).group(1))
        self.assertEqual(bf16_peak, baseline_peak)
        self.assertIn(f"peak at step {bf16_peak}", table)
        # FP8 clips the outlier: its loss rises at step 60 only, and is back the step after.
        self.assertGreater(losses[60][1], 2 * losses[59][1])
        self.assertLess(losses[61][1], 1.5 * losses[59][1])
        self.assertGreater(losses[bf16_peak][0], 1000 * losses[58][0])
        self.assertIn("verdict: no loss signal sets run fp8 apart from its baseline", compare)

    def test_the_checkpoint_step_passes_the_right_export_and_names_the_broken_one(self):
        if not os.path.exists(os.path.join(BUILD, "tests", "trainer", "tiny_trainer")):
            self.assertNotIn("fp8scope checkpoint", self.out)
            return
        right = self.out.split("== fp8scope checkpoint fp8 --reference")[1].split("==")[0]
        self.assertIn("verdict: export matches its reference: 3 quantized weights", right)
        self.assertIn("0 of 3 FP8 weights differ from what it ended with", right)
        broken = self.out.split("== fp8scope checkpoint fp8-inverted")[1].split("==")[0]
        self.assertRegex(broken, r"(?m)^error\s+inverted_scale\s+mlp\.1\s")
        self.assertIn("exit status 1", broken)


def set_paths(paths):
    global BUILD
    BUILD = paths["build"]


if __name__ == "__main__":
    run_tests(__doc__, build="the build folder", set_paths=set_paths)
