#include "fp8scope/cli/te_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "fp8scope/pattern/python_regex.h"

namespace fp8scope::cli {
namespace {

// A failure at a node: "FILE:LINE: KEY: why".
struct ConfigError {
  std::string message;
};

// TE's tensor names (debug_quantization.py:29-36) as the operands fp8scope samples: each in the
// GEMM that quantizes it first, and with _columnwise stats the GEMM that reads its transposed copy.
struct TeTensor {
  const char* name;
  Operand operand;
  GemmRole rowwise, columnwise;
};
constexpr TeTensor kTeTensors[] = {
    {"activation", Operand::kX, GemmRole::kFprop, GemmRole::kWgrad},
    {"weight", Operand::kW, GemmRole::kFprop, GemmRole::kDgrad},
    {"gradient", Operand::kDy, GemmRole::kDgrad, GemmRole::kWgrad},
};
// TE's other tensor names: GEMM outputs, which fp8scope does not sample.
constexpr const char* kTeOutputTensors[] = {"output", "wgrad", "dgrad"};

// LogFp8TensorStats' recipe prefixes (log_fp8_tensor_stats.py:36), found by substring in this
// order (get_recipe_from_stat, :227-234), and the what-ifs they are. fp8_block_scaling casts
// activations and gradients 1x128 and weights 128x128.
struct TeRecipePrefix {
  const char* prefix;
  RecipeKind inputs, weights;
  bool columnwise;  // whether _columnwise stats exist for it (:204-208)
};
constexpr TeRecipePrefix kTeRecipePrefixes[] = {
    {"fp8_delayed_scaling", RecipeKind::kTensorDelayed, RecipeKind::kTensorDelayed, false},
    {"fp8_current_scaling", RecipeKind::kTensorCurrent, RecipeKind::kTensorCurrent, false},
    {"mxfp8", RecipeKind::kMxfp8, RecipeKind::kMxfp8, true},
    {"fp8_block_scaling", RecipeKind::kBlock1x128, RecipeKind::kBlock128x128, true},
};

// LogTensorStats' stats (log_tensor_stats.py:102-125): those fp8scope computes for every sample.
constexpr const char* kComputedTensorStats[] = {"cur_amax", "dynamic_range", "mean", "std"};
constexpr const char* kUncomputedTensorStats[] = {"min", "max", "l1_norm", "l2_norm"};

// TE features that change what the job computes or writes: fp8scope observes only.
struct RunChangingFeature {
  const char* name;
  const char* why;
};
constexpr RunChangingFeature kRunChangingFeatures[] = {
    {"DisableQuantizationGEMM", "runs GEMMs in high precision"},
    {"DisableQuantizationLayer", "runs the layer in high precision"},
    {"DisableFP8GEMM", "runs GEMMs in high precision (TE's deprecated name of DisableQuantizationGEMM)"},
    {"DisableFP8Layer", "runs the layer in high precision (TE's deprecated name of DisableQuantizationLayer)"},
    {"PerTensorScaling", "changes the job's scaling"},
    {"FakeQuant", "changes the job's numerics"},
    {"DumpTensors", "writes tensor files from the job"},
};

enum class Feature { kTensorStats, kFp8TensorStats, kNvfp4TensorStats };
// nvdlfw's own LogTensorStats (the base namespace) counts steps by its own rule.
enum class StepDialect { kTe, kNvdlfw };

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  TeConfig read() {
    std::vector<YAML::Node> documents;
    try {
      documents = YAML::LoadAllFromFile(path_);
    } catch (const YAML::BadFile&) {
      throw ConfigError{path_ + ": cannot read the file"};
    } catch (const YAML::Exception& e) {
      throw ConfigError{path_ + ":" + std::to_string(e.mark.line + 1) + ": not YAML: " + e.msg};
    }
    if (documents.size() != 1) {
      throw ConfigError{path_ + ": " + std::to_string(documents.size()) +
                        " YAML documents; nvdlfw_inspect reads one (yaml.safe_load)"};
    }
    const YAML::Node& root = documents[0];
    if (!root.IsMap() || root.size() == 0) fail(root, "", "expected a map of sections");
    std::uint32_t group = 0;
    for (const auto& [name, section] : entries(root, "")) {
      ++group;
      read_section(name, section, group);
    }
    if (enabled_sections_ == 0) fail(root, "", "no enabled section (nvdlfw_inspect refuses such a config)");
    merge_rules();
    return std::move(config_);
  }

