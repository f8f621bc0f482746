// A recipe per GEMM (advise's recipe ladder) written as Transformer Engine runs it: a Python module
// that defines `qfactory` and `recipe = CustomRecipe(qfactory=qfactory)`. TE's debug-API YAML cannot
// say "run this GEMM in MXFP8 and that one in NVFP4": its features only disable quantization
// (transformer_engine/debug/features/ at TE d0067d0). TE's hybrid quantization (PR #2817) can: a
// tensor's row-wise and column-wise copies take quantizers of their own (HybridQuantizer,
// pytorch/tensor/hybrid_tensor.py:81-87), chosen per module and tensor by a CustomRecipe's
// qfactory (common/recipe/__init__.py:630-693; role.name is the module's name=, role.tensor_type
// input, weight or grad_output, pytorch/quantization.py:56-87). Each GEMM reads one copy of each
// operand (te_names.h's kTensors): fprop the row-wise X and W, dgrad the column-wise W and row-wise
// Dy, wgrad the column-wise X and Dy; the two operands of a GEMM then share its recipe, as cuBLAS
// requires (common/gemm/cublaslt_gemm.cu:106-111).
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>

#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/recipe_kind.h"

namespace fp8scope::te {

// What one GEMM runs in: one of fp8scope's recipes, or nothing for high precision (BF16).
using GemmPrecision = std::optional<RecipeKind>;
// By module (TE's name= of the layer), then GEMM.
using ModulePrecisions = std::map<std::string, std::map<GemmRole, GemmPrecision>>;

// The name a precision has in the module fp8scope writes: the recipe's, or "bf16".
std::string precision_name(const GemmPrecision& p);

// The module: a plan per layer and tensor type, the quantizer of each recipe the plan names with
// the options its fp8scope recipe stands for, and layers the run did not sample (and GEMMs of a
// layer it did not) in `fallback`.
void write_te_custom_recipe(const ModulePrecisions& modules, const GemmPrecision& fallback, const std::string& run,
                            std::ostream& out);

}  // namespace fp8scope::te
