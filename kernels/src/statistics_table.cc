#include "fp8scope/statistics_table.h"

#include <cmath>
#include <limits>

namespace fp8scope {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double ratio(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? kNaN : static_cast<double>(part) / static_cast<double>(whole);
}

double cosine(const TensorMoments& m, const QuantStats& q) {
  if (m.sum_squares == 0.0 && q.dequant_squares == 0.0) return 1.0;  // both all zero: identical
  if (m.sum_squares == 0.0 || q.dequant_squares == 0.0) return 0.0;
  return q.dot / (std::sqrt(m.sum_squares) * std::sqrt(q.dequant_squares));
}

double sqnr_db(const TensorMoments& m, const QuantStats& q) {
  if (q.squared_error == 0.0) return kInf;
  return 10.0 * std::log10(m.sum_squares / q.squared_error);
}

constexpr Statistic kStatistics[] = {
    {"numel", nullptr, "elements", "Elements in the sampled tensor.", false, false,
     [](const TensorMoments& m, const QuantStats&) { return static_cast<double>(m.numel); }},
    {"nan", nullptr, "elements", "NaN elements, counted apart from every other statistic.", false, false,
     [](const TensorMoments& m, const QuantStats&) { return static_cast<double>(m.nan); }},
    {"inf", nullptr, "elements", "Infinite elements, counted apart from every other statistic.", false, false,
     [](const TensorMoments& m, const QuantStats&) { return static_cast<double>(m.inf); }},
    {"nonfinite_ratio", nullptr, "ratio", "Share of elements that are NaN or Inf.", false, false,
     [](const TensorMoments& m, const QuantStats&) { return ratio(m.nan + m.inf, m.numel); }},
    {"zero_ratio", nullptr, "ratio", "Share of elements that are exactly zero.", false, false,
     [](const TensorMoments& m, const QuantStats&) { return ratio(m.finite - m.nonzero, m.numel); }},
    {"amax", nullptr, "value", "Largest finite |x|.", false, false,
     [](const TensorMoments& m, const QuantStats&) { return m.finite ? static_cast<double>(m.amax) : kNaN; }},
    {"amin", nullptr, "value", "Smallest nonzero finite |x|.", false, true,
     [](const TensorMoments& m, const QuantStats&) { return m.nonzero ? static_cast<double>(m.amin) : kNaN; }},
    {"dynamic_range_log2", nullptr, "log2", "log2(amax) - log2(amin): binades the tensor spans.", false, false,
     [](const TensorMoments& m, const QuantStats&) {
       return m.nonzero ? std::log2(static_cast<double>(m.amax)) - std::log2(static_cast<double>(m.amin)) : kNaN;
     }},
    {"mean", nullptr, "value", "Mean of the finite elements.", false, false,
     [](const TensorMoments& m, const QuantStats&) { return m.finite ? m.sum / static_cast<double>(m.finite) : kNaN; }},
    {"std", nullptr, "value", "Population standard deviation of the finite elements.", false, false,
     [](const TensorMoments& m, const QuantStats&) {
       return m.finite ? std::sqrt(m.m2 / static_cast<double>(m.finite)) : kNaN;
     }},
    {"underflow_ratio", nullptr, "ratio", "Nonzero elements the cast flushed to zero, over all elements (TE's ratio).",
     true, false, [](const TensorMoments& m, const QuantStats& q) { return ratio(q.underflow, m.numel); }},
    {"underflow_nonzero_ratio", nullptr, "ratio", "Nonzero elements the cast flushed to zero, over nonzero elements.",
     true, false, [](const TensorMoments& m, const QuantStats& q) { return ratio(q.underflow, m.nonzero); }},
    {"overflow_ratio", nullptr, "ratio", "Elements whose scaled value the cast clipped at the format's max.", true, false,
     [](const TensorMoments& m, const QuantStats& q) { return ratio(q.overflow, m.numel); }},
    {"saturation_ratio", nullptr, "ratio", "Elements cast to exactly ±max (clipped or not).", true, false,
     [](const TensorMoments& m, const QuantStats& q) { return ratio(q.saturated, m.numel); }},
    {"mse", nullptr, "value", "Mean squared error of the dequantized tensor over finite elements (fp64 sums).", true, false,
     [](const TensorMoments& m, const QuantStats& q) {
       return m.finite ? q.squared_error / static_cast<double>(m.finite) : kNaN;
     }},
    {"cosine", "cosine_similarity", "1", "Cosine similarity of the tensor and its dequantized copy.", true, true, cosine},
    {"sqnr_db", nullptr, "dB", "Signal to quantization noise ratio, 20 log10(|x| / |x - x̂|).", true, true, sqnr_db},
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