 private:
  [[noreturn]] void fail(const YAML::Node& at, const std::string& key, const std::string& why) const {
    throw ConfigError{where(at) + (key.empty() ? "" : " " + key + ":") + " " + why};
  }
  std::string where(const YAML::Node& at) const {
    const YAML::Mark mark = at.Mark();
    return path_ + ":" + (mark.is_null() ? std::string("?") : std::to_string(mark.line + 1)) + ":";
  }
  void note(const YAML::Node& at, const std::string& key, const std::string& what) {
    config_.not_applied.push_back(where(at) + " " + key + ": " + what);
  }

  // A map's entries, keys as strings; a key given twice is an error (PyYAML would keep the last).
  std::vector<std::pair<std::string, YAML::Node>> entries(const YAML::Node& map, const std::string& key) const {
    if (!map.IsMap()) fail(map, key, "expected a map");
    std::vector<std::pair<std::string, YAML::Node>> out;
    std::set<std::string> seen;
    for (const auto& entry : map) {
      const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : "";
      if (name.empty()) fail(entry.first, key, "expected a name");
      if (!seen.insert(name).second) fail(entry.first, key.empty() ? name : key + "." + name, "given twice");
      out.emplace_back(name, entry.second);
    }
    return out;
  }

  // Python's truth of a YAML value, as `if cfg["enabled"]:` takes it.
  static bool truthy(const YAML::Node& n) {
    if (n.IsNull()) return false;
    if (!n.IsScalar()) return n.size() > 0;
    bool b = false;
    if (YAML::convert<bool>::decode(n, b)) return b;
    const std::string& s = n.Scalar();
    if (s == "0" || s == "0.0") return false;
    return !s.empty();
  }

  std::int64_t integer(const YAML::Node& n, const std::string& key) const {
    std::int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<std::int64_t>::decode(n, v)) fail(n, key, "expected an integer");
    return v;
  }

  std::vector<std::string> strings(const YAML::Node& n, const std::string& key) const {
    std::vector<std::string> out;
    if (n.IsScalar()) return {n.Scalar()};
    if (!n.IsSequence()) fail(n, key, "expected a list");
    for (const YAML::Node& item : n) {
      if (!item.IsScalar()) fail(item, key, "expected a list of names");
      out.push_back(item.Scalar());
    }
    return out;
  }

  void read_section(const std::string& name, const YAML::Node& section, std::uint32_t group) {
    if (!section.IsMap()) fail(section, name, "expected a section (a map with enabled and layers)");
    if (!section["enabled"]) fail(section, name, "missing `enabled` (config_manager.py:188)");
    if (!truthy(section["enabled"])) {
      note(section, name, "disabled");
      return;
    }
    ++enabled_sections_;
    if (!section["layers"]) fail(section, name, "missing `layers` (config_manager.py:134)");
    const auto [layers, and_layers] = layer_patterns(section["layers"], name + ".layers");
    bool features = false;
    for (const auto& [key, value] : entries(section, name)) {
      if (key == "enabled" || key == "layers") continue;
      if (key == "transformer_engine") {
        for (const auto& [feature, config] : entries(value, name + "." + key)) {
          read_feature(name, feature, config, StepDialect::kTe, group, layers, and_layers);
          features = true;
        }
      } else if (key == "LogTensorStats") {  // nvdlfw's own, in the base namespace
        read_feature(name, key, value, StepDialect::kNvdlfw, group, layers, and_layers);
        features = true;
      } else {
        fail(value, name + "." + key, "Could not find feature '" + key + "' in namespace 'base' (config_manager.py:26)");
      }
    }
    if (!features) note(section, name, "has no feature: selects nothing");
  }

