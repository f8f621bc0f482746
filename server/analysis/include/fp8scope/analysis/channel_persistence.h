// Which of a tensor's outlier channels persist: an outlier in each of the tensor's last `window`
// samples, not a burst of one batch. SwiGLU's outlier channels, once they appear late in training,
// stay (arXiv 2409.12517); a batch's odd token does not.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace fp8scope::server {

struct OutlierChannelOptions {
  double factor = 8.0;     // an outlier's amax over the median channel amax (kDefaultOutlierChannelFactor)
  std::size_t window = 8;  // samples an outlier must hold in to persist
};

class ChannelPersistence {
 public:
  explicit ChannelPersistence(std::size_t window) : window_(window) {}

  // Adds one sample's outliers (ascending) and returns those in each of the last `window` samples,
  // ascending; while fewer have been seen, in each of those seen.
  std::vector<std::uint32_t> add(const std::vector<std::uint32_t>& outliers);

 private:
  std::size_t window_;
  std::deque<std::vector<std::uint32_t>> recent_;
};

}  // namespace fp8scope::server
