#include "fp8scope/te/sampling_config.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "fp8scope/pattern/python_regex.h"
#include "fp8scope/te/te_names.h"

namespace fp8scope::te {
namespace {

// A failure at a value: "FILE:LINE: KEY: why".
struct ConfigError {
  std::string message;
};

// LogTensorStats' stats (log_tensor_stats.py:102-125): fp8scope computes them all for every sample.
constexpr const char* kComputedTensorStats[] = {"cur_amax", "dynamic_range", "mean", "std", "min", "max", "l1_norm", "l2_norm"};
// LogFp8TensorStats' stats without their recipe prefix (log_fp8_tensor_stats.py:165-219).
constexpr const char* kFp8Stats[] = {"underflows%", "scale_inv_min", "scale_inv_max", "mse"};
// LogNvfp4TensorStats' (log_nvfp4_tensor_stats.py:86-100).
constexpr const char* kNvfp4Stats[] = {"underflows%", "mse"};

// nvdlfw's own LogTensorStats (the base namespace) counts steps by its own rule.

// At most this many layer numbers, all ranges together (a config names a model's layers).
constexpr std::size_t kMaxLayerNumbers = 100000;

template <class List>
bool in(const List& list, const std::string& name) {
  return std::find_if(std::begin(list), std::end(list), [&](const char* s) { return name == s; }) != std::end(list);
}

class Interpreter {
 public:
  explicit Interpreter(const DebugConfig& c) : c_(c) {}

  TeConfig run() {
    std::uint32_t group = 0;
    for (const SectionConfig& s : c_.sections) read_section(s, ++group);
    if (enabled_sections_ == 0) throw ConfigError{c_.path + ": no enabled section (nvdlfw_inspect refuses such a config)"};
    merge_rules();
    return std::move(config_);
  }

 private:
  std::string where(int line) const { return c_.path + ":" + (line > 0 ? std::to_string(line) : "?") + ":"; }
  [[noreturn]] void fail(const ConfigNode& at, const std::string& key, const std::string& why) const {
    throw ConfigError{where(at.line) + (key.empty() ? "" : " " + key + ":") + " " + why};
  }
  void note(int line, const std::string& key, const std::string& what) {
    config_.not_applied.push_back(where(line) + " " + key + ": " + what);
  }

  // Python's truth of a YAML value, as `if cfg["enabled"]:` takes it: YAML 1.1's booleans
  // (PyYAML's resolver) and numbers when plain, any other scalar by its length.
  static bool truthy(const ConfigNode& n) {
    if (n.is_null()) return false;
    if (!n.is_scalar()) return n.size() > 0;
    if (!n.plain) return !n.text.empty();
    static const std::set<std::string> kFalse = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "0", "0.0"};
    return kFalse.count(n.text) == 0;
  }

  std::int64_t integer(const ConfigNode& n, const std::string& key) const {
    if (!n.is_scalar() || n.text.empty()) fail(n, key, "expected an integer");
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(n.text, &used, 10);
    } catch (const std::exception&) {
      fail(n, key, "expected an integer, got '" + n.text + "'");
    }
    if (used != n.text.size()) fail(n, key, "expected an integer, got '" + n.text + "'");
    return v;
  }

  std::optional<std::int64_t> optional_integer(const ConfigNode* n, const std::string& key) const {
    if (n == nullptr || n->is_null()) return std::nullopt;
    return integer(*n, key);
  }

  std::vector<std::string> strings(const ConfigNode& n, const std::string& key) const {
    if (n.is_scalar()) return {n.text};
    if (!n.is_list()) fail(n, key, "expected a list");
    std::vector<std::string> out;
    for (const ConfigNode& item : n.items) {
      if (!item.is_scalar()) fail(item, key, "expected a list of names");
      out.push_back(item.text);
    }
    return out;
  }

