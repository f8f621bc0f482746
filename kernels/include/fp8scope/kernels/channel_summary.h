// Outlier channels of one tensor, from the amax of each of its channels (TensorAnalysis::
// channel_amax): how far the largest stands above the median, and which channels stand far above
// it. SwiGLU outlier channels appear only late in training (arXiv 2409.12517) and NVFP4 suffers
// from "hot channels" (arXiv 2602.02047); a per-tensor scale fitted to such a channel flushes the
// others. Channel indices are history, never metric labels (one series per channel would not scale).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fp8scope {

// A channel is an outlier when its amax exceeds this many times the median channel amax.
inline constexpr double kDefaultOutlierChannelFactor = 8.0;

struct ChannelSummary {
  std::uint64_t channels = 0;  // 0: not computed (a gradient, the job's own codes)
  double largest = 0, median = 0;  // of the channel amaxes; the median is the upper one for an even count
  std::vector<std::uint32_t> outliers;  // channels above factor x median, ascending
  // Outliers in every one of the last samples of this tensor (ChannelPersistence), ascending; of
  // a lone tensor, its outliers.
  std::vector<std::uint32_t> persistent;

  // largest / median: +Inf when the median is 0 and some channel is not, NaN when none was computed
  // or every channel is 0.
  double amax_ratio() const;
};

ChannelSummary summarize_channels(std::span<const float> channel_amax, double factor = kDefaultOutlierChannelFactor);

}  // namespace fp8scope
