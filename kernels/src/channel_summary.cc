#include "fp8scope/kernels/channel_summary.h"

#include <algorithm>
#include <limits>

namespace fp8scope {

double ChannelSummary::amax_ratio() const {
  if (channels == 0 || largest == 0) return std::numeric_limits<double>::quiet_NaN();
  if (median == 0) return std::numeric_limits<double>::infinity();
  return largest / median;
}

ChannelSummary summarize_channels(std::span<const float> channel_amax, double factor) {
  ChannelSummary s;
  s.channels = channel_amax.size();
  if (channel_amax.empty()) return s;
  std::vector<float> sorted(channel_amax.begin(), channel_amax.end());
  const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), mid, sorted.end());
  s.median = *mid;
  s.largest = *std::max_element(mid, sorted.end());
  const double threshold = factor * s.median;
  for (std::size_t c = 0; c < channel_amax.size(); ++c) {
    if (channel_amax[c] > threshold) s.outliers.push_back(static_cast<std::uint32_t>(c));
  }
  s.persistent = s.outliers;
  return s;
}

}  // namespace fp8scope
