// What TE's main branch and nvdlfw_inspect accept in a debug-API config, as a checker for the
// YAML fp8scope advise writes. Rules from nvdlfw_inspect dc19d10 (nvdlfw_inspect/config_manager.py)
// and TE d0067d0 (transformer_engine/debug/features/), cited line by line; TE loads configs with
// nvdlfw_inspect's manager, so a config that breaks a rule fails at debug_api.initialize or at the
// first GEMM of a matching layer.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/pattern/python_regex.h"

namespace fp8scope::testing {

struct TeFeatureRule {
  const char* name;
  std::set<std::string> keys;  // besides `enabled`
  bool needs_gemms;            // TEConfigAPIMapper: gemms or gemms_struct, else ValueError (api.py:83-86)
};

// Features registered in the transformer_engine namespace at TE d0067d0, by their current names.
// DisableFP8GEMM/DisableFP8Layer are registered too but deprecated (disable_fp8_gemm.py:52-58,
// disable_fp8_layer.py:41-47): written configs use the new names. AutoswitchGemm is TE PR #2883's
// (not on main) and is accepted only when the caller opted in.
inline const std::vector<TeFeatureRule>& te_feature_rules() {
  static const std::vector<TeFeatureRule> rules = {
      // disable_quantization_gemm.py:21-26, :52-54 (any key but gemm raises)
      {"DisableQuantizationGEMM", {"gemms", "gemms_struct"}, true},
      // disable_quantization_layer.py:40-42, :51-61
      {"DisableQuantizationLayer", {}, false},
      // per_tensor_scaling.py:61-68 (gemms/gemms_struct, tensors/tensors_struct)
      {"PerTensorScaling", {"gemms", "gemms_struct", "tensors", "tensors_struct"}, true},
  };
  return rules;
}

// TE PR #2883 (transformer_engine/debug/features/autoswitch_gemm.py at f2a119c: :104-107, :434-450).
inline const TeFeatureRule& autoswitch_gemm_rule() {
  static const TeFeatureRule rule{"AutoswitchGemm",
                                  {"gemms", "tensors", "underflow_threshold_pct", "mse_threshold", "freq"}, true};
  return rule;
}

inline bool is_gemm(const std::string& g) { return g == "fprop" || g == "dgrad" || g == "wgrad"; }  // api.py:45-49
inline bool is_te_tensor(const std::string& t) {  // per_tensor_scaling.py:67-72
  return t == "activation" || t == "gradient" || t == "weight";
}

// Every rule `yaml` breaks, one line each; empty when TE main would load it. `layers` are the
// layer names the job has: each may be selected by one enabled section only (config_manager.py:230-237).
inline std::vector<std::string> te_debug_config_violations(const std::string& yaml, const std::vector<std::string>& layers,
                                                           bool allow_autoswitch_gemm = false) {
  std::vector<std::string> bad;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return {std::string("not YAML: ") + e.what()};
  }
  if (!root.IsMap() || root.size() == 0) return {"the config has no sections"};  // config_manager.py:220-222
  std::map<std::string, std::string> selected_by;  // layer -> section
  for (const auto& section : root) {
    const std::string name = section.first.as<std::string>();
    const YAML::Node body = section.second;
    if (!body.IsMap()) {
      bad.push_back(name + ": a section is a map");  // :186-187
      continue;
    }
    if (!body["enabled"]) bad.push_back(name + ": no enabled");  // :188-190
    if (body["enabled"] && !body["enabled"].as<bool>()) continue;  // :192, :212-215
    const YAML::Node sel = body["layers"];
    if (!sel || !sel.IsMap()) {
      bad.push_back(name + ": no layers selector");  // :134
      continue;
    }
    const char* known[] = {"layer_numbers", "layer_types", "exact_layer_names", "layer_name_regex_pattern"};  // :58-63
    if (std::none_of(std::begin(known), std::end(known), [&](const char* k) { return static_cast<bool>(sel[k]); })) {
      bad.push_back(name + ": layers names none of layer_numbers, layer_types, exact_layer_names, "
                           "layer_name_regex_pattern");  // :65-75
    }
    if (sel["layer_name_regex_pattern"]) {  // re.search, and it takes precedence (:268-269)
      std::string error;
      const auto translated = translate_python_regex(sel["layer_name_regex_pattern"].as<std::string>(), &error);
      const auto pattern = translated ? LayerPattern::compile(*translated, &error) : std::nullopt;
      if (!pattern) {
        bad.push_back(name + ": layer_name_regex_pattern: " + error);
      } else {
        for (const std::string& layer : layers) {
          if (!pattern->search(layer)) continue;
          if (auto [it, fresh] = selected_by.emplace(layer, name); !fresh) {
            bad.push_back(layer + " is selected by " + it->second + " and " + name);
          }
        }
      }
    }
    bool has_feature = false;
    for (const auto& key : body) {
      const std::string k = key.first.as<std::string>();
      if (k == "enabled" || k == "layers") continue;
      if (k != "transformer_engine") {  // any other key must be a base-namespace feature (:205-209)
        bad.push_back(name + ": " + k + " is not a namespace TE registers");
        continue;
      }
      for (const auto& feature : key.second) {
        has_feature = true;
        const std::string f = feature.first.as<std::string>();
        const YAML::Node fields = feature.second;
        const TeFeatureRule* rule = nullptr;
        for (const TeFeatureRule& r : te_feature_rules()) {
          if (f == r.name) rule = &r;
        }
        if (allow_autoswitch_gemm && f == autoswitch_gemm_rule().name) rule = &autoswitch_gemm_rule();
        if (rule == nullptr) {  // :199-204
          bad.push_back(name + ": " + f + " is not a feature TE's main branch registers (by its current name)");
          continue;
        }
        if (!fields.IsMap() || !fields["enabled"]) bad.push_back(name + ": " + f + ": no enabled");  // base.py:189-195
        if (!fields.IsMap()) continue;
        for (const auto& field : fields) {
          const std::string fk = field.first.as<std::string>();
          if (fk != "enabled" && !rule->keys.count(fk)) bad.push_back(name + ": " + f + ": unexpected key " + fk);
        }
        if (rule->needs_gemms && !fields["gemms"] && !fields["gemms_struct"]) {
          bad.push_back(name + ": " + f + ": needs gemms or gemms_struct");
        }
        for (const auto& g : fields["gemms"]) {
          if (!is_gemm(g.as<std::string>())) bad.push_back(name + ": " + f + ": gemm " + g.as<std::string>());
        }
        for (const auto& t : fields["tensors"]) {
          if (!is_te_tensor(t.as<std::string>())) bad.push_back(name + ": " + f + ": tensor " + t.as<std::string>());
        }
        for (const auto& entry : fields["gemms_struct"]) {  // api.py:55-70
          if (!entry["gemm"] || !is_gemm(entry["gemm"].as<std::string>())) bad.push_back(name + ": " + f + ": gemms_struct gemm");
          if (entry["enabled"]) bad.push_back(name + ": " + f + ": enabled inside gemms_struct");  // api.py:65-67
          for (const auto& t : entry["tensors"]) {
            if (!is_te_tensor(t.as<std::string>())) bad.push_back(name + ": " + f + ": tensor " + t.as<std::string>());
          }
        }
      }
    }
    if (!has_feature) bad.push_back(name + ": no feature");
  }
  return bad;
}

}  // namespace fp8scope::testing