  std::pair<std::string, std::string> layer_patterns(const YAML::Node& layers, const std::string& key) {
    if (!layers.IsMap()) fail(layers, key, "expected a map of selectors");
    const YAML::Node exact = layers["exact_layer_names"], regex = layers["layer_name_regex_pattern"],
                     types = layers["layer_types"], numbers = layers["layer_numbers"];
    if (!exact && !regex && !types && !numbers) {
      fail(layers, key, "give layer_numbers, layer_types, exact_layer_names or layer_name_regex_pattern");
    }
    const auto ignored = [&](const char* decided_by) {
      for (const char* other : {"layer_name_regex_pattern", "layer_types", "layer_numbers"}) {
        if (layers[other] && std::strcmp(other, decided_by) != 0) {
          note(layers[other], key + "." + other, std::string("ignored: nvdlfw_inspect decides by ") + decided_by + " alone");
        }
      }
    };
    if (exact) {
      ignored("exact_layer_names");
      std::string alternatives;
      for (const std::string& n : strings(exact, key + ".exact_layer_names")) {
        alternatives += (alternatives.empty() ? "" : "|") + literal_pattern(n);
      }
      return {"^(?:" + alternatives + ")$", ""};
    }
    if (regex) {
      ignored("layer_name_regex_pattern");
      if (!regex.IsScalar()) fail(regex, key + ".layer_name_regex_pattern", "expected a pattern");
      std::string error;
      const std::optional<std::string> pattern = translate_python_regex(regex.Scalar(), &error);
      if (!pattern) fail(regex, key + ".layer_name_regex_pattern", "cannot be matched exactly: " + error);
      return {*pattern, ""};
    }
    std::string type_pattern, number_pattern;
    if (types) {
      const std::vector<std::string> names = strings(types, key + ".layer_types");
      if (std::find(names.begin(), names.end(), "all") == names.end()) {
        for (const std::string& n : names) type_pattern += (type_pattern.empty() ? "" : "|") + literal_pattern(n);
        type_pattern = "(?:" + type_pattern + ")";
      }
    }
    if (numbers) {
      std::string error;
      const std::optional<std::string> pattern = layer_number_pattern(layer_numbers(numbers, key + ".layer_numbers"), &error);
      if (!pattern) fail(numbers, key + ".layer_numbers", error);
      number_pattern = *pattern;
    }
    return {type_pattern, number_pattern};
  }

  // The numbers of layer_numbers (config_manager.py:93-122): ints and inclusive "a-b" ranges; "all"
  // (alone or in the list) is any number, here an empty list.
  std::vector<std::uint64_t> layer_numbers(const YAML::Node& n, const std::string& key) const {
    if (n.IsScalar() && n.Scalar() == "all") return {};
    if (!n.IsSequence()) fail(n, key, "expected a list of numbers and \"a-b\" ranges, or all");
    std::vector<std::uint64_t> out;
    for (const YAML::Node& item : n) {
      if (!item.IsScalar()) fail(item, key, "expected a number or an \"a-b\" range");
      if (item.Scalar() == "all") return {};
      std::int64_t v = 0;
      if (YAML::convert<std::int64_t>::decode(item, v)) {
        if (v < 0) fail(item, key, "expected a layer number of 0 or more");
        out.push_back(static_cast<std::uint64_t>(v));
        continue;
      }
      const std::string& s = item.Scalar();
      const std::size_t dash = s.find('-');
      std::uint64_t lo = 0, hi = 0;
      try {
        std::size_t used = 0;
        if (dash == std::string::npos) throw std::invalid_argument(s);
        lo = std::stoull(s.substr(0, dash), &used);
        if (used != dash) throw std::invalid_argument(s);
        hi = std::stoull(s.substr(dash + 1), &used);
        if (used != s.size() - dash - 1) throw std::invalid_argument(s);
      } catch (const std::exception&) {
        fail(item, key, "expected a number or an \"a-b\" range, got '" + s + "'");
      }
      if (hi < lo || hi - lo > 10000) fail(item, key, "a range out of order or over 10,000 layers: '" + s + "'");
      for (std::uint64_t k = lo; k <= hi; ++k) out.push_back(k);
    }
    return out;
  }

