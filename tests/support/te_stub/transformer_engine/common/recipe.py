# TE d0067d0 transformer_engine/common/recipe/__init__.py:630-700: CustomRecipe's fields.
import dataclasses
from typing import Any, Callable, Optional


@dataclasses.dataclass
class CustomRecipe:
    qfactory: Callable[..., Any]
    fp8_format: Any = None
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: Optional[str] = None
    quantization_alignment: int = 128

    def __post_init__(self):
        assert callable(self.qfactory), "qfactory must be callable"
        assert self.quantization_alignment > 0
