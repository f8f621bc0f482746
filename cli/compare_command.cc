#include "fp8scope/cli/compare_command.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "fp8scope/insight/attribution.h"
#include "fp8scope/cli/connection_flags.h"
#include "fp8scope/insight/history_series.h"
#include "fp8scope/insight/inference_check.h"
#include "fp8scope/insight/run_comparison.h"

namespace fp8scope::cli {
namespace {

std::string spike_cell(const insight::Spike* s) {
  if (s == nullptr) return "-";
  char text[64];
  const auto steps = s->steps_to_recover();
  std::snprintf(text, sizeof text, "%.2fx, %s", s->height,
                steps ? (std::to_string(*steps) + " steps").c_str() : "not recovered");
  return text;
}

nlohmann::json to_json(const insight::Suspect& s) {
  return {{"layer", s.tensor.layer}, {"gemm", s.tensor.gemm}, {"operand", s.tensor.operand},
          {"recipe", s.recipe.caster.name()}, {"format", s.recipe.format->name}, {"signal", s.signal},
          {"before", s.before},        {"at", s.at},                {"at_step", s.at_step},
          {"score", s.score},          {"source", data_source_name(s.source)}};
}

nlohmann::json to_json(const insight::EarlyWarning& w) {
  return {{"layer", w.tensor.layer},       {"gemm", w.tensor.gemm},         {"operand", w.tensor.operand},
          {"signal", w.signal},            {"baseline", w.baseline},        {"before_onset", w.before_onset},
          {"score", w.score},              {"first_step", w.first_step},    {"steps_ahead", w.steps_ahead}};
}

nlohmann::json to_json(const insight::RunLoss& r) {
  nlohmann::json spikes = nlohmann::json::array();
  for (const insight::Spike& s : r.spikes) {
    nlohmann::json j = {{"start_step", s.start_step}, {"peak_step", s.peak_step}, {"baseline", s.baseline},
                        {"peak", s.peak},             {"height", s.height},       {"z", s.z}};
    if (const auto steps = s.steps_to_recover()) j["steps_to_recover"] = *steps;
    spikes.push_back(j);
  }
  nlohmann::json j = {{"run", r.run},
                      {"points", r.series.size()},
                      {"spikes", spikes},
                      {"spikes_per_1k_steps", r.spikes_per_1k_steps},
                      {"unrecovered", r.unrecovered}};
  if (r.median_recovery_steps) j["median_recovery_steps"] = *r.median_recovery_steps;
  if (r.divergence) j["divergence_onset_step"] = r.divergence->onset_step;
  return j;
}

void print_table(const insight::LossComparison& c, const std::string& name, std::ostream& out) {
  const insight::RunLoss &r = c.run, &b = c.baseline;
  auto row = [&](const std::string& label, const std::string& left, const std::string& right) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-18s %-26s %s\n", label.c_str(), left.c_str(), right.c_str());
    out << line;
  };
  auto span = [](const insight::RunLoss& x) {
    return x.series.empty() ? std::string("-")
                            : std::to_string(x.series.front().step) + ".." + std::to_string(x.series.back().step);
  };
  auto rate = [](const insight::RunLoss& x) {
    char t[48];
    std::snprintf(t, sizeof t, "%zu (%.2f per 1k steps)", x.spikes.size(), x.spikes_per_1k_steps);
    return std::string(t);
  };
  auto recovery = [](const insight::RunLoss& x) {
    return x.median_recovery_steps ? std::to_string(static_cast<long>(*x.median_recovery_steps)) + " steps"
                                   : std::string("-");
  };
  auto diverged = [](const insight::RunLoss& x) {
    return x.divergence ? "from step " + std::to_string(x.divergence->onset_step) : std::string("no");
  };
  out << "fp8scope compare: " << name << " of run " << r.run << " against baseline " << b.run << "\n";
  row("", "run " + r.run, "baseline " + b.run);
  row("steps", span(r), span(b));
  row("spikes", rate(r), rate(b));
  row("median recovery", recovery(r), recovery(b));
  row("never recovered", std::to_string(r.unrecovered), std::to_string(b.unrecovered));
  row("diverged", diverged(r), diverged(b));
  // The spikes of both runs by peak step: the same row when they peak within a window of each other.
  std::map<std::uint64_t, std::pair<const insight::Spike*, const insight::Spike*>> by_step;
  for (const insight::Spike& s : r.spikes) by_step[s.peak_step].first = &s;
  for (const insight::Spike& s : b.spikes) by_step[s.peak_step].second = &s;
  if (!by_step.empty()) {
    out << "\n  spikes at peak step (height over the window's median, steps to recover):\n";
    for (const auto& [step, pair] : by_step) row("step " + std::to_string(step), spike_cell(pair.first), spike_cell(pair.second));
  }
  out << "\n";
  if (c.findings.empty()) {
    out << "verdict: no loss signal sets run " << r.run << " apart from its baseline\n";
  } else {
    out << "verdict: run " << r.run << " is worse than its baseline:\n";
    for (const std::string& f : c.findings) out << "  - it " << f << "\n";
  }
}

nlohmann::json to_json(const insight::InferenceCheck& c) {
  auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json weights = nlohmann::json::array(), outputs = nlohmann::json::array();
  for (const insight::WeightCheck& w : c.weights) {
    weights.push_back({{"layer", w.tensor.layer},
                       {"verdict", insight::weight_verdict_name(w.verdict)},
                       {"detail", w.detail},
                       {"step", w.step},
                       {"format", w.format != nullptr ? w.format->name : ""},
                       {"scale", w.scale},
                       {"training_step", w.training_step},
                       {"training_format", w.training_format != nullptr ? w.training_format->name : ""},
                       {"training_scale", w.training_scale},
                       {"training_source", w.training_source ? w.training_source->name() : ""}});
  }
  for (const insight::OutputCheck& x : c.outputs) {
    outputs.push_back({{"layer", x.layer},
                       {"accumulate", x.accumulate},
                       {"run_cosine", finite(x.run_cosine)},
                       {"run_mse", finite(x.run_mse)},
                       {"training_cosine", finite(x.training_cosine)},
                       {"training_mse", finite(x.training_mse)}});
  }
  return {{"run", c.run}, {"training", c.training}, {"flagged", c.flagged}, {"weights", weights}, {"outputs", outputs}};
}

void print_inference(const insight::InferenceCheck& c, std::ostream& out) {
  out << "\ninference check: the FP8 weights run " << c.run << " used against what training run " << c.training
      << " ended with\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-40s %-16s %-12s %-12s %s\n", "layer", "verdict", "scale", "training", "detail");
  out << line;
  for (const insight::WeightCheck& w : c.weights) {
    std::snprintf(line, sizeof line, "  %-40s %-16s %-12.7g %-12.7g %s\n", w.tensor.layer.c_str(),
                  insight::weight_verdict_name(w.verdict), w.scale, w.training_scale, w.detail.c_str());
    out << line;
  }
  out << (c.flagged ? "verdict: " + std::to_string(c.flagged) + " of " + std::to_string(c.weights.size()) +
                          " FP8 weights differ from training's\n"
                    : "verdict: every FP8 weight matches training's scale and codes\n");
  if (c.outputs.empty()) {
    out << "  (no BF16 (X, W) pair captured on either side: the daemon's GEMM check has no FP8-vs-BF16 output to show)\n";
    return;
  }
  out << "\n  FP8 GEMM outputs against BF16 outputs (the daemon's GEMM check, where BF16 pairs were captured):\n";
  std::snprintf(line, sizeof line, "  %-40s %-10s %-12s %-12s %-12s %s\n", "layer", "accumulate", "cosine run",
                "mse run", "cosine train", "mse train");
  out << line;
  auto num = [](double v) {
    char t[32];
    std::snprintf(t, sizeof t, "%.6g", v);
    return std::isfinite(v) ? std::string(t) : std::string("-");
  };
  for (const insight::OutputCheck& x : c.outputs) {
    std::snprintf(line, sizeof line, "  %-40s %-10s %-12s %-12s %-12s %s\n", x.layer.c_str(), x.accumulate.c_str(),
                  num(x.run_cosine).c_str(), num(x.run_mse).c_str(), num(x.training_cosine).c_str(),
                  num(x.training_mse).c_str());
    out << line;
  }
}

}  // namespace

