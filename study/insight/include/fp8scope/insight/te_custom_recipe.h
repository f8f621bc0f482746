// The recipe ladder (recipe_ladder.h) written as Transformer Engine runs it: a Python module that
// defines `qfactory` and `recipe = CustomRecipe(qfactory=qfactory)`. TE's debug-API YAML cannot say
// "run this GEMM in MXFP8 and that one in NVFP4": its features only disable quantization
// (transformer_engine/debug/features/ at TE d0067d0). TE's hybrid quantization (PR #2817) can: a
// tensor's row-wise and column-wise copies take quantizers of their own (HybridQuantizer,
// pytorch/tensor/hybrid_tensor.py:81-87), chosen per module and tensor by a CustomRecipe's
// qfactory (common/recipe/__init__.py:630-693; role.name is the module's name=, role.tensor_type
// input, weight or grad_output, pytorch/quantization.py:56-87). Each GEMM reads one copy of each
// operand (pytorch/cpp_extensions/gemm.py:213-223; hybrid_tensor.py:358-360): fprop the row-wise X
// and W, dgrad the column-wise W and row-wise Dy, wgrad the column-wise X and Dy; the two operands
// of a GEMM then share its recipe, as cuBLAS requires (common/gemm/cublaslt_gemm.cu:106-111).
#pragma once

#include <ostream>
#include <string>

#include "fp8scope/insight/recipe_ladder.h"

namespace fp8scope::insight {

// Which GEMM reads a TE tensor type's row-wise and column-wise copy.
struct TeCopies {
  const char* tensor_type;  // TE's role.tensor_type
  const char* operand;      // fp8scope's
  const char* rowwise_gemm;
  const char* columnwise_gemm;
};
inline constexpr TeCopies kTeCopies[] = {
    {"input", "x", "fprop", "wgrad"}, {"weight", "w", "fprop", "dgrad"}, {"grad_output", "dy", "dgrad", "wgrad"}};

// The module: a plan per layer (module name) and tensor type, the quantizer of each recipe the
// ladder names with the options its fp8scope recipe stands for, and layers the run did not sample
// (and GEMMs of a layer it did not) in the recipe most of its GEMMs took (of a tie, the first by
// name).
void write_te_custom_recipe(const RecipeLadder& ladder, const std::string& run, std::ostream& out);

}  // namespace fp8scope::insight
