#include "fp8scope/insight/attribution.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "advice_signals.h"

namespace fp8scope::insight {
namespace {

// A signal, read on a scale where "worse" is up and changes are comparable: ratios as they are,
// errors in log10, the scale lag in binades. The floor is the smallest spread taken as noise, so
// a flat past does not turn a tiny change into a huge score.
struct Signal {
  const char* name;
  double floor;
  bool lagging_recipes_only;
  std::function<double(const RecordPoint&)> read;
};

double log10_or_nan(double v) { return v > 0 ? std::log10(v) : std::nan(""); }

const std::vector<Signal>& signals() {
  static const std::vector<Signal> table = {
      {"underflow_ratio", 1e-3, false, [](const RecordPoint& p) { return statistic(p, "underflow_ratio"); }},
      {"overflow_ratio", 1e-4, false, [](const RecordPoint& p) { return statistic(p, "overflow_ratio"); }},
      // Codes at +-max: for the job's own FP8 data the only trace of clipping (its amax is clipped too).
      {"saturation_ratio", 1e-3, false, [](const RecordPoint& p) { return statistic(p, "saturation_ratio"); }},
      {"mse", 0.1, false, [](const RecordPoint& p) { return log10_or_nan(statistic(p, "mse")); }},
      {"1-cosine", 0.1, false, [](const RecordPoint& p) { return log10_or_nan(1.0 - statistic(p, "cosine")); }},
      // Delayed scaling's scale over the scale current scaling would choose: above 0 it clips.
      // Only per-tensor scales that come from a history lag (the delayed what-if, the job's own).
      {"scale_lag_log2", 0.25, true,
       [](const RecordPoint& p) {
         return p.scale > 0 && p.scale_current > 0 ? std::log2(p.scale / p.scale_current) : std::nan("");
       }},
  };
  return table;
}

// The displayed value of a signal: the ratio itself, or back from its log scale.
double shown(const Signal& s, double v) {
  const std::string name = s.name;
  if (name == "mse") return std::pow(10.0, v);
  if (name == "1-cosine") return std::pow(10.0, v);
  return v;
}

}  // namespace

Attribution attribute(const RunRecords& run, std::uint64_t onset, const std::string& cause,
                      const AttributionOptions& o) {
  Attribution a;
  a.onset_step = onset;
  a.cause = cause;
  const std::uint64_t lag = o.lag_steps > 0 ? o.lag_steps : run.sampling_interval;
  const std::uint64_t window_begin = onset > o.lead_steps ? onset - o.lead_steps : 0;
  const std::uint64_t window_end = onset + lag;  // inclusive
  std::map<TensorKey, Suspect> best;
  for (const auto& [tensor, records] : run.tensors) {
    for (const auto& [recipe, sample] : records.recipes) {
      // Split the series: the samples before the window, and those inside it. A thinned series
      // adds the points it kept whole around the onsets.
      std::vector<const RecordPoint*> past, window;
      for (const RecordPoint* p : points_with_onsets(records, recipe, sample)) {
        if (p->step < window_begin) past.push_back(p);
        else if (p->step <= window_end) window.push_back(p);
      }
      if (past.size() > o.before_samples) past.erase(past.begin(), past.end() - static_cast<std::ptrdiff_t>(o.before_samples));
      if (past.empty() || window.empty()) continue;
      const bool lagging = recipe.caster.is(RecipeKind::kTensorDelayed) || recipe.caster.is_job();
      for (const Signal& s : signals()) {
        if (s.lagging_recipes_only && !lagging) continue;
        std::vector<double> before;
        for (const RecordPoint* p : past) {
          if (const double v = s.read(*p); std::isfinite(v)) before.push_back(v);
        }
        if (before.empty()) continue;
        const auto [center, sigma] = robust_baseline(before, s.floor);
        for (const RecordPoint* p : window) {
          const double v = s.read(*p);
          if (!std::isfinite(v)) continue;
          const double score = (v - center) / sigma;
          Suspect& slot = best[tensor];
          if (slot.signal.empty() || score > slot.score) {
            slot = Suspect{tensor, recipe, s.name, shown(s, center), shown(s, v), score, p->step, p->source};
          }
        }
      }
    }
  }
  for (auto& [tensor, suspect] : best) a.suspects.push_back(std::move(suspect));
  a.warnings = early_warnings(run, onset, o.warnings);
  std::stable_sort(a.suspects.begin(), a.suspects.end(),
                   [](const Suspect& x, const Suspect& y) { return x.score > y.score; });
  return a;
}

SeriesLimits attribution_limits(const std::vector<Spike>& spikes, const std::optional<Divergence>& divergence,
                                const AttributionOptions& o, std::size_t max_points) {
  constexpr std::size_t kWindowSamples = 8;  // a window is lead_steps + one sampling interval: 2 or 3 samples
  SeriesLimits limits;
  limits.max_points = max_points;
  limits.before = o.before_samples;
  limits.after = kWindowSamples;
  if (max_points == 0) return limits;  // nothing is thinned
  std::vector<std::uint64_t> onsets;
  if (divergence) onsets.push_back(divergence->onset_step);
  std::vector<const Spike*> highest;
  for (const Spike& s : spikes) highest.push_back(&s);
  std::stable_sort(highest.begin(), highest.end(), [](const Spike* a, const Spike* b) { return a->z > b->z; });
  for (const Spike* s : highest) onsets.push_back(s->start_step);
  const std::size_t fit = std::max<std::size_t>(1, max_points / (limits.before + limits.after));
  if (onsets.size() > fit) onsets.resize(fit);
  for (std::uint64_t onset : onsets) limits.whole_at.push_back(onset > o.lead_steps ? onset - o.lead_steps : 0);
  return limits;
}

std::vector<Attribution> attribute_onsets(const RunRecords& run, const std::vector<Spike>& spikes,
                                          const std::optional<Divergence>& divergence, const AttributionOptions& o) {
  std::vector<Attribution> out;
  for (const Spike& s : spikes) out.push_back(attribute(run, s.start_step, "spike", o));
  if (divergence) out.push_back(attribute(run, divergence->onset_step, "divergence", o));
  return out;
}

}  // namespace fp8scope::insight