  void read_section(const SectionConfig& s, std::uint32_t group) {
    if (s.enabled.is_null()) fail(with_line(s.line), s.name, "missing `enabled` (config_manager.py:188)");
    if (!truthy(s.enabled)) return note(s.line, s.name, "disabled");
    ++enabled_sections_;
    if (s.layers.is_null()) fail(with_line(s.line), s.name, "missing `layers` (config_manager.py:134)");
    const auto [layers, and_layers] = layer_patterns(s.layers, s.name + ".layers");
    for (const FeatureConfig& f : s.features) read_feature(s.name, f, group, layers, and_layers);
    if (s.features.empty()) note(s.line, s.name, "has no feature: selects nothing");
  }

  static ConfigNode with_line(int line) {
    ConfigNode n;
    n.line = line;
    return n;
  }

  std::pair<std::string, std::string> layer_patterns(const ConfigNode& layers, const std::string& key) {
    if (!layers.is_map()) fail(layers, key, "expected a map of selectors");
    const ConfigNode *exact = layers.find("exact_layer_names"), *regex = layers.find("layer_name_regex_pattern"),
                     *types = layers.find("layer_types"), *numbers = layers.find("layer_numbers");
    if (!exact && !regex && !types && !numbers) {
      fail(layers, key, "give layer_numbers, layer_types, exact_layer_names or layer_name_regex_pattern");
    }
    const auto ignored = [&](const char* decided_by) {
      for (const char* other : {"layer_name_regex_pattern", "layer_types", "layer_numbers"}) {
        if (const ConfigNode* n = layers.find(other); n != nullptr && std::strcmp(other, decided_by) != 0) {
          note(n->line, key + "." + other, std::string("ignored: nvdlfw_inspect decides by ") + decided_by + " alone");
        }
      }
    };
    if (exact) {
      ignored("exact_layer_names");
      std::string alternatives;
      for (const std::string& n : strings(*exact, key + ".exact_layer_names")) {
        alternatives += (alternatives.empty() ? "" : "|") + literal_pattern(n);
      }
      return {"^(?:" + alternatives + ")$", ""};
    }
    if (regex) {
      ignored("layer_name_regex_pattern");
      if (!regex->is_scalar()) fail(*regex, key + ".layer_name_regex_pattern", "expected a pattern");
      std::string error;
      const std::optional<std::string> pattern = translate_python_regex(regex->text, &error);
      if (!pattern) fail(*regex, key + ".layer_name_regex_pattern", "cannot be matched exactly: " + error);
      return {*pattern, ""};
    }
    std::string type_pattern, number_pattern;
    if (types) {
      const std::vector<std::string> names = strings(*types, key + ".layer_types");
      if (std::find(names.begin(), names.end(), "all") == names.end()) {
        for (const std::string& n : names) type_pattern += (type_pattern.empty() ? "" : "|") + literal_pattern(n);
        type_pattern = "(?:" + type_pattern + ")";
      }
    }
    if (numbers) {
      std::string error;
      const std::optional<std::string> pattern = layer_number_pattern(layer_numbers(*numbers, key + ".layer_numbers"), &error);
      if (!pattern) fail(*numbers, key + ".layer_numbers", error);
      number_pattern = *pattern;
    }
    return {type_pattern, number_pattern};
  }