  void read_feature(const std::string& section, const std::string& feature, const YAML::Node& config,
                    StepDialect dialect, std::uint32_t group, const std::string& layers, const std::string& and_layers) {
    const std::string key = section + (dialect == StepDialect::kTe ? ".transformer_engine." : ".") + feature;
    for (const RunChangingFeature& f : kRunChangingFeatures) {
      if (feature == f.name) return note(config, key, std::string(f.why) + ": not applied (fp8scope only observes)");
    }
    Feature kind = Feature::kTensorStats;
    if (feature == "LogFp8TensorStats") {
      kind = Feature::kFp8TensorStats;
    } else if (feature == "LogNvfp4TensorStats") {
      kind = Feature::kNvfp4TensorStats;
    } else if (feature != "LogTensorStats") {
      fail(config, key, "Could not find feature '" + feature + "' in namespace 'transformer_engine' (config_manager.py:26)");
    }
    if (!config || config.IsNull() || (config.IsMap() && config.size() == 0)) return;  // nvdlfw: absent
    if (!config.IsMap()) fail(config, key, "expected a map of the feature's fields");
    if (!config["enabled"]) fail(config, key, "missing `enabled` (nvdlfw_inspect/base.py:185-195)");
    if (!truthy(config["enabled"])) return note(config, key, "disabled");
    if (config["gemms"] || config["gemms_struct"]) {
      note(config["gemms"] ? config["gemms"] : config["gemms_struct"], key,
           "gemms: TE's logging features read tensors only; ignored as TE ignores it");
    }
    // tensors_struct wins over tensors (base.py:32-58): each of its items is a tensor with its own fields.
    if (const YAML::Node structs = config["tensors_struct"]) {
      if (!structs.IsSequence()) fail(structs, key + ".tensors_struct", "expected a list of {tensor: ...}");
      std::set<std::string> seen;
      for (const YAML::Node& item : structs) {
        if (!item.IsMap() || !item["tensor"] || !item["tensor"].IsScalar()) {
          fail(item, key + ".tensors_struct", "expected an item with `tensor`");
        }
        const std::string tensor = item["tensor"].Scalar();
        if (!seen.insert(tensor).second) {
          note(item, key + ".tensors_struct", tensor + " again: TE uses the first item only");
          continue;
        }
        add_rule(key, kind, dialect, group, layers, and_layers, tensor, config, item);
      }
    } else if (const YAML::Node tensors = config["tensors"]) {
      std::vector<std::string> names;
      if (tensors.IsScalar()) {  // `tensor in "activation"`: the names the string holds
        for (const TeTensor& t : kTeTensors) {
          if (tensors.Scalar().find(t.name) != std::string::npos) names.emplace_back(t.name);
        }
        for (const char* t : kTeOutputTensors) {
          if (tensors.Scalar().find(t) != std::string::npos) names.emplace_back(t);
        }
      } else {
        names = strings(tensors, key + ".tensors");
      }
      for (const std::string& tensor : names) add_rule(key, kind, dialect, group, layers, and_layers, tensor, config, YAML::Node());
    } else {
      fail(config, key, "Provide 'tensors_struct: List[Dict]' or 'tensors: List[str]' (nvdlfw_inspect/base.py:57)");
    }
  }

  // A field of a tensor: its struct item's, else the feature's.
  static YAML::Node field(const YAML::Node& feature, const YAML::Node& item, const char* name) {
    if (item && item.IsMap() && item[name]) return item[name];
    return feature[name];
  }

  void add_rule(const std::string& key, Feature kind, StepDialect dialect, std::uint32_t group, const std::string& layers,
                const std::string& and_layers, const std::string& tensor, const YAML::Node& feature, const YAML::Node& item) {
    const std::string where_key = key + " " + tensor;
    const YAML::Node at = item.IsMap() ? item : feature;
    const TeTensor* t = nullptr;
    for (const TeTensor& candidate : kTeTensors) {
      if (tensor == candidate.name) t = &candidate;
    }
    if (t == nullptr) {
      const bool output = std::find_if(std::begin(kTeOutputTensors), std::end(kTeOutputTensors),
                                       [&](const char* o) { return tensor == o; }) != std::end(kTeOutputTensors);
      return note(at, where_key, output ? "a GEMM output: fp8scope samples GEMM operands; not applied"
                                        : "not a tensor TE names: TE matches nothing; not applied");
    }
    const YAML::Node stats = field(feature, item, "stats");
    if (!stats) fail(at, where_key, "missing `stats`");
    bool columnwise = false;
    read_stats(stats, where_key, kind, t->operand, columnwise);

    SamplingRule rule;
    if (!steps(rule, feature, item, dialect, where_key)) return note(at, where_key, "never runs (end_step -1, or no step in its range): not applied");
    rule.tensors = tensor_bit(t->rowwise, t->operand) | (columnwise ? tensor_bit(t->columnwise, t->operand) : 0u);
    rule.group = group;
    std::strncpy(rule.layer_regex, layers.c_str(), sizeof rule.layer_regex - 1);
    std::strncpy(rule.and_layer_regex, and_layers.c_str(), sizeof rule.and_layer_regex - 1);
    if (layers.size() >= sizeof rule.layer_regex || and_layers.size() >= sizeof rule.and_layer_regex) {
      fail(at, where_key, "its layer selection is too long a pattern");
    }
    config_.rules.push_back({rule, where(at) + " " + where_key});
  }

