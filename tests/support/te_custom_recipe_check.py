"""Loads a CustomRecipe module written by `fp8scope advise --format te-recipe` against the TE stand-in
(te_stub/, TE d0067d0's signatures and checks) and checks it does what the ladder said, by TE's rules
written here apart from fp8scope's code:
- each GEMM reads one copy of each operand (TE cpp_extensions/gemm.py:213-223, hybrid_tensor.py:358-360):
  fprop the row-wise input and weight, dgrad the column-wise weight and row-wise grad_output, wgrad the
  column-wise input and grad_output;
- each fp8scope recipe is the TE quantizer its recipe stands for (NVFP4BlockScaling's options:
  common/recipe/__init__.py:559-610, pytorch/quantization.py:1692-1742);
- the two copies one GEMM reads are of one scaling family (common/gemm/cublaslt_gemm.cu:106-111).
Usage: te_custom_recipe_check.py MODULE.py PLAN.json; PLAN: {"gemms": {layer: {gemm: recipe}},
"fallback": recipe}. Prints what failed and exits 1, or exits 0.
"""
import dataclasses
import importlib.util
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "te_stub"))
import transformer_engine.pytorch as te  # noqa: E402
from transformer_engine.common.recipe import CustomRecipe  # noqa: E402

COPIES = {"input": ("fprop", "wgrad"), "weight": ("fprop", "dgrad"), "grad_output": ("dgrad", "wgrad")}
GEMM_OPERANDS = {"fprop": (("weight", 0), ("input", 0)), "dgrad": (("weight", 1), ("grad_output", 0)),
                 "wgrad": (("input", 1), ("grad_output", 1))}


@dataclasses.dataclass(frozen=True)
class QuantizerRole:  # TE pytorch/quantization.py:56-87
    module_type: str = ""
    tensor_type: str = ""
    name: str = ""


def expected(recipe, tensor_type):
    """(class, attributes) of the quantizer TE runs for a fp8scope recipe on a tensor type."""
    weight, grad = tensor_type == "weight", tensor_type == "grad_output"
    if recipe == "bf16":
        return te.IdentityQuantizer, {}
    if recipe == "tensor_current":  # Float8CurrentScaling(HYBRID): E5M2 gradients
        return te.Float8CurrentScalingQuantizer, {"dtype": te.DType.kFloat8E5M2 if grad else te.DType.kFloat8E4M3}
    if recipe == "mxfp8":  # MXFP8BlockScaling(E4M3)
        return te.MXFP8Quantizer, {"dtype": te.DType.kFloat8E4M3, "with_2d_quantization": False}
    nvfp4 = {"dtype": te.DType.kFloat4E2M1, "with_2d_quantization": weight, "with_rht": False,
             "with_post_rht_amax": False, "stochastic_rounding": False, "row_scaled_nvfp4": False,
             "nvfp4_use_4over6": False, "nvfp4_e4m3_max": 448}
    if recipe == "nvfp4":  # disable_rht=True, disable_stochastic_rounding=True
        return te.NVFP4Quantizer, nvfp4
    if recipe == "nvfp4_rht":  # the transform on input and grad_output, never the weight
        return te.NVFP4Quantizer, dict(nvfp4, with_rht=not weight, with_post_rht_amax=not weight)
    if recipe == "nvfp4_sr":
        return te.NVFP4Quantizer, dict(nvfp4, stochastic_rounding=grad)
    if recipe == "nvfp4_4over6":
        return te.NVFP4Quantizer, dict(nvfp4, nvfp4_use_4over6=not grad, nvfp4_e4m3_max=448 if grad else 256)
    if recipe == "nvfp4_te":  # NVFP4BlockScaling(): the transform on X and Dy, SR on Dy, 16x16 W
        return te.NVFP4Quantizer, dict(nvfp4, with_rht=not weight, with_post_rht_amax=not weight, stochastic_rounding=grad)
    if recipe == "nvfp4_row":
        return te.NVFP4Quantizer, dict(nvfp4, row_scaled_nvfp4=tensor_type == "input")
    raise ValueError(f"no expectation for recipe {recipe}")


def family(q):
    return type(q).__name__


def copies(q):
    if isinstance(q, te.HybridQuantizer):
        assert q.rowwise_quantizer.rowwise_usage and not q.rowwise_quantizer.columnwise_usage
        assert q.columnwise_quantizer.columnwise_usage and not q.columnwise_quantizer.rowwise_usage
        return q.rowwise_quantizer, q.columnwise_quantizer
    return q, q


def main():
    module_path, plan_path = sys.argv[1], sys.argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    spec = importlib.util.spec_from_file_location("written_recipe", module_path)
    written = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(written)
    failures = []
    if not isinstance(written.recipe, CustomRecipe):
        failures.append("recipe is not a CustomRecipe")
    qfactory = written.recipe.qfactory
    for slot in (None, QuantizerRole("linear", "output", "x"), QuantizerRole("linear", "grad_input", "x")):
        if not isinstance(qfactory(slot), te.IdentityQuantizer):
            failures.append(f"{slot}: expected an IdentityQuantizer for a slot without a tensor to quantize")
    layers = dict(plan["gemms"])
    layers["not.sampled.by.fp8scope"] = {}
    for layer, gemms in layers.items():
        quantizers = {}
        for tensor_type, (row_gemm, col_gemm) in COPIES.items():
            q = qfactory(QuantizerRole("linear", tensor_type, layer))
            quantizers[tensor_type] = copies(q)
            for which, gemm in ((0, row_gemm), (1, col_gemm)):
                recipe = gemms.get(gemm, plan["fallback"])
                cls, attrs = expected(recipe, tensor_type)
                got = quantizers[tensor_type][which]
                what = f"{layer} {tensor_type} {'row' if which == 0 else 'column'}-wise copy ({gemm}: {recipe})"
                if type(got) is not cls:
                    failures.append(f"{what}: expected {cls.__name__}, got {type(got).__name__}")
                    continue
                for key, value in attrs.items():
                    if getattr(got, key) != value:
                        failures.append(f"{what}: expected {key}={value!r}, got {getattr(got, key)!r}")
            if quantizers[tensor_type][0] is quantizers[tensor_type][1] and isinstance(q, te.HybridQuantizer):
                failures.append(f"{layer} {tensor_type}: one object for both copies of a HybridQuantizer")
        for gemm, operands in GEMM_OPERANDS.items():
            (a, i), (b, j) = operands
            if family(quantizers[a][i]) != family(quantizers[b][j]):
                failures.append(f"{layer} {gemm}: its operands' copies are of different families "
                                f"({family(quantizers[a][i])}, {family(quantizers[b][j])}): cuBLAS refuses that")
    for f in failures:
        print(f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