void add_compare_command(CLI::App& app, CompareOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "compare", "A run against its baseline: loss spikes, recovery, divergence and the tensors behind them; for an "
                 "FP8 inference run, its weight scales and codes against training's");
  add_study_flags(cmd, o.study, true);
  cmd->add_option("--suspects", o.suspects, "Tensors listed per spike or divergence onset")->capture_default_str();
  cmd->add_flag("--json", o.json, "One JSON object");
}

namespace {

// What compare found: the loss of both runs compared, the run's onsets attributed, the inference check.
struct Comparison {
  std::optional<insight::LossComparison> loss;
  bool run_sampled = false;  // the run has tensor records
  std::vector<insight::Attribution> onsets;
  std::optional<insight::InferenceCheck> inference;
};

Result<Comparison> compare(const CompareOptions& o, const history::HistoryReader& history, std::ostream& err) {
  const insight::StudyOptions& options = o.study.options;
  Comparison c;
  // The loss of both runs, when both logged it (an inference run usually has none).
  std::vector<insight::ScalarPoint> series[2];
  const std::string* runs[2] = {&o.study.run, &o.study.baseline};
  for (int i = 0; i < 2; ++i) {
    auto s = insight::scalar_series(history, *runs[i], options.loss_name);
    if (!s.ok()) return s.status();
    series[i] = std::move(s).value();
  }
  if (!series[0].empty() && !series[1].empty()) {
    c.loss = insight::compare_loss(
        insight::analyze_run_loss(o.study.run, std::move(series[0]), options.spikes, options.divergence),
        insight::analyze_run_loss(o.study.baseline, std::move(series[1]), options.spikes, options.divergence));
  }
  // The tensors of both runs, when they sampled any: the run's onsets, and the inference check.
  ProgressBar bar(err, "reading history", o.study.progress || isatty(STDERR_FILENO));
  auto progress = [&](std::uint64_t done, std::uint64_t total) { bar.update(done, total); };
  const insight::SeriesLimits limits =
      c.loss ? insight::attribution_limits(c.loss->run.spikes, c.loss->run.divergence, options.attribution,
                                           options.series_points)
             : insight::sample_limits(options.series_points);
  auto records = insight::load_run_records(history, o.study.run, progress, limits);
  auto baseline_records =
      insight::load_run_records(history, o.study.baseline, progress, insight::sample_limits(options.series_points));
  bar.finish();
  for (const auto* r : {&records, &baseline_records}) {
    if (r->ok() && !insight::thinning_note(r->value()).empty()) err << "fp8scope compare: " << insight::thinning_note(r->value()) << "\n";
  }
  c.run_sampled = records.ok();
  if (c.loss && records.ok()) {
    c.onsets = insight::attribute_onsets(records.value(), c.loss->run.spikes, c.loss->run.divergence, options.attribution);
  }
  if (records.ok() && baseline_records.ok()) c.inference = insight::check_inference(records.value(), baseline_records.value());
  return c;
}

// Why there is nothing to compare, naming the runs that do have the loss.
std::string nothing_to_compare(const CompareOptions& o, const history::HistoryReader& history) {
  const std::string& name = o.study.options.loss_name;
  std::string known;
  if (auto all = insight::runs_with_scalar(history, name); all.ok()) {
    for (const std::string& r : all.value()) known += (known.empty() ? "" : ", ") + r;
  }
  return "nothing to compare in " + history.location() + ": runs " + o.study.run + " and " + o.study.baseline +
         " do not both have '" + name + "' values (runs that have them: " + (known.empty() ? "none" : known) +
         "), and run " + o.study.run + " captured no FP8 forward weights to check against the baseline's";
}

void print_json(const CompareOptions& o, const Comparison& c, std::ostream& out) {
  nlohmann::json j = {{"name", o.study.options.loss_name}};
  if (c.loss) {
    nlohmann::json attribution = nlohmann::json::array();
    for (const insight::Attribution& a : c.onsets) {
      nlohmann::json suspects = nlohmann::json::array();
      for (std::size_t i = 0; i < std::min(o.suspects, a.suspects.size()); ++i) suspects.push_back(to_json(a.suspects[i]));
      nlohmann::json warnings = nlohmann::json::array();
      for (const insight::EarlyWarning& w : a.warnings) warnings.push_back(to_json(w));
      attribution.push_back(
          {{"onset_step", a.onset_step}, {"cause", a.cause}, {"suspects", suspects}, {"warnings", warnings}});
    }
    j.update({{"run", to_json(c.loss->run)},
              {"baseline", to_json(c.loss->baseline)},
              {"run_worse", c.loss->run_worse},
              {"findings", c.loss->findings},
              {"attribution", attribution}});
  }
  if (c.inference) j["inference_check"] = to_json(*c.inference);
  out << j.dump() << "\n";
}

void print_text(const CompareOptions& o, const Comparison& c, std::ostream& out) {
  const std::string& name = o.study.options.loss_name;
  if (c.loss) {
    print_table(*c.loss, name, out);
    if (!c.run_sampled && !c.loss->run.spikes.empty()) {
      out << "\n(run " << o.study.run << " sampled no tensors, so its onsets cannot be attributed)\n";
    }
  } else {
    out << "(no '" << name << "' values on both sides: the loss is not compared)\n";
  }
  for (const insight::Attribution& a : c.onsets) {
    out << "\n" << a.cause << " at step " << a.onset_step << ": the tensors that moved most\n";
    char line[256];
    for (std::size_t i = 0; i < std::min(o.suspects, a.suspects.size()); ++i) {
      const insight::Suspect& x = a.suspects[i];
      // The source says whose figure it is: the job's own cast's input (cast, recompute), its codes
      // alone, or a high-precision operand a what-if cast.
      std::snprintf(line, sizeof line, "  %zu. %-40s %-6s %-3s %-15s %.3g -> %.3g at step %llu (%.1f sigma, %s %s, from %s)\n",
                    i + 1, x.tensor.layer.c_str(), x.tensor.gemm.c_str(), x.tensor.operand.c_str(), x.signal.c_str(),
                    x.before, x.at, static_cast<unsigned long long>(x.at_step), x.score, x.recipe.caster.name(),
                    x.recipe.format->name, data_source_name(x.source));
      out << line;
    }
    if (a.suspects.empty()) out << "  no tensor was sampled both before and around this step\n";
    if (a.warnings.empty()) continue;
    out << "  early warnings that had risen before it:\n";
    for (std::size_t i = 0; i < std::min(o.suspects, a.warnings.size()); ++i) {
      const insight::EarlyWarning& w = a.warnings[i];
      std::snprintf(line, sizeof line, "  - %-40s %-6s %-3s %-27s %.3g -> %.3g from step %llu (%llu steps ahead)\n",
                    w.tensor.layer.c_str(), w.tensor.gemm.c_str(), w.tensor.operand.c_str(), w.signal.c_str(),
                    w.baseline, w.before_onset, static_cast<unsigned long long>(w.first_step),
                    static_cast<unsigned long long>(w.steps_ahead));
      out << line;
    }
  }
  if (c.inference) print_inference(*c.inference, out);
}

}  // namespace

int run_compare(const CompareOptions& o, std::ostream& out, std::ostream& err) {
  std::unique_ptr<history::HistoryReader> history = open_history(o.study, "compare", err);
  if (!history) return kUsage;
  Result<Comparison> c = compare(o, *history, err);
  if (!c.ok()) {
    err << "fp8scope compare: " << c.message() << "\n";
    return kUsage;
  }
  if (!c.value().loss && !c.value().inference) {
    err << "fp8scope compare: " << nothing_to_compare(o, *history) << "\n";
    return kUsage;
  }
  if (o.json) {
    print_json(o, c.value(), out);
  } else {
    print_text(o, c.value(), out);
  }
  return 0;
}

}  // namespace fp8scope::cli
