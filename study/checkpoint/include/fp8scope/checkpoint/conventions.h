// The conventions FP8/FP4 exports are written in, one row each with the loader its rules come
// from, and what a checkpoint declares or shows of them: which convention, its block shape, and
// which layers it leaves unquantized (each loader's own matching rule). Citations: the research
// notes the rules were taken from name the loader file and line (commits in README, "Checkpoint").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8scope/checkpoint/checkpoint_files.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope::checkpoint {

// How the convention's producer casts an element, which "codes equal the reference cast" must
// model exactly: producers differ in where they round.
enum class ProducerCast : std::uint8_t {
  kDivideF32,     // q = e4m3(fp32(x) / s)                      DeepSeek-V3 kernel.py:32; vLLM scaled_quantize
  kDivideBf16,    // q = e4m3(bf16(x / s)): the quotient rounded to BF16 first (torch on BF16 weights:
                  // compressed-tensors forward_helpers.py:525-546 _quantize, ModelOpt quant_utils.py:771)
  kNvfp4,         // q = e2m1(fp32(x) / (fp32(ue4m3 scale) * scale_2))   ModelOpt nvfp4_tensor.py:215-217
  kMxfp4,         // q = e2m1(fp32(x) * 2^-e), e rounded up: triton_kernels mxfp.py downcast_to_mxfp
};

#define FP8SCOPE_CHECKPOINT_CONVENTIONS(ROW)                                                                  \
  ROW(DeepSeekBlockFp8, "deepseek_fp8_block", kDivideF32,                                                      \
      "DeepSeek-V3 inference/kernel.py:83-85 weight_dequant (x * weight_scale_inv per 128x128 block), "       \
      "model.py:184-187 (scale grid ceil(out/128) x ceil(in/128)); vLLM fp8.py Fp8LinearMethod")               \
  ROW(CompressedTensorsFp8, "compressed_tensors_fp8", kDivideBf16,                                             \
      "compressed-tensors forward_helpers.py:550-572 _dequantize (x_q * scale), initialize.py:199-250 "       \
      "(scale shapes by strategy), utils/match.py:422-445 (re: targets); vLLM compressed_tensors_w8a8_fp8.py") \
  ROW(ModelOptFp8, "modelopt_fp8", kDivideBf16,                                                                \
      "ModelOpt export/quant_utils.py:848-852 from_quantized_weight (q * weight_scale), "                      \
      "unified_export_hf.py:262-266 (a 0-d F32 scale, amax/448); vLLM modelopt.py ModelOptFp8LinearMethod")    \
  ROW(ModelOptNvfp4, "modelopt_nvfp4", kNvfp4,                                                                 \
      "ModelOpt nvfp4_tensor.py:280-296 NVFP4QTensor.dequantize (e2m1 * fp32(weight_scale) * weight_scale_2), " \
      ":227 (element 2k in the low nibble); vLLM modelopt.py ModelOptNvFp4LinearMethod")                        \
  ROW(GptOssMxfp4, "gpt_oss_mxfp4", kMxfp4,                                                                    \
      "gpt-oss gpt_oss/torch/weights.py:68-117 (FP4 value * 2^(scale - 127), low nibble first); transformers " \
      "integrations/mxfp4.py convert_moe_packed_tensors")                                                       \
  ROW(PerTensorFp8, "per_tensor_fp8", kDivideF32,                                                              \
      "vLLM fp8.py Fp8LinearMethod (weight_scale per tensor, q * s), utils/w8a8_utils.py per_tensor_dequantize")

enum class Convention : std::uint8_t { FP8SCOPE_CHECKPOINT_CONVENTIONS(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct ConventionInfo {
  Convention value;
  const char* name;
  ProducerCast cast;
  const char* loader;  // where its rules come from
};

inline constexpr ConventionInfo kConventions[] = {
#define FP8SCOPE_ROW(id, name, cast, loader) {Convention::k##id, name, ProducerCast::cast, loader},
    FP8SCOPE_CHECKPOINT_CONVENTIONS(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};

const ConventionInfo& convention_info(Convention c);
std::optional<Convention> convention_from_name(std::string_view name);
std::string convention_names();  // "deepseek_fp8_block, ...", for messages

// How a loader decides a layer stays unquantized from the config's list of names.
enum class IgnoreRule : std::uint8_t {
  kExact,        // the module name itself (vLLM is_layer_skipped: ignored_layers, modules_to_not_convert)
  kExactOrRegex, // equal, or "re:" + a regex matched at the start (compressed-tensors match.py:422-445)
  kGlob,         // fnmatch, trailing-* prefixes (ModelOpt exclude_modules; vLLM is_layer_excluded)
  kRegex,        // a regex matched at the start (transformers mxfp4.py should_convert_module)
};

// What config.json declares (or, without a declaration, what the tensors show, and why).
struct Declaration {
  Convention convention = Convention::kPerTensorFp8;
  bool declared = false;   // read from config.json; else detected
  std::string why;         // the keys or tensors it was read from
  // The weight scales' block shape along [out, in] as declared: {0, 0} one per tensor, {1, 0} one
  // per row, {1, g} groups along in, {r, c} blocks; empty when the convention fixes it.
  std::vector<std::int64_t> block;
  std::vector<std::string> ignore;
  IgnoreRule ignore_rule = IgnoreRule::kExact;
  std::string config_file;  // config.json, or ModelOpt's hf_quant_config.json
  // The loader reads each quantized layer's activation scale, `input_scale`: the config declares
  // static activation quantization (vLLM fp8.py Fp8Config activation_scheme "static";
  // compressed-tensors input_activations with dynamic false, compressed_tensors_w8a8_fp8.py
  // is_static_input_scheme; ModelOpt FP8 and NVFP4 always, modelopt.py create_weights). Where it was read.
  bool static_activations = false;
  std::string activations_why;
  // config.json's model dimensions (0 when absent): the shapes the loader reads expert weights in.
  std::int64_t hidden_size = 0, intermediate_size = 0;
};

// From config.json's quantization_config (or hf_quant_config.json beside it), else detected from
// the tensors' names; an error when the config declares a method fp8scope does not read, or
// names nothing a convention explains.
Result<Declaration> read_declaration(const CheckpointFiles& files);

// Whether a module (a weight's name without ".weight") is on the ignore list, by its rule. An
// entry the rule cannot read (a regex past fp8scope's dialect) is reported in `unreadable`.
bool ignored(const Declaration& d, const std::string& module, std::vector<std::string>* unreadable = nullptr);

}  // namespace fp8scope::checkpoint
