#include "fp8scope/checkpoint/conventions.h"

#include <fnmatch.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/tensorfile/bounded_file.h"

namespace fp8scope::checkpoint {
namespace {

constexpr std::uint64_t kMaxConfigBytes = 1 << 20;  // hf_quant_config.json: a few hundred bytes

using nlohmann::json;

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> strings(const json& j, const char* key) {
  std::vector<std::string> out;
  if (j.contains(key) && j[key].is_array()) {
    for (const json& v : j[key]) {
      if (v.is_string()) out.push_back(v.get<std::string>());
    }
  }
  return out;
}

Declaration declared(Convention c, std::string why, std::vector<std::int64_t> block, IgnoreRule rule,
                     std::vector<std::string> ignore) {
  Declaration d;
  d.convention = c;
  d.declared = true;
  d.why = std::move(why);
  d.block = std::move(block);
  d.ignore_rule = rule;
  d.ignore = std::move(ignore);
  return d;
}

// The declaration of a config whose activations are cast with a static scale per layer, and what said so.
Declaration with_static_activations(Declaration d, std::string why) {
  d.static_activations = true;
  d.activations_why = std::move(why);
  return d;
}

// vLLM's fp8 method: activation_scheme "static" loads one input_scale per layer.
Declaration with_activation_scheme(Declaration d, const json& q) {
  const bool is_static =
      q.contains("activation_scheme") && q["activation_scheme"].is_string() && q["activation_scheme"] == "static";
  return is_static ? with_static_activations(std::move(d), "activation_scheme \"static\"") : d;
}

// quant_method "fp8": DeepSeek-V3's block FP8 with weight_block_size, else per-tensor scales
// (vLLM fp8.py Fp8Config.from_config: quant_method, activation_scheme, ignored_layers, weight_block_size).
Result<Declaration> fp8_config(const json& q) {
  std::vector<std::string> ignore = strings(q, "ignored_layers");
  for (const std::string& m : strings(q, "modules_to_not_convert")) ignore.push_back(m);
  if (q.contains("weight_block_size")) {
    const json& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_unsigned() || !b[1].is_number_unsigned()) {
      return Status::error("quantization_config.weight_block_size: expected [rows, columns], got " + b.dump());
    }
    Declaration d = declared(Convention::kDeepSeekBlockFp8, "quant_method fp8 with weight_block_size " + b.dump(),
                             {b[0].get<std::int64_t>(), b[1].get<std::int64_t>()}, IgnoreRule::kExact, ignore);
    return with_activation_scheme(std::move(d), q);
  }
  return with_activation_scheme(declared(Convention::kPerTensorFp8, "quant_method fp8 without weight_block_size",
                                         {0, 0}, IgnoreRule::kExact, ignore),
                                q);
}

// compressed-tensors: the first config group of 8-bit float weights, its strategy's scale shape
// (quant_args.py:109-120; initialize.py:199-250).
Result<Declaration> compressed_tensors_config(const json& q) {
  const std::string format = q.value("format", "");
  if (format != "float-quantized" && format != "naive-quantized") {
    return Status::error("quantization_config.format: compressed-tensors format '" + format +
                         "' is not one fp8scope reads (float-quantized, naive-quantized)");
  }
  if (!q.contains("config_groups") || !q["config_groups"].is_object()) {
    return Status::error("quantization_config.config_groups: expected an object of groups");
  }
  for (const auto& [group, g] : q["config_groups"].items()) {
    if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object()) continue;
    const json& w = g["weights"];
    if (w.value("type", "") != "float" || w.value("num_bits", 0) != 8) continue;
    std::string strategy = w.value("strategy", "");
    const std::int64_t group_size = w.contains("group_size") && w["group_size"].is_number_integer()
                                        ? w["group_size"].get<std::int64_t>() : 0;
    if (strategy.empty()) strategy = group_size > 0 ? "group" : (group_size == -1 ? "channel" : "tensor");
    std::vector<std::int64_t> block;
    if (strategy == "tensor") block = {0, 0};
    if (strategy == "channel") block = {1, 0};
    if (strategy == "group") block = {1, group_size};
    if (strategy == "block") {
      const json& b = w.contains("block_structure") ? w["block_structure"] : json();
      if (!b.is_array() || b.size() != 2) {
        return Status::error("quantization_config.config_groups." + group + ".weights.block_structure: expected [rows, columns]");
      }
      block = {b[0].get<std::int64_t>(), b[1].get<std::int64_t>()};
    }
    if (block.empty()) {
      return Status::error("quantization_config.config_groups." + group + ".weights.strategy: '" + strategy +
                           "' is not a weight strategy fp8scope reads (tensor, channel, group, block)");
    }
    Declaration d = declared(Convention::kCompressedTensorsFp8,
                             "quant_method compressed-tensors, format " + format + ", " + group + " weights float8 " + strategy,
                             block, IgnoreRule::kExactOrRegex, strings(q, "ignore"));
    // Static input activations (quant_args.py: dynamic false) are scaled by each layer's input_scale.
    if (g.contains("input_activations") && g["input_activations"].is_object() &&
        g["input_activations"].value("dynamic", true) == false) {
      return with_static_activations(std::move(d), group + ".input_activations with dynamic false");
    }
    return d;
  }
  return Status::error("quantization_config.config_groups: no group of 8-bit float weights");
}