  // The numbers of layer_numbers (config_manager.py:93-122): ints and inclusive "a-b" ranges; "all"
  // (alone or in the list) is any number, here an empty list.
  std::vector<std::uint64_t> layer_numbers(const ConfigNode& n, const std::string& key) const {
    if (n.is_scalar() && n.text == "all") return {};
    if (!n.is_list()) fail(n, key, "expected a list of numbers and \"a-b\" ranges, or all");
    std::vector<std::uint64_t> out;
    for (const ConfigNode& item : n.items) {
      if (!item.is_scalar()) fail(item, key, "expected a number or an \"a-b\" range");
      if (item.text == "all") return {};
      const std::string& s = item.text;
      const std::size_t dash = s.find('-', 1);
      std::uint64_t lo = 0, hi = 0;
      try {
        std::size_t used = 0;
        if (dash == std::string::npos) {
          const long long v = std::stoll(s, &used, 10);
          if (used != s.size()) throw std::invalid_argument(s);
          if (v < 0) fail(item, key, "expected a layer number of 0 or more");
          lo = hi = static_cast<std::uint64_t>(v);
        } else {
          lo = std::stoull(s.substr(0, dash), &used);
          if (used != dash) throw std::invalid_argument(s);
          hi = std::stoull(s.substr(dash + 1), &used);
          if (used != s.size() - dash - 1) throw std::invalid_argument(s);
        }
      } catch (const std::exception&) {
        fail(item, key, "expected a number or an \"a-b\" range, got '" + s + "'");
      }
      if (hi < lo || hi - lo > 10000) fail(item, key, "a range out of order or over 10,000 layers: '" + s + "'");
      if (out.size() + (hi - lo + 1) > kMaxLayerNumbers) {
        fail(item, key, "more than " + std::to_string(kMaxLayerNumbers) + " layer numbers");
      }
      for (std::uint64_t k = lo; k <= hi; ++k) out.push_back(k);
    }
    return out;
  }

  void read_feature(const std::string& section, const FeatureConfig& f, std::uint32_t group, const std::string& layers,
                    const std::string& and_layers) {
    const std::string key = section + (f.te_namespace ? std::string(".") + kTeNamespace + "." : ".") + f.name;
    const ConfigNode& config = f.fields;
    const FeatureName* known = feature_named(f.name, f.te_namespace);
    // nvdlfw_inspect also loads features from the job's own feature_dirs (the custom-feature
    // tutorial, TE's TestDummyFeature): their code is the job's, which fp8scope cannot run. The rest
    // of the config still applies.
    if (known == nullptr) {
      return note(f.line, key, "'" + f.name + "' is no feature of TE or nvdlfw_inspect in namespace '" +
                                   (f.te_namespace ? kTeNamespace : "base") +
                                   "': one from the job's feature_dirs, whose code fp8scope cannot run, or a "
                                   "misspelling (nvdlfw_inspect would refuse it, config_manager.py:26): not applied");
    }
    if (known->role == FeatureRole::kChangesRun) {
      return note(f.line, key, std::string(known->changes) + ": not applied (fp8scope only observes)");
    }
    if (known->role == FeatureRole::kNotCalledByTe) {
      return note(f.line, key, std::string(known->changes) + ", so a TE job never runs it: not applied");
    }
    if (config.is_null() || (config.is_map() && config.entries.empty())) return;  // nvdlfw: absent
    if (!config.is_map()) fail(config, key, "expected a map of the feature's fields");
    const ConfigNode* enabled = config.find("enabled");
    if (enabled == nullptr) fail(config, key, "missing `enabled` (nvdlfw_inspect/base.py:185-195)");
    if (!truthy(*enabled)) return note(config.line, key, "disabled");
    if (const ConfigNode* gemms = config.find("gemms") ? config.find("gemms") : config.find("gemms_struct")) {
      note(gemms->line, key, "gemms: TE's logging features read tensors only; ignored as TE ignores it");
    }
    // tensors_struct wins over tensors (base.py:32-58): each of its items is a tensor with its own fields.
    if (const ConfigNode* structs = config.find("tensors_struct")) {
      if (!structs->is_list()) fail(*structs, key + ".tensors_struct", "expected a list of {tensor: ...}");
      std::set<std::string> seen;
      for (const ConfigNode& item : structs->items) {
        const ConfigNode* tensor = item.is_map() ? item.find("tensor") : nullptr;
        if (tensor == nullptr || !tensor->is_scalar()) fail(item, key + ".tensors_struct", "expected an item with `tensor`");
        if (!seen.insert(tensor->text).second) {
          note(item.line, key + ".tensors_struct", tensor->text + " again: TE uses the first item only");
          continue;
        }
        add_rule(key, known->role, group, layers, and_layers, tensor->text, config, &item);
      }
    } else if (const ConfigNode* tensors = config.find("tensors")) {
      std::vector<std::string> names;
      if (tensors->is_scalar()) {  // `tensor in "activation"`: the names the string holds
        for (const TensorName& t : kTensors) {
          if (tensors->text.find(t.name) != std::string::npos) names.emplace_back(t.name);
        }
        for (const OutputName& o : kOutputs) {
          if (tensors->text.find(o.name) != std::string::npos) names.emplace_back(o.name);
        }
      } else {
        names = strings(*tensors, key + ".tensors");
      }
      for (const std::string& tensor : names) add_rule(key, known->role, group, layers, and_layers, tensor, config, nullptr);
    } else {
      fail(config, key, "Provide 'tensors_struct: List[Dict]' or 'tensors: List[str]' (nvdlfw_inspect/base.py:57)");
    }
  }

