#include "fp8scope/analysis/channel_persistence.h"

#include <algorithm>
#include <iterator>

namespace fp8scope::server {

std::vector<std::uint32_t> ChannelPersistence::add(const std::vector<std::uint32_t>& outliers) {
  recent_.push_back(outliers);
  while (recent_.size() > window_) recent_.pop_front();
  std::vector<std::uint32_t> persistent = recent_.front();
  for (std::size_t k = 1; k < recent_.size() && !persistent.empty(); ++k) {
    std::vector<std::uint32_t> both;
    std::set_intersection(persistent.begin(), persistent.end(), recent_[k].begin(), recent_[k].end(),
                          std::back_inserter(both));
    persistent.swap(both);
  }
  return persistent;
}

}  // namespace fp8scope::server
