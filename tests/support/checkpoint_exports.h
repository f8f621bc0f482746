// FP8/FP4 exports written the way their producers write them, for the checkpoint tests: the
// on-disk layout the public loaders expect (names, dtype strings, shapes, config.json) and each
// producer's cast taken from its documented rules and computed with NVIDIA's own conversions
// (cuda_fp8.h, cuda_fp4.h, cuda_bf16.h), not with fp8scope's code. Each function returns the
// tensors of one layer; write_export() puts them in shards with an index and a config.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace fp8scope::testing {

struct StTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

// One .safetensors file (safetensors README "Format": size, JSON header padded with spaces to 8).
inline void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors) {
  std::string header = "{";
  std::uint64_t at = 0;
  for (const StTensor& t : tensors) {
    std::string shape;
    for (std::int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + t.dtype +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(at) + "," +
              std::to_string(at + t.bytes.size()) + "]}";
    at += t.bytes.size();
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out << header;
  for (const StTensor& t : tensors) out << t.bytes;
}

// A checkpoint directory: config.json, the tensors split over `shards` files
// (model-0000i-of-0000n.safetensors) with model.safetensors.index.json, or model.safetensors.
inline void write_export(const std::string& dir, const std::string& config_json, const std::vector<StTensor>& tensors,
                         int shards = 1) {
  std::filesystem::create_directories(dir);
  if (!config_json.empty()) std::ofstream(dir + "/config.json") << config_json;
  if (shards == 1) return write_safetensors(dir + "/model.safetensors", tensors);
  std::vector<std::vector<StTensor>> parts(static_cast<std::size_t>(shards));
  std::string map;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::size_t s = i * static_cast<std::size_t>(shards) / tensors.size();
    parts[s].push_back(tensors[i]);
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05d.safetensors", s + 1, shards);
    map += (map.empty() ? "" : ",") + std::string("\"") + tensors[i].name + "\":\"" + name + "\"";
  }
  for (std::size_t s = 0; s < parts.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "/model-%05zu-of-%05d.safetensors", s + 1, shards);
    write_safetensors(dir + name, parts[s]);
  }
  std::ofstream(dir + "/model.safetensors.index.json") << "{\"metadata\":{},\"weight_map\":{" << map << "}}";
}

// ---- values -------------------------------------------------------------------------------------

inline float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
inline std::uint16_t bf16_bits(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  std::uint16_t bits;
  std::memcpy(&bits, &b, 2);
  return bits;
}
inline std::uint8_t e4m3(float v) { return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3); }
inline float e4m3_value(std::uint8_t c) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3))); }
inline std::uint8_t e2m1(float v) { return __nv_cvt_float_to_fp4(v, __NV_E2M1, cudaRoundNearest); }

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A high-precision weight, row-major [rows, cols], rounded to BF16 as the trained weights are:
// N(0, 0.02) with a few outliers (one row and one column larger), no all-zero block.
struct Weight {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> v;
  float at(std::int64_t r, std::int64_t c) const { return v[static_cast<std::size_t>(r * cols + c)]; }
};

inline Weight random_weight(std::int64_t rows, std::int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.02f);
  Weight w{rows, cols, {}};
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      float x = n(rng) * (r == 3 ? 8.0f : 1.0f) * (c == 5 ? 4.0f : 1.0f);
      w.v.push_back(bf16_round(x == 0.0f ? 1e-4f : x));
    }
  }
  return w;
}

inline StTensor bf16_tensor(const std::string& name, const Weight& w) {
  std::vector<std::uint16_t> b;
  for (float x : w.v) b.push_back(bf16_bits(x));
  return {name, "BF16", {w.rows, w.cols}, bytes_of(b)};
}

inline float block_amax(const Weight& w, std::int64_t r0, std::int64_t c0, std::int64_t br, std::int64_t bc) {
  float a = 0;
  for (std::int64_t r = r0; r < std::min(r0 + br, w.rows); ++r) {
    for (std::int64_t c = c0; c < std::min(c0 + bc, w.cols); ++c) a = std::max(a, std::fabs(w.at(r, c)));
  }
  return a;
}

// ---- producers ----------------------------------------------------------------------------------

// DeepSeek-V3 block FP8 (README_WEIGHTS.md:85-90, kernel.py:25-33): per block s = amax/448 in fp32,
// q = e4m3(x / s), s stored as weight_scale_inv F32 [ceil(out/b), ceil(in/b)].
inline std::vector<StTensor> deepseek_layer(const std::string& module, const Weight& w, std::int64_t block = 128) {
  const std::int64_t gr = (w.rows + block - 1) / block, gc = (w.cols + block - 1) / block;
  std::vector<float> scales;
  for (std::int64_t i = 0; i < gr; ++i) {
    for (std::int64_t j = 0; j < gc; ++j) scales.push_back(block_amax(w, i * block, j * block, block, block) / 448.0f);
  }
  std::vector<std::uint8_t> codes;
  for (std::int64_t r = 0; r < w.rows; ++r) {
    for (std::int64_t c = 0; c < w.cols; ++c) codes.push_back(e4m3(w.at(r, c) / scales[static_cast<std::size_t>(r / block * gc + c / block)]));
  }
  return {{module + ".weight", "F8_E4M3", {w.rows, w.cols}, bytes_of(codes)},
          {module + ".weight_scale_inv", "F32", {gr, gc}, bytes_of(scales)}};
}