// ModelOpt: config.json's quantization_config (quant_method modelopt) or hf_quant_config.json's
// "quantization" (vLLM modelopt.py from_config accepts both).
Result<Declaration> modelopt_config(const json& q, const std::string& source) {
  std::string algo = q.value("quant_algo", "");
  for (char& c : algo) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::vector<std::string> ignore = strings(q, "exclude_modules");
  for (const std::string& m : strings(q, "ignore")) ignore.push_back(m);
  // ModelOpt's FP8 and NVFP4 quantize activations with a static per-layer scale.
  if (algo == "FP8") {
    return with_static_activations(
        declared(Convention::kModelOptFp8, source + ": ModelOpt quant_algo FP8", {0, 0}, IgnoreRule::kGlob, ignore),
        "ModelOpt quant_algo FP8");
  }
  if (algo == "NVFP4") {
    const std::int64_t group = q.contains("group_size") && q["group_size"].is_number_integer() ? q["group_size"].get<std::int64_t>() : 16;
    return with_static_activations(declared(Convention::kModelOptNvfp4,
                                            source + ": ModelOpt quant_algo NVFP4, group_size " + std::to_string(group),
                                            {1, group}, IgnoreRule::kGlob, ignore),
                                   "ModelOpt quant_algo NVFP4");
  }
  return Status::error(source + ": ModelOpt quant_algo '" + algo + "' is not one fp8scope reads (FP8, NVFP4)");
}

Result<Declaration> from_config(const json& q, const std::string& source) {
  const std::string method = q.value("quant_method", "");
  if (method == "fp8") return fp8_config(q);
  if (method == "compressed-tensors") return compressed_tensors_config(q);
  if (method.rfind("modelopt", 0) == 0) return modelopt_config(q, source);
  if (method == "mxfp4") {
    return declared(Convention::kGptOssMxfp4, "quant_method mxfp4", {1, 32}, IgnoreRule::kRegex,
                    strings(q, "modules_to_not_convert"));
  }
  return Status::error(source + ": quantization_config.quant_method '" + method +
                       "' is not one fp8scope reads (fp8, compressed-tensors, modelopt, mxfp4)");
}

// No declaration: what the tensors' names and dtypes show.
Result<Declaration> detect(const CheckpointFiles& files) {
  Declaration d;
  bool fp8_weights = false, scalar_scales = false, other_scales = false;
  for (const CheckpointTensor& t : files.tensors()) {
    const std::string& n = t.name;
    const std::string dtype = t.entry.dtype->name;
    if (ends_with(n, "_blocks") && dtype == "U8" && files.find(n.substr(0, n.size() - 7) + "_scales") != nullptr) {
      d.convention = Convention::kGptOssMxfp4;
      d.why = "U8 tensors *_blocks with *_scales beside them (" + n + "), as gpt-oss ships MXFP4";
      d.block = {1, 32};
      return d;
    }
    if (ends_with(n, ".weight_scale_2")) {
      d.convention = Convention::kModelOptNvfp4;
      d.why = "weight_scale_2 tensors (" + n + "): ModelOpt NVFP4's per-tensor scale";
      d.block = {1, 16};
      return d;
    }
    if (ends_with(n, ".weight_scale_inv")) {
      d.convention = Convention::kDeepSeekBlockFp8;
      d.why = "weight_scale_inv tensors (" + n + "), as DeepSeek-V3 ships block FP8";
      d.block = {128, 128};
      return d;
    }
    fp8_weights |= dtype.rfind("F8_", 0) == 0 && ends_with(n, ".weight");
    if (ends_with(n, ".weight_scale")) (t.entry.numel() == 1 ? scalar_scales : other_scales) = true;
  }
  if (other_scales) {
    d.convention = Convention::kCompressedTensorsFp8;
    d.why = "weight_scale tensors with more than one value: per-channel, group or block scales";
    return d;
  }
  if (scalar_scales) {
    d.convention = Convention::kPerTensorFp8;
    d.why = "one weight_scale value per FP8 weight";
    d.block = {0, 0};
    return d;
  }
  if (fp8_weights) return Status::error("FP8 weights and no scale tensor a convention names (weight_scale, weight_scale_inv)");
  return Status::error("no quantized weight: no FP8 or FP4 tensor a convention names (a high-precision checkpoint?)");
}