  // A field of a tensor: its struct item's, else the feature's.
  static const ConfigNode* field(const ConfigNode& feature, const ConfigNode* item, const char* name) {
    if (item != nullptr && item->is_map() && item->find(name) != nullptr) return item->find(name);
    return feature.find(name);
  }

  void add_rule(const std::string& key, FeatureRole role, std::uint32_t group,
                const std::string& layers, const std::string& and_layers, const std::string& tensor,
                const ConfigNode& feature, const ConfigNode* item) {
    const std::string where_key = key + " " + tensor;
    const ConfigNode& at = item != nullptr ? *item : feature;
    const TensorName* t = tensor_named(tensor);
    const OutputName* output = t == nullptr ? output_named(tensor) : nullptr;
    if (t == nullptr && output == nullptr) return note(at.line, where_key, "not a tensor TE names: TE matches nothing; not applied");
    // A GEMM output is copied as the GEMM wrote it, in high precision: its quantization, when the
    // job casts it at all, is another tensor's.
    if (output != nullptr && role != FeatureRole::kLogTensorStats) {
      return note(at.line, where_key,
                  std::string("a GEMM output: fp8scope samples it in high precision, ") + feature_name(role) +
                      " needs its quantization; not applied");
    }
    const Operand operand = t != nullptr ? t->operand : Operand::kOut;
    const ConfigNode* stats = field(feature, item, "stats");
    if (stats == nullptr) fail(at, where_key, "missing `stats`");
    bool columnwise = false;
    std::vector<std::string> logged = read_stats(*stats, where_key, role, operand, columnwise);

    SamplingRule rule;
    if (!steps(rule, feature, item, where_key)) {
      return note(at.line, where_key, "never runs (end_step -1, or no step in its range): not applied");
    }
    rule.tensors = output != nullptr ? tensor_bit(output->gemm, Operand::kOut)
                                     : tensor_bit(t->rowwise_gemm, t->operand) |
                                           (columnwise ? tensor_bit(t->columnwise_gemm, t->operand) : 0u);
    rule.group = group;
    if (layers.size() >= sizeof rule.layer_regex || and_layers.size() >= sizeof rule.and_layer_regex) {
      fail(at, where_key, "its layer selection is too long a pattern");
    }
    std::strncpy(rule.layer_regex, layers.c_str(), sizeof rule.layer_regex - 1);
    std::strncpy(rule.and_layer_regex, and_layers.c_str(), sizeof rule.and_layer_regex - 1);
    config_.rules.push_back({rule, where(at.line) + " " + where_key});
    config_.logged.push_back({rule, role, operand, std::move(logged)});
  }

