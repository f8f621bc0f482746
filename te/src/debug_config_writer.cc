// A DebugConfig as block-style YAML, each value written so that YAML reads back the same text and
// the same type: a scalar stays plain only when it was plain and plain YAML keeps it whole, else it
// is single-quoted ('' for a quote). Lists of scalars (and of such lists) go in flow style, as TE's
// own configs write them; lists of maps (tensors_struct) as block sequences.
#include <algorithm>
#include <ostream>

#include "fp8scope/te/debug_config.h"
#include "fp8scope/te/te_names.h"

namespace fp8scope::te {
namespace {

std::string scalar_text(const ConfigNode& n) {
  if (n.plain && plain_yaml(n.text)) return n.text;
  std::string quoted = "'";
  for (char c : n.text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
}

bool flow_list(const ConfigNode& n) {
  for (const ConfigNode& item : n.items) {
    if (!(item.is_scalar() || (item.is_list() && flow_list(item)))) return false;
  }
  return true;
}

std::string flow(const ConfigNode& n) {
  if (n.is_scalar()) return scalar_text(n);
  std::string out = "[";
  for (std::size_t i = 0; i < n.items.size(); ++i) out += (i ? ", " : "") + flow(n.items[i]);
  return out + "]";
}

void write_value(const ConfigNode& v, int indent, std::ostream& out);

void write_entries(const std::vector<std::pair<std::string, ConfigNode>>& entries, int indent, std::ostream& out,
                   bool first_inline = false) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (!(first_inline && i == 0)) out << std::string(static_cast<std::size_t>(indent), ' ');
    out << scalar_text(ConfigNode::scalar(entries[i].first)) << ":";
    write_value(entries[i].second, indent, out);
  }
}

// After "key:" at `indent`: the value on the same line, or on the lines below.
void write_value(const ConfigNode& v, int indent, std::ostream& out) {
  if (v.is_null()) {
    out << "\n";
  } else if (v.is_scalar() || (v.is_list() && flow_list(v))) {
    out << " " << flow(v) << "\n";
  } else if (v.is_map()) {
    out << (v.entries.empty() ? " {}\n" : "\n");
    write_entries(v.entries, indent + 2, out);
  } else {
    out << "\n";
    for (const ConfigNode& item : v.items) {
      out << std::string(static_cast<std::size_t>(indent + 2), ' ') << "-";
      if (item.is_map() && !item.entries.empty()) {
        out << " ";
        write_entries(item.entries, indent + 4, out, true);
      } else {
        write_value(item, indent + 2, out);
      }
    }
  }
}

}  // namespace

void write_debug_config(const DebugConfig& config, std::ostream& out) {
  for (const std::string& c : config.leading_comments) out << "# " << c << "\n";
  for (const SectionConfig& s : config.sections) {
    out << scalar_text(ConfigNode::scalar(s.name)) << ":\n";
    if (!s.enabled.is_null()) {
      out << "  enabled:";
      write_value(s.enabled, 2, out);
    }
    if (!s.layers.is_null()) {
      out << "  layers:";
      write_value(s.layers, 2, out);
    }
    // Base-namespace features before TE's block stay before it, the rest follow it.
    const auto first_te = std::find_if(s.features.begin(), s.features.end(), [](const FeatureConfig& f) { return f.te_namespace; });
    const auto write_base = [&](auto from, auto to) {
      for (auto f = from; f != to; ++f) {
        if (f->te_namespace) continue;
        out << "  " << scalar_text(ConfigNode::scalar(f->name)) << ":";
        write_value(f->fields, 2, out);
      }
    };
    write_base(s.features.begin(), first_te);
    if (first_te != s.features.end()) out << "  " << kTeNamespace << ":\n";
    for (const FeatureConfig& f : s.features) {
      if (!f.te_namespace) continue;
      out << "    " << scalar_text(ConfigNode::scalar(f.name)) << ":";
      write_value(f.fields, 4, out);
    }
    write_base(first_te, s.features.end());
  }
  for (const std::string& c : config.trailing_comments) out << "# " << c << "\n";
}

}  // namespace fp8scope::te