inline const char* kDeepSeekConfig =
    R"({"architectures":["DeepseekV3ForCausalLM"],"quantization_config":{"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8","weight_block_size":[128,128]}})";

// compressed-tensors FP8 (helpers.py:86 scale = amax/448 in the weight's dtype, BF16;
// forward_helpers.py:525-546 q = (x / scale).to(fp8) with torch's BF16 division): per channel
// [out, 1] or per 128x128 block [ceil(out/128), ceil(in/128)], BF16 scales.
inline std::vector<StTensor> compressed_tensors_layer(const std::string& module, const Weight& w, bool block) {
  const std::int64_t br = block ? 128 : 1, bc = block ? 128 : w.cols;
  const std::int64_t gr = (w.rows + br - 1) / br, gc = (w.cols + bc - 1) / bc;
  std::vector<float> scales;
  std::vector<std::uint16_t> stored;
  for (std::int64_t i = 0; i < gr; ++i) {
    for (std::int64_t j = 0; j < gc; ++j) {
      scales.push_back(bf16_round(block_amax(w, i * br, j * bc, br, bc) / 448.0f));
      stored.push_back(bf16_bits(scales.back()));
    }
  }
  std::vector<std::uint8_t> codes;
  for (std::int64_t r = 0; r < w.rows; ++r) {
    for (std::int64_t c = 0; c < w.cols; ++c) {
      codes.push_back(e4m3(bf16_round(w.at(r, c) / scales[static_cast<std::size_t>(r / br * gc + c / bc)])));
    }
  }
  return {{module + ".weight", "F8_E4M3", {w.rows, w.cols}, bytes_of(codes)},
          {module + ".weight_scale", "BF16", block ? std::vector<std::int64_t>{gr, gc} : std::vector<std::int64_t>{w.rows, 1},
           bytes_of(stored)}};
}

inline std::string compressed_tensors_config(bool block) {
  return std::string(R"({"quantization_config":{"quant_method":"compressed-tensors","format":"float-quantized",)"
                     R"("quantization_status":"compressed","config_groups":{"group_0":{"targets":["Linear"],)"
                     R"("weights":{"num_bits":8,"type":"float","symmetric":true,"dynamic":false,"strategy":")") +
         (block ? R"(block","block_structure":[128,128]})" : R"(channel"})") +
         R"(,"input_activations":null}},"ignore":["lm_head","re:.*mlp\\.gate$"]}})";
}

// ModelOpt FP8 (unified_export_hf.py:262-266 weight_scale = amax/448, a 0-d F32; quant_utils.py:771
// (weight / weights_scaling_factor).to(fp8) with the BF16 weight: the quotient rounded to BF16).
inline std::vector<StTensor> modelopt_fp8_layer(const std::string& module, const Weight& w) {
  const float s = block_amax(w, 0, 0, w.rows, w.cols) / 448.0f;
  std::vector<std::uint8_t> codes;
  for (float x : w.v) codes.push_back(e4m3(bf16_round(x / s)));
  const float input_scale = 0.5f / 448.0f;
  return {{module + ".weight", "F8_E4M3", {w.rows, w.cols}, bytes_of(codes)},
          {module + ".weight_scale", "F32", {}, bytes_of(std::vector<float>{s})},
          {module + ".input_scale", "F32", {}, bytes_of(std::vector<float>{input_scale})}};
}

inline const char* kModelOptFp8Config =
    R"({"quantization_config":{"quant_method":"modelopt","quant_algo":"FP8","ignore":["lm_head","model.layers.*.mlp.gate"],"producer":{"name":"modelopt"}}})";

