#include "fp8scope/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <sstream>

#include "fp8scope/insight/advice_formats.h"
#include "fp8scope/report/expert_section.h"
#include "fp8scope/report/html_parts.h"
#include "fp8scope/report/svg_chart.h"

namespace fp8scope::report {
namespace {

void loss_section(const insight::RunStudy& s, std::ostringstream& out) {
  out << "<h2>Loss</h2>";
  if (!s.loss) {
    out << "<p class='muted'>Run " << html_escape(s.records.run)
        << " logged no loss (fp8scope log, the C API or the Python helper record it).</p>";
    return;
  }
  LineChart chart;
  chart.title = "loss per step";
  chart.x_label = "step";
  chart.y_label = "loss";
  double lo = INFINITY, hi = 0;
  auto add = [&](const insight::RunLoss& r, const char* colour) {
    LineSeries series{r.run, colour, {}};
    for (const insight::ScalarPoint& p : r.series) {
      series.points.emplace_back(static_cast<double>(p.step), p.value);
      if (std::isfinite(p.value) && p.value > 0) lo = std::min(lo, p.value), hi = std::max(hi, p.value);
    }
    chart.series.push_back(std::move(series));
    for (const insight::Spike& sp : r.spikes) {
      const auto rec = sp.steps_to_recover();
      chart.markers.push_back({static_cast<double>(sp.peak_step), sp.peak,
                               r.run + ": spike at step " + std::to_string(sp.peak_step) + ", " + number(sp.height) +
                                   "x, " + (rec ? std::to_string(*rec) + " steps to recover" : "not recovered"),
                               colour});
    }
    if (r.divergence) chart.rules.emplace_back(static_cast<double>(r.divergence->onset_step), r.run + ": divergence onset");
  };
  add(*s.loss, "#ff7f0e");
  if (s.comparison) add(s.comparison->baseline, "#1f77b4");
  chart.log_y = hi > 10 * lo;
  out << render(chart);
  if (s.comparison) {
    const insight::LossComparison& c = *s.comparison;
    out << "<p class='" << (c.run_worse ? "verdict-bad" : "verdict-ok") << "'>"
        << (c.run_worse ? "Run " + html_escape(c.run.run) + " is worse than baseline " + html_escape(c.baseline.run)
                        : "No loss signal sets run " + html_escape(c.run.run) + " apart from baseline " +
                              html_escape(c.baseline.run))
        << "</p><ul>";
    for (const std::string& f : c.findings) out << "<li>it " << html_escape(f) << "</li>";
    out << "</ul><table><tr><th></th><th>run " << html_escape(c.run.run) << "</th><th>baseline "
        << html_escape(c.baseline.run) << "</th></tr>";
    auto row = [&](const char* label, const std::string& a, const std::string& b) {
      out << "<tr><th>" << label << "</th>" << cell(a, true) << cell(b, true) << "</tr>";
    };
    row("points", std::to_string(c.run.series.size()), std::to_string(c.baseline.series.size()));
    row("spikes", std::to_string(c.run.spikes.size()), std::to_string(c.baseline.spikes.size()));
    row("spikes per 1k steps", number(c.run.spikes_per_1k_steps), number(c.baseline.spikes_per_1k_steps));
    auto recovery = [](const insight::RunLoss& r) {
      return r.median_recovery_steps ? number(*r.median_recovery_steps, "%.0f") : std::string("-");
    };
    row("median steps to recover", recovery(c.run), recovery(c.baseline));
    row("never recovered", std::to_string(c.run.unrecovered), std::to_string(c.baseline.unrecovered));
    auto diverged = [](const insight::RunLoss& r) {
      return r.divergence ? "from step " + std::to_string(r.divergence->onset_step) : std::string("no");
    };
    row("diverged", diverged(c.run), diverged(c.baseline));
    out << "</table>";
  }
}

void attribution_section(const insight::RunStudy& s, std::ostringstream& out) {
  out << "<h2>Tensors that moved at each loss onset</h2>";
  if (s.onsets.empty()) {
    out << "<p class='muted'>No spike or divergence in the run's loss: nothing to attribute.</p>";
    return;
  }
  for (const insight::Attribution& a : s.onsets) {
    out << "<h3>" << html_escape(a.cause) << " at step " << a.onset_step << "</h3>";
    if (a.suspects.empty()) {
      out << "<p class='muted'>No tensor was sampled both before and around this step.</p>";
    } else {
      out << "<table><tr><th>#</th><th>layer</th><th>gemm</th><th>operand</th><th>recipe</th><th>signal</th>"
             "<th>before</th><th>at</th><th>step</th><th>score (robust sigmas)</th></tr>";
      for (std::size_t i = 0; i < std::min<std::size_t>(8, a.suspects.size()); ++i) {
        const insight::Suspect& x = a.suspects[i];
        out << "<tr>" << cell(std::to_string(i + 1), true) << cell(x.tensor.layer) << cell(x.tensor.gemm)
            << cell(x.tensor.operand) << cell(x.recipe.name()) << cell(x.signal)
            << cell(number(x.before), true) << cell(number(x.at), true) << cell(std::to_string(x.at_step), true)
            << cell(number(x.score, "%.1f"), true) << "</tr>";
      }
      out << "</table>";
    }
    if (a.warnings.empty()) continue;
    out << "<p>Early warnings that had risen before it (kurtosis, outlier channels), longest lead first:</p>"
           "<table><tr><th>layer</th><th>gemm</th><th>operand</th><th>warning</th><th>baseline</th>"
           "<th>before the onset</th><th>risen from step</th><th>steps ahead</th></tr>";
    for (std::size_t i = 0; i < std::min<std::size_t>(8, a.warnings.size()); ++i) {
      const insight::EarlyWarning& w = a.warnings[i];
      out << "<tr>" << cell(w.tensor.layer) << cell(w.tensor.gemm) << cell(w.tensor.operand) << cell(w.signal)
          << cell(number(w.baseline), true) << cell(number(w.before_onset), true)
          << cell(std::to_string(w.first_step), true) << cell(std::to_string(w.steps_ahead), true) << "</tr>";
    }
    out << "</table>";
  }
}

void advice_section(const insight::RunStudy& s, std::ostringstream& out) {
  out << "<h2>Advice</h2><table><tr><th>risk</th><th>layer</th><th>gemm</th><th>operand</th><th>underflow "
         "(current)</th><th>overflow (delayed)</th><th>SQNR dB</th><th>1-cosine</th><th>what-ifs from</th>"
         "<th>FP8 codes at max</th><th>onsets led</th>"
         "<th>replay: history, margin</th><th>recommendation</th><th>why</th></tr>";
  for (const insight::TensorAdvice& t : s.advice.tensors) {
    std::string replay = "-";
    if (t.replay) replay = std::to_string(t.replay->best.history_len) + ", " + std::to_string(t.replay->best.margin);
    out << "<tr><td class='num'><span class='risk' style='width:" << static_cast<int>(40 * t.risk) << "px'></span> "
        << number(t.risk, "%.2f") << "</td>" << cell(t.tensor.layer) << cell(t.tensor.gemm) << cell(t.tensor.operand)
        << cell(number(t.underflow_current), true) << cell(number(t.overflow_delayed), true)
        << cell(number(t.sqnr_current_db, "%.1f"), true) << cell(number(t.one_minus_cosine), true)
        << cell(t.what_if_source.empty() ? "-" : t.what_if_source + " (" + data_source_name(t.what_if_data) + ")")
        << cell(number(t.saturation_observed), true)
        << cell(std::to_string(t.spike_blame), true) << cell(replay)
        << cell(insight::recommendation_name(t.recommendation)) << cell(t.reason) << "</tr>";
  }
  out << "</table>";
  std::ostringstream yaml, megatron;
  insight::write_te_debug_yaml(s.advice, yaml);
  insight::write_megatron_layers(s.advice, megatron);
  out << "<h3>Transformer Engine debug-API config</h3><pre>" << html_escape(yaml.str()) << "</pre>"
      << "<h3>Megatron layers to keep in BF16</h3><pre>" << html_escape(megatron.str()) << "</pre>";
}

void inference_section(const insight::RunStudy& s, std::ostringstream& out) {
  if (s.inference) inference_check_section(*s.inference, out);
}

// The series `caster` cast for a tensor: the run's own, else (an FP8 run has only what it cast
// itself) the same tensor's in the baseline; with the run name it came from.
std::pair<const std::vector<insight::RecordPoint>*, std::string> series_of(const insight::RunStudy& s,
                                                                            const insight::TensorKey& key,
                                                                            Caster recipe) {
  if (const auto* own = s.records.tensors.at(key).find(recipe)) return {own, s.records.run};
  if (s.baseline_records) {
    auto it = s.baseline_records->tensors.find(key);
    if (it != s.baseline_records->tensors.end()) {
      if (const auto* base = it->second.find(recipe)) return {base, s.baseline_records->run};
    }
  }
  return {nullptr, ""};
}

// Rows: the riskiest tensors; columns: sampled steps bucketed; a cell holds the bucket's worst value.
void heatmap_section(const insight::RunStudy& s, const ReportOptions& o, std::ostringstream& out) {
  out << "<h2>Underflow and overflow per tensor and step</h2>";
  // What cast the series a row reads: none = the what-if that casts as the job did (tensor_current,
  // or a block-scaled job's own block recipe). Delayed scaling is drawn only for per-tensor tensors.
  struct Map {
    std::optional<Caster> recipe;
    insight::StudiedStatistic statistic;
    const char* title;
    bool block_scaled_rows;
  };
  const Map maps[] = {
      {std::nullopt, "underflow_ratio", "underflow ratio, ", true},
      {Caster::recipe(RecipeKind::kTensorDelayed), "overflow_ratio", "overflow ratio, delayed scaling", false},
      {Caster::job(), "saturation_ratio", "codes at +-max, the job's own casts", true},
      {Caster::job(), "block_scale_floor_ratio", "block scales at the scale format's floor, the job's own", true}};
  // The underflow a row shows is the job's own where its casts were captured with their inputs,
  // else the what-if's.
  auto recipe_of = [&](const Map& spec, const insight::TensorAdvice& t) {
    if (spec.recipe) return *spec.recipe;
    const auto* own = series_of(s, t.tensor, Caster::job()).first;
    const bool referenced = own != nullptr && std::any_of(own->begin(), own->end(), [](const insight::RecordPoint& p) {
      return p.source == DataSource::kCastInput || p.source == DataSource::kRecomputed;
    });
    return referenced ? Caster::job() : Caster::recipe(t.what_if_recipe);
  };
  auto drawn = [](const Map& spec, const insight::TensorAdvice& t) {
    return spec.block_scaled_rows || t.observed_layout == ScaleLayout::kNone;
  };
  // The columns: every step any drawn series sampled.
  std::vector<std::uint64_t> steps;
  for (const insight::TensorAdvice& t : s.advice.tensors) {
    for (const Map& spec : maps) {
      if (!drawn(spec, t)) continue;
      if (const auto* points = series_of(s, t.tensor, recipe_of(spec, t)).first) {
        for (const insight::RecordPoint& p : *points) steps.push_back(p.step);
      }
    }
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  if (steps.empty()) return;
  const std::size_t columns = std::min(o.heatmap_columns, steps.size());
  auto column_of = [&](std::uint64_t step) {
    const auto at = static_cast<std::size_t>(std::lower_bound(steps.begin(), steps.end(), step) - steps.begin());
    return at * columns / steps.size();
  };
  for (const Map& spec : maps) {
    Heatmap map;
    map.value_label = spec.statistic.key;
    map.cell_width = std::clamp(900 / static_cast<int>(columns), 4, 24);  // about 900 px wide
    std::set<std::string> sources;
    std::set<Caster> recipes;
    for (std::size_t c = 0; c < columns; ++c) map.columns.push_back(static_cast<double>(steps[c * steps.size() / columns]));
    for (const insight::TensorAdvice& t : s.advice.tensors) {
      if (map.rows.size() == o.heatmap_rows) break;
      if (!drawn(spec, t)) continue;
      const auto [points, source] = series_of(s, t.tensor, recipe_of(spec, t));
      if (points == nullptr) continue;
      std::vector<double> row(columns, std::nan(""));
      bool any = false;
      for (const insight::RecordPoint& p : *points) {
        double& slot = row[column_of(p.step)];
        const double v = insight::statistic(p, spec.statistic);
        if (std::isfinite(v) && (std::isnan(slot) || v > slot)) slot = v;
        any = any || std::isfinite(v);
      }
      if (!any) continue;  // e.g. block-scale statistics of a per-tensor cast
      sources.insert(source);
      recipes.insert(recipe_of(spec, t));
      map.rows.push_back(t.tensor.name());
      map.values.push_back(std::move(row));
    }
    std::string from;
    for (const std::string& r : sources) from += (from.empty() ? "" : ", ") + r;
    std::string title = spec.title;
    if (!spec.recipe) {  // name the recipes the rows were cast with
      std::string names;
      for (const Caster r : recipes) names += (names.empty() ? "" : ", ") + std::string(r.name());
      title += recipes == std::set<Caster>{Caster::recipe(RecipeKind::kTensorCurrent)} ? "current scaling"
               : recipes == std::set<Caster>{Caster::job()} ? "the job's own casts, from their inputs"
                                                            : "the job's recipe (" + names + ")";
    }
    map.title = title + " (run " + from + ")";
    if (!map.rows.empty()) out << "<div>" << render(map) << "</div>";
  }
}

void scale_section(const insight::RunStudy& s, const ReportOptions& o, std::ostringstream& out) {
  out << "<h2>Delayed against current scale</h2><p class='muted'>Where delayed scaling's scale (from the amax "
         "history) rises above the scale current scaling would choose for the same tensor, the cast clips. For "
         "an FP8 run, the scale the job itself used; for a block-scaled one, its smallest and largest block scale against "
         "the one per-tensor scale current scaling would choose (FP4: the blocks' spread alone, their scales being "
         "relative to the tensor's global scale).</p>";
  std::size_t drawn = 0;
  for (const insight::TensorAdvice& t : s.advice.tensors) {
    if (drawn == o.scale_plots) break;
    // The job's own scales first (what really happened), else the delayed what-if.
    auto [points, source] = series_of(s, t.tensor, Caster::job());
    const bool block = t.observed_layout != ScaleLayout::kNone;
    const char* label = block ? "smallest block scale" : "the job's own";
    if (points == nullptr) {
      std::tie(points, source) = series_of(s, t.tensor, Caster::recipe(RecipeKind::kTensorDelayed));
      label = "delayed";
    }
    if (points == nullptr) continue;
    LineChart chart;
    chart.title = t.tensor.name() + " (run " + source + (block ? std::string(", ") + scale_layout_name(t.observed_layout) + " block scales" : "") + ")";
    chart.x_label = "step";
    chart.y_label = "scale";
    chart.log_y = true;
    chart.height = 240;
    LineSeries d{label, "#d62728", {}}, c{"current", "#2ca02c", {}}, top{"largest block scale", "#1f77b4", {}};
    for (const insight::RecordPoint& p : *points) {
      d.points.emplace_back(static_cast<double>(p.step), p.scale);
      c.points.emplace_back(static_cast<double>(p.step), p.scale_current);
      if (block) top.points.emplace_back(static_cast<double>(p.step), p.scale_max);
    }
    // An FP4 block's UE4M3 scale multiplies the tensor's global scale (NVFP4's two levels): no one
    // per-tensor scale sits on the same axis, so only the blocks' spread is drawn.
    if (t.observed_format == &kE2M1) {
      chart.series = {d, top};
    } else {
      chart.series = {d, c};
      if (block) chart.series.push_back(top);
    }
    out << render(chart);
    ++drawn;
  }
  if (drawn == 0) out << "<p class='muted'>Neither run has delayed-scaling or FP8 records of these tensors.</p>";
}

}  // namespace

std::string html_report(const insight::RunStudy& s, const ReportOptions& o) {
  std::ostringstream out;
  const std::string title = "fp8scope report: run " + s.records.run +
                            (s.comparison ? " against baseline " + s.comparison->baseline.run : std::string());
  out << "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>" << html_escape(title)
      << "</title><style>" << report_style() << "</style></head><body><h1>" << html_escape(title) << "</h1><p class='muted'>"
      << s.records.records << " records of " << s.records.tensors.size() << " tensors, sampled every "
      << s.records.sampling_interval << " steps; history " << html_escape(o.history) << "; "
      << html_escape(o.generated_by) << "</p>";
  if (const std::string note = insight::thinning_note(s.records); !note.empty()) out << "<p class='muted'>" << html_escape(note) << "</p>";
  loss_section(s, out);
  attribution_section(s, out);
  advice_section(s, out);
  inference_section(s, out);
  heatmap_section(s, o, out);
  expert_section(s, o.heatmap_columns, out);
  scale_section(s, o, out);
  out << "</body></html>\n";
  return out.str();
}

}  // namespace fp8scope::report
