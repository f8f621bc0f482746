#include "fp8scope/kernels/statistics_table.h"

#include <cmath>
#include <limits>

namespace fp8scope {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double ratio(double part, std::uint64_t whole) { return whole == 0 ? kNaN : part / static_cast<double>(whole); }

// Both compare the finite elements only: with none (an all-NaN/Inf tensor) they are undefined.
double cosine(const TensorMoments& m, const QuantStats& q) {
  if (m.finite == 0) return kNaN;
  if (m.sum_squares == 0.0 && q.dequant_squares == 0.0) return 1.0;  // both all zero: identical
  if (m.sum_squares == 0.0 || q.dequant_squares == 0.0) return 0.0;
  return q.dot / (std::sqrt(m.sum_squares) * std::sqrt(q.dequant_squares));
}

double sqnr_db(const TensorMoments& m, const QuantStats& q) {
  if (m.finite == 0) return kNaN;
  if (q.squared_error == 0.0) return kInf;
  return 10.0 * std::log10(m.sum_squares / q.squared_error);
}

// A channel statistic's moments-and-cast form: undefined (the channels are not in the moments).
double from_channels_only(const TensorMoments&, const QuantStats&) { return kNaN; }

constexpr auto kTensor = StatisticScope::kTensor;
constexpr auto kWhatIf = StatisticScope::kWhatIf;
constexpr auto kObserved = StatisticScope::kObserved;
constexpr auto kRecipe = StatisticScope::kRecipe;
constexpr auto kCastCheck = StatisticScope::kCastCheck;

constexpr Statistic kStatistics[] = {
    {"numel", nullptr, "elements", "Elements in the sampled tensor.", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return static_cast<double>(m.numel); }},
    {"nan", nullptr, "elements", "NaN elements, counted apart from every other statistic.", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return static_cast<double>(m.nan); }},
    {"inf", nullptr, "elements", "Infinite elements, counted apart from every other statistic.", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return static_cast<double>(m.inf); }},
    {"nonfinite_ratio", nullptr, "ratio", "Share of elements that are NaN or Inf.", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return ratio(m.nan + m.inf, m.numel); }},
    {"zero_ratio", nullptr, "ratio", "Share of elements that are exactly zero.", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return ratio(m.finite - m.nonzero, m.numel); }},
    {"amax", nullptr, "value", "Largest finite |x|.", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return m.finite ? static_cast<double>(m.amax) : kNaN; }},
    {"amin", nullptr, "value", "Smallest nonzero finite |x|.", kTensor, true,
     [](const TensorMoments& m, const QuantStats&) { return m.nonzero ? static_cast<double>(m.amin) : kNaN; }},
    {"dynamic_range_log2", nullptr, "log2", "log2(amax) - log2(amin): binades the tensor spans.", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) {
       return m.nonzero ? std::log2(static_cast<double>(m.amax)) - std::log2(static_cast<double>(m.amin)) : kNaN;
     }},
    {"mean", nullptr, "value", "Mean of the finite elements.", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return m.finite ? m.sum / static_cast<double>(m.finite) : kNaN; }},
    {"std", nullptr, "value", "Population standard deviation of the finite elements.", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) {
       return m.finite ? std::sqrt(m.m2 / static_cast<double>(m.finite)) : kNaN;
     }},
    {"kurtosis", nullptr, "1",
     "Pearson's kurtosis of the finite elements, n Σ(x - mean)⁴ / (Σ(x - mean)²)², 3 for a normal distribution; its "
     "growth in activations warns of an FP8 divergence (FOG, arXiv 2505.20524).",
     kTensor, false,
     [](const TensorMoments& m, const QuantStats&) {
       return m.finite && m.m2 > 0.0 ? static_cast<double>(m.finite) * m.m4 / (m.m2 * m.m2) : kNaN;
     }},
    // TE's LogTensorStats min, max, l1_norm and l2_norm (debug/features/utils/stats_computation.py:
    // 210-231 at d0067d0: torch.min, torch.max, torch.norm(x, 1), sqrt(Σx²)), over the finite elements.
    {"min", nullptr, "value", "Smallest finite element (signed).", kTensor, true,
     [](const TensorMoments& m, const QuantStats&) { return m.finite ? static_cast<double>(m.min) : kNaN; }},
    {"max", nullptr, "value", "Largest finite element (signed).", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return m.finite ? static_cast<double>(m.max) : kNaN; }},
    {"l1_norm", nullptr, "value", "Σ|x| over the finite elements (TE's l1_norm).", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return m.finite ? m.sum_abs : kNaN; }},
    {"l2_norm", nullptr, "value", "sqrt(Σx²) over the finite elements (TE's l2_norm).", kTensor, false,
     [](const TensorMoments& m, const QuantStats&) { return m.finite ? std::sqrt(m.sum_squares) : kNaN; }},
    {"channel_amax_ratio", nullptr, "1",
     "Largest channel amax over the median channel amax (channels: columns of X, rows of W); outlier channels "
     "that grow late in training warn of an FP8 or FP4 divergence (arXiv 2409.12517, 2602.02047).",
     kTensor, false, from_channels_only, [](const ChannelSummary& c) { return c.amax_ratio(); }},
    {"outlier_channels", nullptr, "channels", "Channels whose amax exceeds the outlier factor (8 unless --outlier-channel-factor says) times the median "
     "channel amax.", kTensor,
     false, from_channels_only,
     [](const ChannelSummary& c) { return c.channels ? static_cast<double>(c.outliers.size()) : kNaN; }},
    {"persistent_outlier_channels", nullptr, "channels",
     "Outlier channels in every one of the tensor's last samples (the daemon's --outlier-channel-window).", kTensor,
     false, from_channels_only,
     [](const ChannelSummary& c) { return c.channels ? static_cast<double>(c.persistent.size()) : kNaN; }},
    {"underflow_ratio", nullptr, "ratio", "Nonzero elements the cast flushed to zero, over all elements (TE's ratio).",
     kWhatIf, false, [](const TensorMoments& m, const QuantStats& q) { return ratio(q.underflow, m.numel); }},
    {"underflow_nonzero_ratio", nullptr, "ratio", "Nonzero elements the cast flushed to zero, over nonzero elements.",
     kWhatIf, false, [](const TensorMoments& m, const QuantStats& q) { return ratio(q.underflow, m.nonzero); }},
    {"overflow_ratio", nullptr, "ratio", "Elements whose scaled value the cast clipped at the format's max.", kWhatIf,
     false, [](const TensorMoments& m, const QuantStats& q) { return ratio(q.overflow, m.numel); }},
    {"saturation_ratio", nullptr, "ratio", "Elements cast to exactly ±max (clipped or not).", kRecipe, false,
     [](const TensorMoments& m, const QuantStats& q) { return ratio(q.saturated, m.numel); }},
    {"mse", nullptr, "value", "Mean squared error of the dequantized tensor over finite elements (fp64 sums).", kWhatIf,
     false,
     [](const TensorMoments& m, const QuantStats& q) {
       return m.finite ? q.squared_error / static_cast<double>(m.finite) : kNaN;
     }},
    {"cosine", "cosine_similarity", "1", "Cosine similarity of the tensor and its dequantized copy.", kWhatIf, true,
     cosine},
    {"sqnr_db", nullptr, "dB", "Signal to quantization noise ratio, 20 log10(|x| / |x - x̂|).", kWhatIf, true, sqnr_db},
    {"block_scale_floor_ratio", nullptr, "ratio",
     "The job's own block scales at their encoding's smallest value (E8M0 2^-127, UE4M3 0 or 2^-9, fp32 below "
     "2^-126), over blocks holding a nonzero value.",
     kObserved, false,
     [](const TensorMoments&, const QuantStats& q) { return ratio(q.scale_blocks_at_floor, q.scale_blocks); }},
    {"block_scale_ceiling_ratio", nullptr, "ratio",
     "The job's own block scales at their encoding's largest value (E8M0 2^127, UE4M3 448, fp32 Inf), over blocks "
     "holding a nonzero value.",
     kObserved, false,
     [](const TensorMoments&, const QuantStats& q) { return ratio(q.scale_blocks_at_ceiling, q.scale_blocks); }},
    {"max_block_dynamic_range_log2", nullptr, "log2",
     "Largest log2(max / min nonzero |x|) within one of the job's scale blocks (TE's max_blockwise_dynamic_range).",
     kObserved, false,
     [](const TensorMoments&, const QuantStats& q) {
       return q.scale_blocks ? static_cast<double>(q.max_block_dynamic_range_log2) : kNaN;
     }},
    {"code_mismatch_ratio", nullptr, "ratio",
     "The job's own codes (with their block scales) that fp8scope's model of the job's recipe, casting the same "
     "high-precision input with the same scale, writes differently: a live check of the model, 0 when it is "
     "right; NaN where the codes are random draws (stochastic rounding).",
     kCastCheck, false,
     [](const TensorMoments&, const QuantStats& q) { return ratio(static_cast<double>(q.code_mismatches), q.codes_compared); }},
};

}  // namespace

std::span<const Statistic> statistics() { return kStatistics; }

const Statistic* find_statistic(std::string_view key) {
  for (const Statistic& s : kStatistics) {
    if (key == s.key) return &s;
  }
  return nullptr;
}

}  // namespace fp8scope
