# TE d0067d0's quantizer classes as transformer_engine.pytorch exports them (pytorch/__init__.py:20,
# 85-99), each with TE's constructor signature; they keep their arguments for the tests to read.
import enum
from typing import Literal, Optional


class DType(enum.IntEnum):  # pytorch/constants.py:14
    kByte = 0
    kInt32 = 2
    kFloat32 = 4
    kFloat16 = 5
    kBFloat16 = 6
    kFloat8E4M3 = 7
    kFloat8E5M2 = 8
    kFloat4E2M1 = 10


class Quantizer:
    def __init__(self, *, rowwise: bool, columnwise: bool):
        self.rowwise_usage = rowwise
        self.columnwise_usage = columnwise

    def set_usage(self, *, rowwise=None, columnwise=None):
        if rowwise is not None:
            self.rowwise_usage = rowwise
        if columnwise is not None:
            self.columnwise_usage = columnwise


class Float8CurrentScalingQuantizer(Quantizer):  # pytorch/tensor/float8_tensor.py:227-241
    def __init__(self, fp8_dtype, device, *, rowwise=True, columnwise=True, use_existing_amax=False,
                 with_amax_reduction=False, amax_reduction_group=None, force_pow_2_scales=False, amax_epsilon=0.0,
                 scale=None, amax=None):
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        self.dtype = DType(fp8_dtype)
        self.device = device
        self.force_pow_2_scales = force_pow_2_scales
        self.amax_epsilon = amax_epsilon


class MXFP8Quantizer(Quantizer):  # pytorch/tensor/mxfp8_tensor.py:39-46
    def __init__(self, fp8_dtype, *, rowwise=True, columnwise=True, with_2d_quantization=False):
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        self.dtype = DType(fp8_dtype)
        self.with_2d_quantization = with_2d_quantization


class NVFP4Quantizer(Quantizer):  # pytorch/tensor/nvfp4_tensor.py:142-172
    def __init__(self, fp4_dtype=DType.kFloat4E2M1, rowwise=True, columnwise=True, with_amax_reduction=False,
                 amax_reduction_group=None, with_rht=False, with_post_rht_amax=False, with_2d_quantization=False,
                 stochastic_rounding=False, row_scaled_nvfp4=False, nvfp4_use_4over6=False, nvfp4_e4m3_max=448,
                 nvfp4_4over6_err_mode="MAE", with_random_sign_mask=True):
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        self.dtype = DType(fp4_dtype)
        self.with_rht = with_rht
        self.with_post_rht_amax = with_post_rht_amax
        self.with_2d_quantization = with_2d_quantization
        self.stochastic_rounding = stochastic_rounding
        self.row_scaled_nvfp4 = row_scaled_nvfp4
        self.nvfp4_use_4over6 = nvfp4_use_4over6
        self.nvfp4_e4m3_max = nvfp4_e4m3_max if nvfp4_use_4over6 else 448
        if self.nvfp4_e4m3_max not in (448, 256):
            raise ValueError("nvfp4_e4m3_max must be 448 or 256.")
        self.nvfp4_4over6_err_mode = nvfp4_4over6_err_mode.upper()


class IdentityQuantizer(Quantizer):  # pytorch/tensor/identity_tensor.py:44-49
    def __init__(self, *, dtype=None, rowwise=True, columnwise=True):
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        self.dtype = dtype


class HybridQuantizer(Quantizer):  # pytorch/tensor/hybrid_tensor.py:81-129
    _COLUMNWISE_SOURCES = ("original", "rowwise_dequantized")

    def __init__(self, *, rowwise_quantizer: Quantizer, columnwise_quantizer: Quantizer,
                 columnwise_source: Literal["original", "rowwise_dequantized"] = "original"):
        super().__init__(rowwise=True, columnwise=True)
        for role, quantizer in (("rowwise", rowwise_quantizer), ("columnwise", columnwise_quantizer)):
            if not isinstance(quantizer, Quantizer):
                raise TypeError(f"HybridQuantizer requires concrete Quantizer instances; {role} is "
                                f"{type(quantizer).__name__}")
        if rowwise_quantizer is columnwise_quantizer:
            raise ValueError("HybridQuantizer requires distinct rowwise and columnwise quantizer instances")
        if columnwise_source not in self._COLUMNWISE_SOURCES:
            raise ValueError(f"columnwise_source must be one of {self._COLUMNWISE_SOURCES}")
        self.rowwise_quantizer = rowwise_quantizer
        self.columnwise_quantizer = columnwise_quantizer
        self.columnwise_source = columnwise_source
        self.rowwise_quantizer.set_usage(rowwise=True, columnwise=False)
        self.columnwise_quantizer.set_usage(rowwise=False, columnwise=True)
