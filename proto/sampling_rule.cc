#include "fp8scope/wire/sampling_rule.h"

#include <charconv>
#include <cstring>

#include "fp8scope/pattern/layer_pattern.h"

namespace fp8scope {
namespace {

bool parse_number(std::string_view s, std::uint64_t& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

std::string tensors_text(std::uint32_t tensors) {
  std::string out;
  for (GemmRole g : kRuleGemms) {
    for (const OperandTerm& o : kOperands) {
      if ((tensors & tensor_bit(g, o.value)) != 0) out += (out.empty() ? "" : ",") + std::string(gemm_name(g)) + ":" + o.name;
    }
  }
  return out;
}

// "fprop:x,wgrad:dy"; "*:x" for every GEMM's x.
bool parse_tensors(std::string_view s, std::uint32_t& tensors) {
  while (!s.empty()) {
    const std::size_t comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) return false;
    const std::optional<Operand> operand = operand_from_name(item.substr(colon + 1));
    if (!operand) return false;
    const std::string_view gemm = item.substr(0, colon);
    bool known = false;
    for (GemmRole g : kRuleGemms) {
      if (gemm == "*" || gemm == gemm_name(g)) {
        tensors |= tensor_bit(g, *operand);
        known = true;
      }
    }
    if (!known) return false;
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
  }
  return true;
}

bool parse_ranges(std::string_view s, SamplingRule& r) {
  while (!s.empty()) {
    const std::size_t comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    const std::size_t dash = item.find('-');
    if (dash == std::string_view::npos || r.range_count == kMaxRuleStepRanges) return false;
    StepRange& range = r.ranges[r.range_count++];
    if (!parse_number(item.substr(0, dash), range.start) || !parse_number(item.substr(dash + 1), range.end)) return false;
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
  }
  return true;
}

bool copy_pattern(std::string_view pattern, char (&target)[kMaxRuleLayerRegexBytes], std::string& error) {
  if (pattern.size() >= kMaxRuleLayerRegexBytes) {
    error = "longer than " + std::to_string(kMaxRuleLayerRegexBytes - 1) + " bytes";
    return false;
  }
  std::memcpy(target, pattern.data(), pattern.size());
  target[pattern.size()] = '\0';
  return true;
}

bool parse_rule(std::string_view line, SamplingRule& r, std::string& error) {
  while (!line.empty()) {
    const std::size_t tab = line.find('\t');
    const std::string_view field = line.substr(0, tab);
    line = tab == std::string_view::npos ? std::string_view() : line.substr(tab + 1);
    const std::size_t eq = field.find('=');
    if (eq == std::string_view::npos) {
      error = "expected key=value, got '" + std::string(field) + "'";
      return false;
    }
    const std::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    bool ok = false;
    std::string why = "not understood: '" + std::string(value) + "'";
    if (key == "every") ok = parse_number(value, r.every_n_steps);
    if (key == "phase") ok = parse_number(value, r.phase);
    if (key == "start") ok = parse_number(value, r.start_step);
    if (key == "end") ok = parse_number(value, r.end_step);
    if (key == "ranges") ok = parse_ranges(value, r);
    if (key == "tensors") ok = parse_tensors(value, r.tensors);
    if (key == "group") {
      std::uint64_t group = 0;
      ok = parse_number(value, group) && group <= 0xFFFFFFFFu;
      r.group = static_cast<std::uint32_t>(group);
    }
    if (key == "layers") ok = copy_pattern(value, r.layer_regex, why);
    if (key == "and_layers") ok = copy_pattern(value, r.and_layer_regex, why);
    if (!ok) {
      error = std::string(key) + ": " + why;
      return false;
    }
  }
  return true;
}

std::string pattern_of(const char (&pattern)[kMaxRuleLayerRegexBytes]) {
  return std::string(pattern, strnlen(pattern, kMaxRuleLayerRegexBytes));
}

// Printable ASCII, terminated, and a layer pattern; "" = fine.
std::string pattern_problem(const char (&pattern)[kMaxRuleLayerRegexBytes]) {
  const std::size_t length = strnlen(pattern, kMaxRuleLayerRegexBytes);
  if (length == kMaxRuleLayerRegexBytes) return "not terminated";
  for (std::size_t i = 0; i < length; ++i) {
    if (pattern[i] < 0x20 || pattern[i] > 0x7e) return "not printable ASCII (byte " + std::to_string(i) + ")";
  }
  if (std::string error; !LayerPattern::compile(std::string_view(pattern, length), &error)) {
    return "not a layer pattern: " + error;
  }
  return "";
}

}  // namespace

std::string format_rules(const std::vector<SamplingRule>& rules) {
  std::string out;
  for (const SamplingRule& r : rules) {
    out += "every=" + std::to_string(r.every_n_steps) + "\tphase=" + std::to_string(r.phase) +
           "\tstart=" + std::to_string(r.start_step) + "\tend=" + std::to_string(r.end_step);
    if (r.range_count > 0) {
      out += "\tranges=";
      for (std::uint32_t i = 0; i < r.range_count && i < kMaxRuleStepRanges; ++i) {
        out += (i ? "," : "") + std::to_string(r.ranges[i].start) + "-" + std::to_string(r.ranges[i].end);
      }
    }
    if (r.tensors != 0) out += "\ttensors=" + tensors_text(r.tensors);
    if (r.group != 0) out += "\tgroup=" + std::to_string(r.group);
    out += "\tlayers=" + pattern_of(r.layer_regex);
    if (r.and_layer_regex[0] != '\0') out += "\tand_layers=" + pattern_of(r.and_layer_regex);
    out += "\n";
  }
  return out;
}

std::optional<std::vector<SamplingRule>> parse_rules(std::string_view text, std::string* error) {
  std::vector<SamplingRule> rules;
  for (std::size_t number = 1; !text.empty(); ++number) {
    const std::size_t newline = text.find('\n');
    const std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    if (line.empty()) continue;
    std::string problem;
    SamplingRule rule;
    if (rules.size() == kMaxSamplingRules) problem = "more than " + std::to_string(kMaxSamplingRules) + " rules";
    if (problem.empty() && parse_rule(line, rule, problem)) problem = rule_problem(rule);
    if (!problem.empty()) {
      if (error) *error = "rule " + std::to_string(number) + ": " + problem;
      return std::nullopt;
    }
    rules.push_back(rule);
  }
  return rules;
}

std::string rule_problem(const SamplingRule& r) {
  if (r.every_n_steps == 0) return "every: expected 1 or more (1 = every step)";
  if (r.end_step != 0 && r.end_step <= r.start_step) return "end must be above start";
  if (r.range_count > kMaxRuleStepRanges) return "more than " + std::to_string(kMaxRuleStepRanges) + " step ranges";
  for (std::uint32_t i = 0; i < r.range_count; ++i) {
    if (r.ranges[i].end <= r.ranges[i].start) return "a step range must end above its start";
  }
  std::uint32_t known = 0;
  for (GemmRole g : kRuleGemms) {
    for (const OperandTerm& o : kOperands) known |= tensor_bit(g, o.value);
  }
  if ((r.tensors & ~known) != 0) return "tensors: unknown bits";
  if (const std::string problem = pattern_problem(r.layer_regex); !problem.empty()) return "layers: " + problem;
  if (const std::string problem = pattern_problem(r.and_layer_regex); !problem.empty()) return "and_layers: " + problem;
  return "";
}

}  // namespace fp8scope
