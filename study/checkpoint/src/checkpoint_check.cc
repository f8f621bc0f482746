#include "fp8scope/checkpoint/checkpoint_check.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "fp8scope/checkpoint/quantized_weight.h"

namespace fp8scope::checkpoint {
namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// Layers loaders never quantize whatever the config says: embeddings, the LM head, norms and MoE
// routers (vLLM Fp8Config.get_quant_method gives them no FP8 method; DeepSeek-V3 model.py:563, 769).
bool never_quantized(const std::string& module) {
  return contains(module, "norm") || contains(module, "embed") || contains(module, "lm_head") ||
         ends_with(module, ".gate") || contains(module, "router");
}

// The config's ignore list against what is stored: a listed layer stored quantized, or a Linear
// weight the config quantizes stored in high precision (a loader then reads the wrong tensors).
void check_ignore_list(const CheckpointFiles& files, const Declaration& d, const std::set<std::string>& quantized,
                       CheckpointReport& report) {
  std::vector<std::string> unreadable;
  for (const CheckpointTensor& t : files.tensors()) {
    if (!ends_with(t.name, ".weight") || t.entry.shape.size() != 2) continue;
    const std::string module = t.name.substr(0, t.name.size() - 7);
    const bool is_quantized = quantized.count(module) != 0;
    const bool listed = ignored(d, module, &unreadable);
    if (is_quantized && listed) {
      report.structure.emplace_back(t.name, Finding{Severity::kError, "ignored_but_quantized",
                                                    module + " is on the config's ignore list but stored quantized (" +
                                                        std::string(t.entry.dtype->name) + "): loaders read its codes as values"});
    }
    const std::optional<DType> dtype = t.entry.dtype->dtype;
    const bool high_precision = dtype && !dtype_is_codes(*dtype);
    if (!is_quantized && !listed && high_precision && d.declared && d.convention != Convention::kGptOssMxfp4 &&
        !never_quantized(module)) {
      report.structure.emplace_back(t.name, Finding{Severity::kWarning, "quantized_by_config",
                                                    module + " is stored " + std::string(t.entry.dtype->name) +
                                                        ", but the config quantizes it (not on its ignore list)"});
    }
  }
  std::sort(unreadable.begin(), unreadable.end());
  unreadable.erase(std::unique(unreadable.begin(), unreadable.end()), unreadable.end());
  for (const std::string& u : unreadable) {
    report.structure.emplace_back(d.config_file, Finding{Severity::kWarning, "ignore_pattern",
                                                         "ignore entry " + u + " cannot be read: the layers it names are checked as quantized"});
  }
}

void count(CheckpointReport& r) {
  r.errors = r.warnings = 0;
  auto tally = [&](Severity s) {
    r.errors += s == Severity::kError;
    r.warnings += s == Severity::kWarning;
  };
  for (const WeightReport& w : r.weights) tally(w.severity);
  for (const auto& [where, f] : r.structure) tally(f.severity);
}

}  // namespace

std::string CheckpointReport::verdict() const {
  const std::string what = std::to_string(weights.size()) + " quantized weights (" + convention_info(declaration.convention).name + ")";
  const auto unverified = static_cast<std::uint64_t>(
      std::count_if(weights.begin(), weights.end(), [](const WeightReport& w) { return w.verdict == "unusable_reference"; }));
  if (unverified > 0 && unverified == errors) {
    return "export not verified: " + std::to_string(unverified) + " of " + what +
           " could not be compared with the reference (its values are not finite)";
  }
  if (errors > 0) return "export broken: " + std::to_string(errors) + " errors, " + std::to_string(warnings) + " warnings in " + what;
  if (warnings > 0) return "export loads, with " + std::to_string(warnings) + " warnings in " + what;
  return std::string(reference_path.empty() ? "export consistent: " : "export matches its reference: ") + what;
}

Result<CheckpointReport> check_checkpoint(const std::string& export_path, const std::string& reference,
                                          const CheckpointProgress& progress) {
  const auto started = std::chrono::steady_clock::now();
  Result<CheckpointFiles> files = CheckpointFiles::open(export_path);
  if (!files.ok()) return files.status();
  std::optional<CheckpointFiles> refs;
  if (!reference.empty()) {
    Result<CheckpointFiles> r = CheckpointFiles::open(reference);
    if (!r.ok()) return r.status();
    refs = std::move(r).value();
  }
  Result<Declaration> d = read_declaration(files.value());
  if (!d.ok()) return d.status();
  CheckpointReport report;
  report.export_path = export_path;
  report.reference_path = reference;
  report.declaration = d.value();
  report.bytes = files.value().tensor_bytes();
  for (const FileProblem& p : files.value().problems()) {
    report.structure.emplace_back(export_path, Finding{Severity::kWarning, p.code, p.message});
  }
  const Discovery found = discover_weights(files.value(), d.value());
  std::map<std::string, std::vector<Finding>> by_module;
  std::set<std::string> quantized;
  for (const QuantizedWeight& w : found.weights) quantized.insert(w.module);
  for (const auto& [where, f] : found.findings) {
    if (quantized.count(where)) {
      by_module[where].push_back(f);
    } else {
      report.structure.emplace_back(where, f);
    }
  }
  check_ignore_list(files.value(), d.value(), quantized, report);
  for (std::size_t i = 0; i < found.weights.size(); ++i) {
    const QuantizedWeight& w = found.weights[i];
    WeightReport r;
    if (w.decodable) {
      r = check_weight(files.value(), w, d.value(), refs ? &*refs : nullptr);
    } else {
      r.module = w.module;
      r.codes_dtype = w.codes->entry.dtype->name;
      r.shape = {w.rows, w.cols};
    }
    for (Finding& f : by_module[w.module]) r.add(std::move(f));
    report.weights.push_back(std::move(r));
    if (progress) progress(i + 1, found.weights.size());
  }
  std::stable_sort(report.weights.begin(), report.weights.end(), [](const WeightReport& a, const WeightReport& b) {
    return a.severity != b.severity ? a.severity > b.severity : a.module < b.module;
  });
  std::stable_sort(report.structure.begin(), report.structure.end(),
                   [](const auto& a, const auto& b) { return a.second.severity > b.second.severity; });
  count(report);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

}  // namespace fp8scope::checkpoint