// ModelOpt NVFP4 (nvfp4_tensor.py:56-92, 215-227): weight_scale_2 = amax/2688 (0-d F32), block
// scales e4m3(block_amax / (6 * weight_scale_2)) F8_E4M3 [out, in/16], codes e2m1(x / (fp32(ws) *
// weight_scale_2)) packed two a byte, element 2k in the low nibble, U8 [out, in/2].
inline std::vector<StTensor> modelopt_nvfp4_layer(const std::string& module, const Weight& w) {
  const float s2 = block_amax(w, 0, 0, w.rows, w.cols) / (6.0f * 448.0f);
  std::vector<std::uint8_t> scales, packed;
  for (std::int64_t r = 0; r < w.rows; ++r) {
    for (std::int64_t j = 0; j < w.cols / 16; ++j) {
      const float a = block_amax(w, r, j * 16, 1, 16);
      scales.push_back(e4m3(a == 0.0f ? 1.0f : a / (6.0f * s2)));
    }
  }
  for (std::int64_t r = 0; r < w.rows; ++r) {
    for (std::int64_t c = 0; c < w.cols; c += 2) {
      const float s = e4m3_value(scales[static_cast<std::size_t>(r * (w.cols / 16) + c / 16)]) * s2;
      packed.push_back(static_cast<std::uint8_t>(e2m1(w.at(r, c) / s) | e2m1(w.at(r, c + 1) / s) << 4));
    }
  }
  return {{module + ".weight", "U8", {w.rows, w.cols / 2}, bytes_of(packed)},
          {module + ".weight_scale", "F8_E4M3", {w.rows, w.cols / 16}, bytes_of(scales)},
          {module + ".weight_scale_2", "F32", {}, bytes_of(std::vector<float>{s2})},
          {module + ".input_scale", "F32", {}, bytes_of(std::vector<float>{0.5f / 2688.0f})}};
}

inline const char* kModelOptNvfp4Config =
    R"({"quantization_config":{"quant_method":"modelopt","quant_algo":"NVFP4","group_size":16,"ignore":["lm_head"]}})";

// gpt-oss MXFP4 (weights.py:68-117; triton_kernels downcast_to_mxfp): experts [E, out, in] in 1x32
// blocks, scale 2^ceil(log2(amax/6)) stored as its biased exponent (U8 [E, out, in/32]), codes
// e2m1(x * 2^-e) packed low nibble first (U8 [E, out, in/32, 16]).
inline std::vector<StTensor> gpt_oss_experts(const std::string& module, const std::vector<Weight>& experts) {
  const Weight& w0 = experts[0];
  const std::int64_t groups = w0.cols / 32;
  std::vector<std::uint8_t> scales, packed;
  for (const Weight& w : experts) {
    for (std::int64_t r = 0; r < w.rows; ++r) {
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::uint8_t e = __nv_cvt_float_to_e8m0(block_amax(w, r, g * 32, 1, 32) / 6.0f, __NV_SATFINITE, cudaRoundPosInf);
        scales.push_back(e);
        const float inv = std::ldexp(1.0f, 127 - e);
        for (std::int64_t c = g * 32; c < g * 32 + 32; c += 2) {
          packed.push_back(static_cast<std::uint8_t>(e2m1(w.at(r, c) * inv) | e2m1(w.at(r, c + 1) * inv) << 4));
        }
      }
    }
  }
  const std::int64_t e = static_cast<std::int64_t>(experts.size());
  return {{module + "_blocks", "U8", {e, w0.rows, groups, 16}, bytes_of(packed)},
          {module + "_scales", "U8", {e, w0.rows, groups}, bytes_of(scales)}};
}

// transformers keeps a gpt-oss expert parameter [E, in, out] (convert_moe_packed_tensors).
inline StTensor gpt_oss_reference(const std::string& module, const std::vector<Weight>& experts) {
  std::vector<std::uint16_t> b;
  for (const Weight& w : experts) {
    for (std::int64_t c = 0; c < w.cols; ++c) {
      for (std::int64_t r = 0; r < w.rows; ++r) b.push_back(bf16_bits(w.at(r, c)));
    }
  }
  return {module, "BF16", {static_cast<std::int64_t>(experts.size()), experts[0].cols, experts[0].rows}, bytes_of(b)};
}

inline const char* kGptOssConfig =
    R"({"quantization_config":{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn","model.layers.*.mlp.router","model.embed_tokens","lm_head"]}})";

// Per-tensor FP8 as vLLM's fp8 method loads it (fp8.py Fp8LinearMethod: weight_scale [1] F32 =
// amax/448, q = e4m3(x / s) in fp32; input_scale for static activations).
inline std::vector<StTensor> per_tensor_layer(const std::string& module, const Weight& w, float scale_override = 0) {
  const float s = block_amax(w, 0, 0, w.rows, w.cols) / 448.0f;
  std::vector<std::uint8_t> codes;
  for (float x : w.v) codes.push_back(e4m3(x / s));
  return {{module + ".weight", "F8_E4M3", {w.rows, w.cols}, bytes_of(codes)},
          {module + ".weight_scale", "F32", {1}, bytes_of(std::vector<float>{scale_override != 0 ? scale_override : s})},
          {module + ".input_scale", "F32", {1}, bytes_of(std::vector<float>{0.5f / 448.0f})}};
}

inline const char* kPerTensorConfig = R"({"quantization_config":{"quant_method":"fp8","activation_scheme":"static","ignored_layers":["lm_head"]}})";

}  // namespace fp8scope::testing