  // The stats a feature names for a tensor, those fp8scope writes.
  std::vector<std::string> read_stats(const ConfigNode& stats, const std::string& key, FeatureRole role, Operand operand,
                                      bool& columnwise) {
    if (!stats.is_list()) fail(stats, key + ".stats", "expected a list");
    std::vector<std::string> out;
    for (const ConfigNode& s : stats.items) {
      if (s.is_map() && role == FeatureRole::kLogTensorStats && s.find("max_blockwise_dynamic_range")) {
        if (std::optional<std::string> name = read_block_range(s, key)) out.push_back(*name);
        continue;
      }
      if (!s.is_scalar()) fail(s, key + ".stats", "expected a stat name");
      const std::string& name = s.text;
      out.push_back(name);
      if (role == FeatureRole::kLogTensorStats) {
        if (in(kComputedTensorStats, name)) continue;
        fail(s, key + ".stats", "Statistic " + name + " is not supported (log_tensor_stats.py:221)");
      }
      if (role == FeatureRole::kLogNvfp4TensorStats) {
        if (!in(kNvfp4Stats, name)) {
          fail(s, key + ".stats", "Stat " + name + " is not supported for NVFP4. Supported stats: [underflows%, mse]");
        }
        continue;  // the job's own NVFP4 cast: fp8scope's observed statistics
      }
      read_fp8_stat(s, name, key, operand, columnwise);
    }
    return out;
  }

  // LogTensorStats' dict stat {max_blockwise_dynamic_range: {block_size, dims}}, TE's defaults 32
  // and 1 (log_tensor_stats.py:108-145): its name as the log writes it before any orientation
  // suffix (stats_computation.py:18-26); the daemon computes each shape (TeConfig::block_ranges).
  std::optional<std::string> read_block_range(const ConfigNode& s, const std::string& key) {
    const ConfigNode& fields = *s.find("max_blockwise_dynamic_range");
    if (s.entries.size() != 1 || !(fields.is_map() || fields.is_null())) {
      fail(s, key + ".stats", "expected {max_blockwise_dynamic_range: {block_size: N, dims: 1|2}}");
    }
    BlockRange range;
    for (const auto& [name, value] : fields.entries) {
      if (name != "block_size" && name != "dims") {
        fail(value, key + ".stats", "max_blockwise_dynamic_range: unknown key " + name +
                                        " (allowed: block_size, dims; log_tensor_stats.py:114)");
      }
      const std::int64_t v = integer(value, key + ".stats." + name);
      if (v < 0 || v > std::numeric_limits<std::uint32_t>::max()) fail(value, key + ".stats." + name, "out of range");
      (name == "block_size" ? range.block_size : range.dims) = static_cast<std::uint32_t>(v);
    }
    if (range.block_size == 0 || (range.dims != 1 && range.dims != 2)) {
      fail(s, key + ".stats", "max_blockwise_dynamic_range: expected block_size > 0 and dims 1 or 2 (log_tensor_stats.py:145)");
    }
    const std::string name = block_range_stat(range);
    if (range.block_size > kMaxRangeBlockSize) {
      note(s.line, key + ".stats", name + ": blocks over " + std::to_string(kMaxRangeBlockSize) + " a side: not computed");
      return std::nullopt;
    }
    auto& ranges = config_.block_ranges;
    if (std::find(ranges.begin(), ranges.end(), range) == ranges.end()) {
      if (ranges.size() == kMaxBlockRanges) {
        note(s.line, key + ".stats", name + ": more than " + std::to_string(kMaxBlockRanges) + " block shapes: not computed");
        return std::nullopt;
      }
      ranges.push_back(range);
    }
    return name;
  }

