#include "fp8scope/insight/advice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "fp8scope/kernels/float_formats.h"
#include "fp8scope/kernels/recipe.h"
#include "advice_signals.h"

namespace fp8scope::insight {
namespace {

// A suspect must stand this many robust sigmas out to take the blame for an onset.
constexpr double kBlameScore = 3.0;

template <class... Args>
std::string format(const char* fmt, Args... args) {
  char text[320];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

// A figure in a reason as the tables show it: "-" where it is undefined (the SQNR of an all-zero
// tensor), not "nan".
std::string shown(double v, const char* fmt) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return format(fmt, v);
}

double max_of(const std::vector<double>& v) {
  double m = std::nan("");
  for (double x : v) {
    if (std::isfinite(x) && !(x <= m)) m = x;
  }
  return m;
}

double min_of(const std::vector<double>& v) {
  double m = std::nan("");
  for (double x : v) {
    if (std::isfinite(x) && !(x >= m)) m = x;
  }
  return m;
}

// Between a typical and a worst value, on a log scale: the typical step stays below, the worst
// crosses. Zero typical values count as a hundredth of the worst.
double between(double typical, double worst) {
  return std::sqrt(std::max(typical, worst * 1e-2) * worst);
}

// AutoswitchGemm thresholds for a tensor fine at its median but past a level of concern at some
// sampled step (underflow, or SQNR below it); nothing otherwise.
std::optional<AutoswitchThresholds> autoswitch_for(const std::vector<RecordPoint>* points, bool fp4) {
  const std::vector<double> underflow = series(points, "underflow_ratio"), sqnr = series(points, "sqnr_db"),
                            mse = series(points, "mse");
  const double u_median = median_of(underflow), u_worst = max_of(underflow);
  const double q_median = median_of(sqnr), q_worst = min_of(sqnr);
  const double e_median = median_of(mse), e_worst = max_of(mse);
  const bool fine_usually = !at_least("underflow_ratio", u_median, false, fp4) && !at_least("sqnr_db", q_median, false, fp4);
  const bool bad_sometimes = at_least("underflow_ratio", u_worst, false, fp4) || at_least("sqnr_db", q_worst, false, fp4);
  if (!fine_usually || !bad_sometimes || !std::isfinite(e_worst) || !(e_worst > e_median)) return std::nullopt;
  AutoswitchThresholds t;
  t.underflow_pct = 100.0 * (u_worst > u_median ? between(u_median, u_worst) : levels("underflow_ratio", fp4).severe);
  t.mse = between(e_median, e_worst);
  return t;
}

}  // namespace

const char* recommendation_name(Recommendation r) {
  switch (r) {
    case Recommendation::kKeepFp8: return "keep FP8";
    case Recommendation::kCurrentScaling: return "current scaling for this tensor";
    case Recommendation::kTuneDelayed: return "raise margin or shorten the history";
    case Recommendation::kE5m2ForDy: return "E5M2 for Dy";
    case Recommendation::kFinerRecipe: return "MXFP8 for this tensor";
    case Recommendation::kFallBackToBf16: return "fall back to BF16";
  }
  return "?";
}

const std::vector<Threshold>& advice_thresholds() {
  // FP4 levels from what NVFP4 and MXFP4 do to N(0, 1) data (fp8scope analyze: underflow 6.8% and
  // 10.7%, SQNR 20.4 and 18.7 dB): concern at twice that underflow or 4 dB less SQNR, severe at
  // four times or 7 dB less; 1-cosine follows SQNR (1-cosine ~ 10^(-SQNR/10) / 2).
  static const std::vector<Threshold> table = {
      {"underflow_ratio", {0, 1e-3, 1e-2}, {0, 0.15, 0.30},
       "share of elements current scaling (or the job's block recipe) flushes to zero (median)"},
      {"overflow_ratio", {0, 1e-5, 1e-3}, {0, 1e-5, 1e-3}, "share of elements delayed scaling clips (mean)"},
      {"sqnr_db", {30, 20.0, 12.0}, {22, 16.0, 13.0},
       "signal to quantization noise under current scaling (or the job's block recipe), dB (median)"},
      {"1-cosine", {0, 5e-3, 2e-2}, {0, 1.25e-2, 2.5e-2},
       "1 - cosine of the tensor and its quantized copy under the same recipe (median)"},
      {"lagging_share", {0, 0.05, 0.25}, {0, 0.05, 0.25},
       "share of sampled steps where delayed scaling's scale exceeds current's"},
      {"spike_blame", {0, 1.0, 2.0}, {0, 1.0, 2.0}, "loss spikes or divergence at whose onset this tensor moved most"},
  };
  return table;
}

namespace {

// The series one tensor's advice reads: the what-ifs (the run's own, or the baseline's when the
// run has none, as an FP8 run's tensors arrive already cast) and the job's own codes.
struct Sources {
  const std::vector<RecordPoint>* current = nullptr;   // the judging recipe (current scaling or the job's block recipe)
  const std::vector<RecordPoint>* delayed = nullptr;   // delayed scaling (per-tensor jobs only)
  const std::vector<RecordPoint>* observed = nullptr;  // the job's own codes
  const std::vector<RecordPoint>* mxfp8 = nullptr;     // the finer recipe an FP4 tensor may take
  const FloatFormat* current_format = &kE4M3;
  bool block = false;  // the job cast with block scales
  bool fp4 = false;    // judged by FP4's levels
};

Sources choose_sources(const TensorKey& key, const TensorRecords& own, const RunRecords& run,
                       const RunRecords* baseline, TensorAdvice& a) {
  Sources src;
  // A block-scaled job's tensors are judged by the what-if of the recipe it cast them with.
  src.block = own.block_scaled();
  a.observed_layout = own.scale_layout;
  a.what_if_recipe = own.matching_recipe();
  src.fp4 = fp4_recipe(a.what_if_recipe);
  const TensorRecords* what_if = &own;
  a.what_if_source = run.run;
  if (own.find(a.what_if_recipe) == nullptr && own.find(RecipeKind::kTensorDelayed) == nullptr && baseline != nullptr) {
    if (auto it = baseline->tensors.find(key); it != baseline->tensors.end()) {
      what_if = &it->second;
      a.what_if_source = baseline->run;
    }
  }
  src.current = what_if->find(a.what_if_recipe, &src.current_format);
  src.delayed =
      src.block ? nullptr : what_if->find(RecipeKind::kTensorDelayed, src.current != nullptr ? nullptr : &src.current_format);
  if (src.current == nullptr && src.delayed == nullptr) a.what_if_source.clear();
  const std::vector<RecordPoint>* what_ifs = src.current != nullptr ? src.current : src.delayed;
  if (what_ifs != nullptr && !what_ifs->empty()) a.what_if_data = what_ifs->back().source;
  src.observed = own.find(Caster::job(), &a.observed_format);
  src.mxfp8 = what_if->find(RecipeKind::kMxfp8);
  return src;
}

// The figures the advice rests on: medians and means of the sampled steps, the lag, the blame at
// loss onsets, and a replay of delayed scaling on the run's own amaxes.
void measure(const TensorKey& key, const Sources& src, const std::vector<Attribution>& onsets, int sampling_interval,
             TensorAdvice& a) {
  a.saturation_observed = mean_of(series(src.observed, "saturation_ratio"));
  a.underflow_current = median_of(series(src.current, "underflow_ratio"));
  a.sqnr_current_db = median_of(series(src.current, "sqnr_db"));
  std::vector<double> cosine = series(src.current, "cosine");
  for (double& c : cosine) c = 1.0 - c;
  a.one_minus_cosine = median_of(cosine);
  a.overflow_delayed = mean_of(series(src.delayed, "overflow_ratio"));
  // The job's own scales when it ran FP8 (what really lagged), else the delayed what-if's. Block
  // scales come from each block's own amax: nothing lags.
  a.lagging_share = std::nan("");
  const auto* lag_source = src.block ? nullptr : (src.observed != nullptr ? src.observed : src.delayed);
  if (lag_source != nullptr && !lag_source->empty()) {
    std::size_t lagging = 0;
    for (const RecordPoint& p : *lag_source) lagging += p.scale > p.scale_current * (1.0 + 1e-6);
    a.lagging_share = static_cast<double>(lagging) / static_cast<double>(lag_source->size());
  }
  for (const Attribution& onset : onsets) {
    if (!onset.suspects.empty() && onset.suspects.front().tensor == key && onset.suspects.front().score >= kBlameScore) {
      ++a.spike_blame;
    }
  }
  // The run's own amaxes when it has them (the observed FP8 data dequantized), for the replay of
  // delayed scaling (which block-scaled jobs do not use).
  const auto* amax_source = src.observed != nullptr ? src.observed : src.current != nullptr ? src.current : src.delayed;
  const FloatFormat* amax_format = src.observed != nullptr ? a.observed_format : src.current_format;
  if (amax_source != nullptr && !src.block) {
    std::vector<AmaxPoint> amax;
    for (const RecordPoint& p : *amax_source) amax.push_back({p.step, statistic(p, "amax")});
    a.replay = suggest_delayed_scaling(amax, amax_format == &kE5M2 ? CastFormat::kE5M2 : CastFormat::kE4M3, sampling_interval);
  }
}

// Where the job ran FP8 its own scales say whether delayed scaling clipped (the lag); the delayed
// what-if, replayed on sampled steps only, would overstate it.
double what_if_overflow(const Sources& src, const TensorAdvice& a) {
  return src.observed != nullptr ? std::nan("") : a.overflow_delayed;
}

// The risk: the worst of the signals' levels, and which signal it was.
void score(const Sources& src, TensorAdvice& a) {
  const double values[] = {a.underflow_current, what_if_overflow(src, a), a.sqnr_current_db,
                           a.one_minus_cosine,  a.lagging_share,            static_cast<double>(a.spike_blame)};
  static_assert(std::size(values) == std::size(kAdviceSignals));
  for (std::size_t i = 0; i < std::size(values); ++i) {
    const double l = level(levels(kAdviceSignals[i], src.fp4), values[i]);
    if (l > a.risk) a.risk = l, a.driver = kAdviceSignals[i];
  }
}

// Binades from a format's smallest subnormal to its max, from its row.
double binades(const FloatFormat& f) { return std::log2(max_value(f) / min_subnormal(f)); }

// The reason for delayed-scaling advice: the onsets it led, the lag, what a replay found.
std::string lag_reason(const Sources& src, const TensorAdvice& a, bool lagging, bool tuning_fixes) {
  const ReplaySuggestion* r = a.replay ? &*a.replay : nullptr;
  const double share = 100.0 * (std::isfinite(a.lagging_share) ? a.lagging_share : 0.0);
  std::string why = a.spike_blame > 0 ? format("it moved most at %zu loss onset(s)", a.spike_blame) : "";
  // The lag is a reason only where there is one: a tensor blamed for a spike whose scale never
  // exceeded current scaling's is not described by "at 0% of the sampled steps".
  if (lagging || share > 0) {
    why += why.empty() ? "" : "; ";
    why += src.observed != nullptr
               ? format("the job's own scale exceeded current scaling's at %.0f%% of the sampled steps "
                        "(%s of its FP8 codes at +-max)",
                        share, shown(a.saturation_observed, "%.3g").c_str())
               : format("delayed scaling clips %s of the elements and its scale exceeds current's at %.0f%% of "
                        "the sampled steps",
                        shown(a.overflow_delayed, "%.3g").c_str(), share);
  }
  if (tuning_fixes) {
    why += format("; replay: amax_history_len=%d margin=%d clips no sampled step (TE's default clips %zu)",
                  r->best.history_len, r->best.margin, r->te_default.clipped_steps);
  } else if (r != nullptr) {
    why += format("; no history length or margin up to 4 stops the clipping (best clips %zu of %zu steps)",
                  r->best.clipped_steps, r->best.steps);
  }
  return why;
}

// One recommendation and its reason, from the figures.
void recommend(const TensorKey& key, const Sources& src, TensorAdvice& a) {
  // The gradient's span in binades: the BF16 tensor's (the run's or the baseline's) when there is
  // one; the job's own E4M3 codes cannot span more than E4M3 holds, so filling it is the sign.
  const std::vector<RecordPoint>* bf16_source = src.current != nullptr ? src.current : src.delayed;
  const double range = median_of(series(bf16_source != nullptr ? bf16_source : src.observed, "dynamic_range_log2"));
  const double range_limit = bf16_source != nullptr ? binades(kE4M3) : binades(kE4M3) - 1.0;
  const bool lossy_even_current = at_least("underflow_ratio", a.underflow_current, true, src.fp4) ||
                                  at_least("sqnr_db", a.sqnr_current_db, true, src.fp4) ||
                                  at_least("1-cosine", a.one_minus_cosine, true, src.fp4);
  const bool lagging = at_least("overflow_ratio", what_if_overflow(src, a), false) ||
                       at_least("lagging_share", a.lagging_share, false);
  // An FP4 job's tensor that its recipe loses but MXFP8 holds: the finer recipe, not BF16.
  const double mxfp8_sqnr = median_of(series(src.mxfp8, "sqnr_db"));
  const bool mxfp8_holds = src.fp4 && src.mxfp8 != nullptr &&
                           !at_least("underflow_ratio", median_of(series(src.mxfp8, "underflow_ratio")), true) &&
                           !at_least("sqnr_db", mxfp8_sqnr, true);
  const std::string cast_by =
      src.block ? std::string("the job's recipe (") + recipe_name(a.what_if_recipe) + ")" : "current scaling";
  const std::string underflow = shown(a.underflow_current, "%.3g"), sqnr = shown(a.sqnr_current_db, "%.1f");
  if (!src.block && key.operand == "dy" && a.observed_format == &kE4M3 && std::isfinite(range) && range > range_limit) {
    a.recommendation = Recommendation::kE5m2ForDy;
    a.reason = format("the gradient spans %.1f binades%s; E4M3 holds %.1f, E5M2 %.1f", range,
                      bf16_source != nullptr ? "" : " of E4M3 codes", binades(kE4M3), binades(kE5M2));
  } else if (lossy_even_current && mxfp8_holds) {
    a.recommendation = Recommendation::kFinerRecipe;
    a.finer_recipe = RecipeKind::kMxfp8;
    a.reason = format("%s loses too much (underflow %s, SQNR %s dB); %s keeps SQNR at %s dB", cast_by.c_str(),
                      underflow.c_str(), sqnr.c_str(), recipe_name(*a.finer_recipe), shown(mxfp8_sqnr, "%.1f").c_str());
  } else if (lossy_even_current) {
    a.recommendation = Recommendation::kFallBackToBf16;
    a.reason = format("even %s loses too much: underflow %s, SQNR %s dB, 1-cosine %s", cast_by.c_str(),
                      underflow.c_str(), sqnr.c_str(), shown(a.one_minus_cosine, "%.3g").c_str());
  } else if (lagging || a.spike_blame > 0) {
    const ReplaySuggestion* r = a.replay ? &*a.replay : nullptr;
    const bool tuning_fixes = r != nullptr && r->best.clipped_steps == 0 && r->te_default.clipped_steps > 0;
    a.recommendation = tuning_fixes ? Recommendation::kTuneDelayed : Recommendation::kCurrentScaling;
    a.reason = lag_reason(src, a, lagging, tuning_fixes);
  } else {
    a.recommendation = Recommendation::kKeepFp8;
    a.reason = src.block ? format("under %s: underflow %s, SQNR %s dB: within the thresholds", recipe_name(a.what_if_recipe),
                                  underflow.c_str(), sqnr.c_str())
                         : format("underflow %s, SQNR %s dB, delayed overflow %s: within the thresholds",
                                  underflow.c_str(), sqnr.c_str(), shown(a.overflow_delayed, "%.3g").c_str());
  }
  if (a.recommendation != Recommendation::kFallBackToBf16 && a.recommendation != Recommendation::kFinerRecipe) {
    a.autoswitch = autoswitch_for(src.current, src.fp4);
  }
}

}  // namespace

RunAdvice advise(const RunRecords& run, const std::vector<Attribution>& onsets, const RunRecords* baseline) {
  RunAdvice out;
  out.run = run.run;
  out.sampling_interval = run.sampling_interval;
  for (const auto& [key, own] : run.tensors) {
    TensorAdvice a;
    a.tensor = key;
    const Sources src = choose_sources(key, own, run, baseline, a);
    measure(key, src, onsets, run.sampling_interval, a);
    score(src, a);
    recommend(key, src, a);
    out.tensors.push_back(std::move(a));
  }
  std::stable_sort(out.tensors.begin(), out.tensors.end(), [](const TensorAdvice& x, const TensorAdvice& y) {
    if (x.spike_blame != y.spike_blame) return x.spike_blame > y.spike_blame;
    return x.risk > y.risk;
  });
  out.experts = expert_outliers(run);
  out.ladder = recipe_ladder(run, baseline);
  return out;
}

}  // namespace fp8scope::insight
