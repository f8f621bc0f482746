// A Transformer Engine debug-API config (the nvdlfw_inspect YAML of debug_api.initialize(
// config_file=...)) as a value: read from a file, built by `fp8scope advise`, written back as YAML,
// and read back equal. Only its structure lives here (nvdlfw_inspect dc19d10,
// config_manager.py:186-222): top-level sections, each with `enabled`, `layers` and features, TE's
// under `transformer_engine:` and nvdlfw's own directly under the section, each feature a map of
// fields. What a config means for sampling is sampling_config.h's.
//
// Bounded: a file is read only if it is a regular file of at most kMaxDebugConfigBytes, refused
// before parsing otherwise, and its values (aliases expanded) may not exceed kMaxConfigNodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fp8scope/kernels/status.h"

namespace fp8scope::te {

// Whether YAML keeps `text` whole written plain, in block and flow context alike (YAML 1.2 section
// 7.3.3): no indicator first (a '-' only before a non-space, as in end_step: -1), no flow
// indicator, no ": " or " #", no spaces at either end, printable ASCII only.
bool plain_yaml(std::string_view text);

// A YAML value as yaml.safe_load gives it to nvdlfw_inspect: null, a scalar, a list or a map.
struct ConfigNode {
  enum class Kind : std::uint8_t { kNull, kScalar, kList, kMap };
  Kind kind = Kind::kNull;
  std::string text;   // a scalar's
  // A scalar written without quotes (YAML reads a plain `True` or `12` as a bool or a number); only
  // ever set for a text plain_yaml() accepts.
  bool plain = true;
  std::vector<ConfigNode> items;                            // a list's
  std::vector<std::pair<std::string, ConfigNode>> entries;  // a map's, in order, keys unique
  int line = 0;  // where it was read (1-based); 0 for a value built in code

  static ConfigNode scalar(std::string text, bool plain = true);
  static ConfigNode list(std::vector<ConfigNode> items);
  static ConfigNode list_of(const std::vector<std::string>& texts);  // plain scalars
  static ConfigNode map(std::vector<std::pair<std::string, ConfigNode>> entries);

  bool is_null() const { return kind == Kind::kNull; }
  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_map() const { return kind == Kind::kMap; }
  const ConfigNode* find(std::string_view key) const;  // a map's entry, else null
  std::size_t size() const { return kind == Kind::kList ? items.size() : entries.size(); }

  bool operator==(const ConfigNode& o) const;  // by value: lines are not compared
};

struct FeatureConfig {
  std::string name;
  bool te_namespace = true;  // under `transformer_engine:`; else nvdlfw's base namespace
  ConfigNode fields;         // usually a map; whatever the file holds
  int line = 0;

  bool operator==(const FeatureConfig& o) const {
    return name == o.name && te_namespace == o.te_namespace && fields == o.fields;
  }
};

struct SectionConfig {
  std::string name;
  ConfigNode enabled;  // null when absent
  ConfigNode layers;   // null when absent
  std::vector<FeatureConfig> features;  // in file order (TE's are contiguous, under one key)
  int line = 0;

  // The two namespaces are two maps: each keeps its order, and they are compared apart.
  bool operator==(const SectionConfig& o) const;
};

struct DebugConfig {
  std::string path;  // the file it was read from, "" when built
  std::vector<SectionConfig> sections;
  // Written as "# ..." lines before and after the sections (never read back: YAML comments).
  std::vector<std::string> leading_comments, trailing_comments;

  bool operator==(const DebugConfig& o) const { return sections == o.sections; }
};

inline constexpr std::uint64_t kMaxDebugConfigBytes = 256 * 1024;  // TE's configs are a few kilobytes
inline constexpr std::size_t kMaxConfigNodes = 50000;

// The config at `path`; an error names the file, the line and the key.
Result<DebugConfig> read_debug_config(const std::string& path);
// The same from text (`path` names it in errors).
Result<DebugConfig> parse_debug_config(const std::string& text, const std::string& path);

// As YAML that parse_debug_config reads back equal (comments aside).
void write_debug_config(const DebugConfig& config, std::ostream& out);

}  // namespace fp8scope::te
