// Advice written for the tools that act on it: a table for people, a Transformer Engine debug-API
// YAML (nvdlfw_inspect: DisableQuantizationGEMM, DisableQuantizationLayer, PerTensorScaling with layer regexes), a
// Megatron-style list of the transformer layers to keep in BF16, and JSON.
#pragma once

#include <ostream>
#include <string>

#include "fp8scope/insight/advice.h"

namespace fp8scope::insight {

void write_advice_table(const RunAdvice& advice, std::ostream& out, std::size_t max_rows = 0);
// The TE debug API's features fp8scope writes only when asked, because TE's main branch lacks them.
struct TeYamlOptions {
  bool autoswitch_gemm = false;  // TE PR #2883 (transformer_engine/debug/features/autoswitch_gemm.py)
};
// An nvdlfw_inspect config with the feature names of TE's main branch (checked at d0067d0:
// DisableQuantizationGEMM and DisableQuantizationLayer, whose old DisableFP8* names TE keeps only
// as deprecated aliases, transformer_engine/debug/features/disable_fp8_gemm.py:7).
void write_te_debug_yaml(const RunAdvice& advice, std::ostream& out, const TeYamlOptions& options = {});
void write_megatron_layers(const RunAdvice& advice, std::ostream& out);
std::string advice_json(const RunAdvice& advice);

// The layer name TE would know: fp8scope's label without its "#<ordinal>" suffix.
std::string module_name(const std::string& layer_label);
// The transformer layer number in a module name (the first ".<digits>." segment), or -1.
int transformer_layer_index(const std::string& module);

}  // namespace fp8scope::insight
