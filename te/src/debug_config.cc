#include "fp8scope/te/debug_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "fp8scope/tensorfile/bounded_file.h"
#include "fp8scope/te/te_names.h"

namespace fp8scope::te {
namespace {

// A failure at a value: "FILE:LINE: KEY: why".
struct ConfigError {
  std::string message;
};

// TE's keys are Python names and its config's section names; anything else here is a broken file.
bool printable_ascii(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c <= 0x7E; });
}

// Well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, at most U+10FFFF), as every string the
// policy carries to the daemon must be.
bool valid_utf8(const std::string& text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const int more = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (more < 0 || text.size() - i <= static_cast<std::size_t>(more)) return false;
    std::uint32_t cp = more == 0 ? c : c & (0x3F >> more);
    for (int k = 1; k <= more; ++k) {
      const auto b = static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const std::uint32_t least[] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<std::size_t>(more) + 1;
  }
  return true;
}

class Converter {
 public:
  explicit Converter(const std::string& path) : path_(path) {}

  // A YAML value as a ConfigNode; aliases are expanded, so the count bounds a billion laughs too.
  ConfigNode convert(const YAML::Node& n, const std::string& key) {
    if (++nodes_ > kMaxConfigNodes) {
      throw ConfigError{path_ + ": more than " + std::to_string(kMaxConfigNodes) +
                        " values (aliases expanded); TE debug configs are a few dozen"};
    }
    ConfigNode out;
    out.line = n.Mark().is_null() ? 0 : n.Mark().line + 1;
    switch (n.Type()) {
      case YAML::NodeType::Scalar:
        if (!valid_utf8(n.Scalar())) throw ConfigError{where(n) + " " + key + ": not valid UTF-8"};
        out.kind = ConfigNode::Kind::kScalar;
        out.text = n.Scalar();
        out.plain = n.Tag() != "!" && plain_yaml(out.text);  // a plain text the writer would quote is a string
        break;
      case YAML::NodeType::Sequence:
        out.kind = ConfigNode::Kind::kList;
        for (const YAML::Node& item : n) out.items.push_back(convert(item, key));
        break;
      case YAML::NodeType::Map: {
        out.kind = ConfigNode::Kind::kMap;
        std::set<std::string> seen;
        for (const auto& entry : n) {
          if (!entry.first.IsScalar() || entry.first.Scalar().empty()) {
            throw ConfigError{where(entry.first) + " " + key + ": expected a name as the key"};
          }
          const std::string name = entry.first.Scalar();
          if (!printable_ascii(name)) {
            throw ConfigError{where(entry.first) + " " + (key.empty() ? "" : key + ": ") +
                              "a key must be printable ASCII (a section name or a TE name)"};
          }
          const std::string path = key.empty() ? name : key + "." + name;
          // PyYAML keeps the last of a key given twice; a config that does so is a mistake.
          if (!seen.insert(name).second) throw ConfigError{where(entry.first) + " " + path + ": given twice"};
          out.entries.emplace_back(name, convert(entry.second, path));
        }
        break;
      }
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        break;
    }
    return out;
  }

  std::string where(const YAML::Node& n) const {
    return path_ + ":" + (n.Mark().is_null() ? std::string("?") : std::to_string(n.Mark().line + 1)) + ":";
  }

 private:
  const std::string& path_;
  std::size_t nodes_ = 0;
};

std::string at(const std::string& path, int line) { return path + ":" + (line > 0 ? std::to_string(line) : "?") + ":"; }

SectionConfig section_of(const std::string& path, const std::string& name, const ConfigNode& value) {
  SectionConfig s;
  s.name = name;
  s.line = value.line;
  if (!value.is_map()) {
    throw ConfigError{at(path, value.line) + " " + name + ": expected a section (a map with enabled and layers)"};
  }
  for (const auto& [key, v] : value.entries) {
    if (key == "enabled") {
      s.enabled = v;
    } else if (key == "layers") {
      s.layers = v;
    } else if (key == kTeNamespace) {
      if (!v.is_map()) throw ConfigError{at(path, v.line) + " " + name + "." + key + ": expected a map of features"};
      for (const auto& [feature, fields] : v.entries) s.features.push_back({feature, true, fields, fields.line});
    } else {
      s.features.push_back({key, false, v, v.line});  // nvdlfw_inspect's base namespace
    }
  }
  return s;
}

}  // namespace