Result<json> parse(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::error(source + ": not a JSON object");
  return j;
}

// A quantization section of `source`: its fields of the wrong JSON type (a number where a name
// belongs) are the file's error, never an exception out of the command.
Result<Declaration> declared_in(const json& section, const std::string& key, const std::string& source,
                                Result<Declaration> (*read)(const json&, const std::string&)) {
  if (!section.is_object()) return Status::error(source + ": " + key + ": expected an object");
  try {
    Result<Declaration> d = read(section, source);
    if (d.ok()) d.value().config_file = source;
    if (!d.ok() && d.message().rfind(source, 0) != 0) return Status::error(source + ": " + d.message());
    return d;
  } catch (const json::exception& e) {
    return Status::error(source + ": " + key + ": " + e.what());
  }
}

}  // namespace

const ConventionInfo& convention_info(Convention c) { return kConventions[static_cast<std::size_t>(c)]; }

std::optional<Convention> convention_from_name(std::string_view name) {
  for (const ConventionInfo& c : kConventions) {
    if (name == c.name) return c.value;
  }
  return std::nullopt;
}

std::string convention_names() {
  std::string names;
  for (const ConventionInfo& c : kConventions) names += std::string(names.empty() ? "" : ", ") + c.name;
  return names;
}

Result<Declaration> read_declaration(const CheckpointFiles& files) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::is_directory(files.path(), ec)
                                        ? std::filesystem::path(files.path())
                                        : std::filesystem::path(files.path()).parent_path();
  if (!files.config_text().empty()) {
    const std::string source = (dir / "config.json").string();
    Result<json> config = parse(files.config_text(), source);
    if (!config.ok()) return config.status();
    if (config.value().contains("quantization_config")) {
      Result<Declaration> d = declared_in(config.value()["quantization_config"], "quantization_config", source, from_config);
      if (d.ok()) {
        const json& c = config.value();
        auto size = [&](const char* key) { return c.contains(key) && c[key].is_number_integer() ? c[key].get<std::int64_t>() : 0; };
        d.value().hidden_size = size("hidden_size");
        d.value().intermediate_size = size("intermediate_size");
      }
      return d;
    }
  }
  const std::filesystem::path legacy = dir / "hf_quant_config.json";
  if (std::filesystem::symlink_status(legacy, ec).type() != std::filesystem::file_type::not_found && !ec) {
    Result<std::string> text = tensorfile::read_bounded_file(legacy.string(), kMaxConfigBytes);
    if (!text.ok()) return text.status();
    Result<json> j = parse(text.value(), legacy.string());
    if (!j.ok()) return j.status();
    if (j.value().contains("quantization")) {
      return declared_in(j.value()["quantization"], "quantization", legacy.string(), modelopt_config);
    }
  }
  return detect(files);
}

bool ignored(const Declaration& d, const std::string& module, std::vector<std::string>* unreadable) {
  auto regex = [&](const std::string& pattern) {
    std::string error;
    const std::optional<LayerPattern> p = LayerPattern::compile("^(?:" + pattern + ")", &error);
    if (!p) {
      if (unreadable) unreadable->push_back(pattern + " (" + error + ")");
      return false;
    }
    return p->search(module);
  };
  for (const std::string& entry : d.ignore) {
    switch (d.ignore_rule) {
      case IgnoreRule::kExact:
        if (module == entry) return true;
        break;
      case IgnoreRule::kExactOrRegex:
        if (entry.rfind("re:", 0) == 0 ? regex(entry.substr(3)) : module == entry) return true;
        break;
      case IgnoreRule::kGlob:
        if (::fnmatch(entry.c_str(), module.c_str(), 0) == 0) return true;
        break;
      case IgnoreRule::kRegex:
        // transformers: re.match(f"{key}\\.", name) or re.match(key, name)
        if (regex(entry)) return true;
        break;
    }
  }
  return false;
}

}  // namespace fp8scope::checkpoint
