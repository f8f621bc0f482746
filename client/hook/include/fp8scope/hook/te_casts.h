// One Transformer Engine cast as its interposed entry point (interpose_te.cc) hands it to the hook:
// which tensors hold the cast's input or the fused kernel's inputs, its output, its options. The
// hook reads them (te_tensors.h) after the real call returned and before the caller can free them.
#pragma once

#include <cstdint>
#include <optional>

#include "fp8scope/hook/te_api.h"
#include "fp8scope/vocabulary/cast_capture.h"

namespace fp8scope::hook {

struct TeCastCall {
  const char* entry = "";                  // the entry point, e.g. "nvte_quantize_v2"
  CastSource source = CastSource::kInput;
  te::Tensor input = nullptr;              // x, or a dactivation's gradient
  te::Tensor output = nullptr;             // the codes and scales it wrote
  te::Tensor activation_input = nullptr;   // a dactivation's
  te::Tensor gamma = nullptr, beta = nullptr, mu = nullptr, rsigma = nullptr;  // a norm's
  te::Tensor matrix = nullptr;             // the Hadamard transform's 16x16
  te::QuantConfig config = nullptr;
  te::Tensor noop = nullptr;               // nvte_quantize_noop's flag (else the config's)
  std::optional<Activation> activation;
  float limit = 0, alpha = 0, linear_offset = 0;  // a clamped SwiGLU's
  float epsilon = 0;                       // a norm's
  bool zero_centered_gamma = false;
  // A split of the input along its rows (the grouped casts: the output holds rows
  // [row_offset, row_offset + split_rows)); split_rows 0: the whole input.
  std::uint64_t row_offset = 0, split_rows = 0;
  te::Stream stream = nullptr;
};

}  // namespace fp8scope::hook