  // [<recipe>_]<stat>[_columnwise] (log_fp8_tensor_stats.py:165-234).
  void read_fp8_stat(const ConfigNode& at, const std::string& name, const std::string& key, Operand operand,
                     bool& columnwise) {
    std::string stat = name;
    const RecipeName* recipe = fp8_recipe_in_stat(name, operand);
    if (recipe != nullptr) {
      const std::size_t at_prefix = name.find(recipe->prefix);
      stat = name.substr(0, at_prefix) + name.substr(std::min(name.size(), at_prefix + std::strlen(recipe->prefix) + 1));
    }
    const std::string suffix = "_columnwise";
    const bool is_columnwise = stat.size() > suffix.size() && stat.compare(stat.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (is_columnwise) stat.resize(stat.size() - suffix.size());
    const bool delayed = recipe != nullptr && recipe->kind == RecipeKind::kTensorDelayed;
    const bool known = in(kFp8Stats, stat) || (stat == "overflows%" && (delayed || recipe == nullptr));
    if (!known) fail(at, key + ".stats", "Stat " + name + " is not supported (log_fp8_tensor_stats.py:219)");
    if (is_columnwise && recipe != nullptr && !recipe->columnwise_stats) {
      fail(at, key + ".stats",
           name + ": _columnwise is not supported for " + recipe->prefix + " (log_fp8_tensor_stats.py:204)");
    }
    columnwise = columnwise || is_columnwise;
    if (recipe == nullptr) return;  // the job's own quantization: fp8scope's observed statistics
    if (std::find(config_.recipes.begin(), config_.recipes.end(), recipe->kind) == config_.recipes.end()) {
      config_.recipes.push_back(recipe->kind);
    }
  }

  // The rule's steps; false when the feature never runs.
  bool steps(SamplingRule& rule, const ConfigNode& feature, const ConfigNode* item, const std::string& key) const {
    const ConfigNode* freq_node = field(feature, item, "freq");
    const std::int64_t freq = freq_node && !freq_node->is_null() ? integer(*freq_node, key + ".freq") : 1;
    if (freq < 1) fail(*freq_node, key + ".freq", "expected 1 or more");
    rule.every_n_steps = static_cast<std::uint64_t>(freq);
    rule.phase = 0;  // it % freq: counted from step 0, not from start_step
    const ConfigNode* list = field(feature, item, "start_end_list");
    if (list != nullptr && !list->is_null() && !(list->is_list() && list->items.empty())) {
      if (!list->is_list()) fail(*list, key + ".start_end_list", "expected a list of [start, end]");
      if (list->items.size() > kMaxRuleStepRanges) {
        fail(*list, key + ".start_end_list", "more than " + std::to_string(kMaxRuleStepRanges) + " ranges");
      }
      for (const ConfigNode& pair : list->items) {
        if (!pair.is_list() || pair.items.size() != 2) fail(pair, key + ".start_end_list", "expected [start, end]");
        const std::int64_t s = integer(pair.items[0], key + ".start_end_list"), e = integer(pair.items[1], key + ".start_end_list");
        if (s < 0 || e < 0) fail(pair, key + ".start_end_list", "expected steps of 0 or more");
        const std::uint64_t end = static_cast<std::uint64_t>(e) + 1;  // TE's ends are inclusive
        if (end <= static_cast<std::uint64_t>(s)) continue;  // an empty range
        rule.ranges[rule.range_count++] = {static_cast<std::uint64_t>(s), end};
      }
      return rule.range_count > 0;
    }
    const ConfigNode* start_node = field(feature, item, "start_step");
    const ConfigNode* end_node = field(feature, item, "end_step");
    const std::optional<std::int64_t> start = optional_integer(start_node, key + ".start_step");
    const std::optional<std::int64_t> end = optional_integer(end_node, key + ".end_step");
    if (start && *start < 0) fail(*start_node, key + ".start_step", "expected 0 or more");
    rule.start_step = start ? static_cast<std::uint64_t>(*start) : 0;
    if (end && *end == -1) return false;  // TE's: never
    if (end && *end < -1) fail(*end_node, key + ".end_step", "expected a step");
    if (end) {
      rule.end_step = static_cast<std::uint64_t>(*end) + 1;  // inclusive
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
      throw ConfigError{c_.path + ": " + std::to_string(merged.size()) + " rules after merging (fp8scope carries " +
                        std::to_string(kMaxSamplingRules) + "): fewer sections or tensor structs"};
    }
    config_.rules = std::move(merged);
  }

  const DebugConfig& c_;
  TeConfig config_;
  int enabled_sections_ = 0;
};

}  // namespace

Result<TeConfig> sampling_config(const DebugConfig& config) {
  try {
    return Interpreter(config).run();
  } catch (const ConfigError& e) {
    return Status::error(e.message);
  }
}

Result<TeConfig> read_te_config(const std::string& path) {
  Result<DebugConfig> config = read_debug_config(path);
  if (!config.ok()) return config.status();
  return sampling_config(config.value());
}

}  // namespace fp8scope::te