bool plain_yaml(std::string_view s) {
  if (s.empty() || s.front() == ' ' || s.back() == ' ' || s.back() == ':') return false;
  if (std::string_view("?:,[]{}#&*!|>'\"%@`").find(s.front()) != std::string_view::npos) return false;
  if (s.front() == '-' && (s.size() == 1 || s[1] == ' ')) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c < 0x20 || c > 0x7e || std::string_view(",[]{}").find(c) != std::string_view::npos) return false;
    if ((c == ':' && s[i + 1] == ' ') || (c == '#' && s[i - 1] == ' ')) return false;
  }
  return true;
}

ConfigNode ConfigNode::scalar(std::string text, bool plain) {
  ConfigNode n;
  n.kind = Kind::kScalar;
  n.plain = plain && plain_yaml(text);
  n.text = std::move(text);
  return n;
}

ConfigNode ConfigNode::list(std::vector<ConfigNode> items) {
  ConfigNode n;
  n.kind = Kind::kList;
  n.items = std::move(items);
  return n;
}

ConfigNode ConfigNode::list_of(const std::vector<std::string>& texts) {
  std::vector<ConfigNode> items;
  for (const std::string& t : texts) items.push_back(scalar(t));
  return list(std::move(items));
}

ConfigNode ConfigNode::map(std::vector<std::pair<std::string, ConfigNode>> entries) {
  ConfigNode n;
  n.kind = Kind::kMap;
  n.entries = std::move(entries);
  return n;
}

const ConfigNode* ConfigNode::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool ConfigNode::operator==(const ConfigNode& o) const {
  return kind == o.kind && text == o.text && (kind != Kind::kScalar || plain == o.plain) && items == o.items &&
         entries == o.entries;
}

bool SectionConfig::operator==(const SectionConfig& o) const {
  const auto of = [](const std::vector<FeatureConfig>& features, bool te_namespace) {
    std::vector<const FeatureConfig*> out;
    for (const FeatureConfig& f : features) {
      if (f.te_namespace == te_namespace) out.push_back(&f);
    }
    return out;
  };
  const auto same = [&](bool te_namespace) {
    const auto a = of(features, te_namespace), b = of(o.features, te_namespace);
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto* x, const auto* y) { return *x == *y; });
  };
  return name == o.name && enabled == o.enabled && layers == o.layers && same(true) && same(false);
}

Result<DebugConfig> parse_debug_config(const std::string& text, const std::string& path) {
  try {
    std::vector<YAML::Node> documents;
    try {
      documents = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      throw ConfigError{path + ":" + std::to_string(e.mark.line + 1) + ": not YAML: " + e.msg};
    }
    if (documents.size() != 1) {
      throw ConfigError{path + ": " + std::to_string(documents.size()) +
                        " YAML documents; nvdlfw_inspect reads one (yaml.safe_load)"};
    }
    Converter converter(path);
    const ConfigNode root = converter.convert(documents[0], "");
    if (!root.is_map() || root.entries.empty()) throw ConfigError{at(path, root.line) + " expected a map of sections"};
    DebugConfig config;
    config.path = path;
    for (const auto& [name, value] : root.entries) config.sections.push_back(section_of(path, name, value));
    return config;
  } catch (const ConfigError& e) {
    return Status::error(e.message);
  } catch (const YAML::Exception& e) {
    return Status::error(path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

Result<DebugConfig> read_debug_config(const std::string& path) {
  Result<std::string> text = tensorfile::read_bounded_file(path, kMaxDebugConfigBytes);
  if (!text.ok()) return text.status();
  return parse_debug_config(text.value(), path);
}

}  // namespace fp8scope::te