  void read_stats(const YAML::Node& stats, const std::string& key, Feature kind, Operand operand, bool& columnwise) {
    if (!stats.IsSequence()) fail(stats, key + ".stats", "expected a list");
    for (const YAML::Node& s : stats) {
      if (s.IsMap() && kind == Feature::kTensorStats && s["max_blockwise_dynamic_range"]) {
        note(s, key + ".stats", "max_blockwise_dynamic_range: not computed (fp8scope's block dynamic range is the recipe's own block)");
        continue;
      }
      if (!s.IsScalar()) fail(s, key + ".stats", "expected a stat name");
      const std::string name = s.Scalar();
      if (kind == Feature::kTensorStats) {
        const auto in = [&](const auto& list) { return std::find(std::begin(list), std::end(list), name) != std::end(list); };
        if (in(kComputedTensorStats)) continue;
        if (in(kUncomputedTensorStats)) {
          note(s, key + ".stats", name + ": not computed by fp8scope");
          continue;
        }
        fail(s, key + ".stats", "Statistic " + name + " is not supported (log_tensor_stats.py:221)");
      }
      if (kind == Feature::kNvfp4TensorStats) {
        if (name != "underflows%" && name != "mse") {
          fail(s, key + ".stats", "Stat " + name + " is not supported for NVFP4. Supported stats: [underflows%, mse]");
        }
        continue;  // the job's own NVFP4 cast: fp8scope's observed statistics
      }
      read_fp8_stat(s, name, key, operand, columnwise);
    }
  }

  // [<recipe>_]<stat>[_columnwise] (log_fp8_tensor_stats.py:165-234).
  void read_fp8_stat(const YAML::Node& at, const std::string& name, const std::string& key, Operand operand, bool& columnwise) {
    std::string stat = name;
    const TeRecipePrefix* recipe = nullptr;
    for (const TeRecipePrefix& r : kTeRecipePrefixes) {
      if (name.find(r.prefix) != std::string::npos) {
        recipe = &r;
        const std::size_t at_prefix = name.find(r.prefix);
        stat = name.substr(0, at_prefix) + name.substr(std::min(name.size(), at_prefix + std::strlen(r.prefix) + 1));
        break;
      }
    }
    const std::string suffix = "_columnwise";
    const bool is_columnwise = stat.size() > suffix.size() && stat.compare(stat.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (is_columnwise) stat.resize(stat.size() - suffix.size());
    const bool delayed = recipe != nullptr && recipe->inputs == RecipeKind::kTensorDelayed;
    const bool known = stat == "underflows%" || stat == "scale_inv_min" || stat == "scale_inv_max" || stat == "mse" ||
                       (stat == "overflows%" && (delayed || recipe == nullptr));
    if (!known) fail(at, key + ".stats", "Stat " + name + " is not supported (log_fp8_tensor_stats.py:219)");
    if (is_columnwise && recipe != nullptr && !recipe->columnwise) {
      fail(at, key + ".stats", name + ": _columnwise is not supported for " + recipe->prefix + " (log_fp8_tensor_stats.py:204)");
    }
    columnwise = columnwise || is_columnwise;
    if (recipe == nullptr) return;  // the job's own quantization: fp8scope's observed statistics
    const RecipeKind kind = operand == Operand::kW ? recipe->weights : recipe->inputs;
    if (std::find(config_.recipes.begin(), config_.recipes.end(), kind) == config_.recipes.end()) {
      config_.recipes.push_back(kind);
    }
  }

  std::optional<std::int64_t> optional_integer(const YAML::Node& n, const std::string& key) const {
    if (!n || n.IsNull()) return std::nullopt;
    return integer(n, key);
  }

  // The rule's steps; false when the feature never runs.
  bool steps(SamplingRule& rule, const YAML::Node& feature, const YAML::Node& item, StepDialect dialect,
             const std::string& key) const {
    const YAML::Node freq_node = field(feature, item, "freq");
    const std::int64_t freq = freq_node && !freq_node.IsNull() ? integer(freq_node, key + ".freq") : 1;
    if (freq < 1) fail(freq_node, key + ".freq", "expected 1 or more");
    rule.every_n_steps = static_cast<std::uint64_t>(freq);
    rule.phase = 0;  // it % freq: counted from step 0, not from start_step
    const YAML::Node list = field(feature, item, "start_end_list");
    if (list && !list.IsNull() && !(list.IsSequence() && list.size() == 0)) {
      if (!list.IsSequence()) fail(list, key + ".start_end_list", "expected a list of [start, end]");
      if (list.size() > kMaxRuleStepRanges) {
        fail(list, key + ".start_end_list", "more than " + std::to_string(kMaxRuleStepRanges) + " ranges");
      }
      for (const YAML::Node& pair : list) {
        if (!pair.IsSequence() || pair.size() != 2) fail(pair, key + ".start_end_list", "expected [start, end]");
        const std::int64_t s = integer(pair[0], key + ".start_end_list"), e = integer(pair[1], key + ".start_end_list");
        const bool open = dialect == StepDialect::kNvdlfw && e == -1;
        if (s < 0 || (!open && e < 0)) fail(pair, key + ".start_end_list", "expected steps of 0 or more");
        // TE's ends are inclusive; nvdlfw's own are exclusive, -1 open (logging.py:203).
        const std::uint64_t end = open ? std::numeric_limits<std::uint64_t>::max()
                                       : static_cast<std::uint64_t>(e) + (dialect == StepDialect::kTe ? 1 : 0);
        if (end <= static_cast<std::uint64_t>(s)) continue;  // an empty range
        rule.ranges[rule.range_count++] = {static_cast<std::uint64_t>(s), end};
      }
      return rule.range_count > 0;
    }
    const std::optional<std::int64_t> start = optional_integer(field(feature, item, "start_step"), key + ".start_step");
    const std::optional<std::int64_t> end = optional_integer(field(feature, item, "end_step"), key + ".end_step");
    if (start && *start < 0) fail(field(feature, item, "start_step"), key + ".start_step", "expected 0 or more");
    rule.start_step = start ? static_cast<std::uint64_t>(*start) : 0;
    if (end && *end == -1) return dialect == StepDialect::kNvdlfw;  // TE: never; nvdlfw: no end
    if (end && *end < -1) fail(field(feature, item, "end_step"), key + ".end_step", "expected a step");
    if (end) {
      rule.end_step = static_cast<std::uint64_t>(*end) + 1;  // inclusive in both
      if (rule.end_step <= rule.start_step) return false;
    }
    return true;
  }

  // Rules that differ only in their tensors become one.
  void merge_rules() {
    std::vector<TeConfigRule> merged;
    for (TeConfigRule& r : config_.rules) {
      auto same = std::find_if(merged.begin(), merged.end(), [&](const TeConfigRule& m) {
        const SamplingRule &a = m.rule, &b = r.rule;
        bool equal = a.every_n_steps == b.every_n_steps && a.phase == b.phase && a.start_step == b.start_step &&
                     a.end_step == b.end_step && a.range_count == b.range_count && a.group == b.group &&
                     std::strcmp(a.layer_regex, b.layer_regex) == 0 && std::strcmp(a.and_layer_regex, b.and_layer_regex) == 0;
        for (std::uint32_t i = 0; equal && i < a.range_count; ++i) {
          equal = a.ranges[i].start == b.ranges[i].start && a.ranges[i].end == b.ranges[i].end;
        }
        return equal;
      });
      if (same == merged.end()) {
        merged.push_back(r);
      } else {
        same->rule.tensors |= r.rule.tensors;
        same->source += "; " + r.source.substr(r.source.find(' ') + 1);
      }
    }
    if (merged.size() > kMaxSamplingRules) {
      throw ConfigError{path_ + ": " + std::to_string(merged.size()) + " rules after merging (fp8scope carries " +
                        std::to_string(kMaxSamplingRules) + "): fewer sections or tensor structs"};
    }
    config_.rules = std::move(merged);
  }

  std::string path_;
  TeConfig config_;
  int enabled_sections_ = 0;
};

}  // namespace

Result<TeConfig> read_te_config(const std::string& path) {
  try {
    return Reader(path).read();
  } catch (const ConfigError& e) {
    return Status::error(e.message);
  } catch (const YAML::Exception& e) {
    return Status::error(path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

}  // namespace fp8scope::cli
