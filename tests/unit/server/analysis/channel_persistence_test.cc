// A channel persists while it is an outlier in each of the tensor's last `window` samples: it
// persists from its first sample, a sample without it breaks the run until it leaves the window.
#include "fp8scope/analysis/channel_persistence.h"

#include <catch2/catch.hpp>

using fp8scope::server::ChannelPersistence;
using Channels = std::vector<std::uint32_t>;

TEST_CASE("outliers in every one of the last three samples persist", "[channel_persistence]") {
  ChannelPersistence p(3);
  CHECK(p.add({1, 5}) == Channels{1, 5});  // fewer samples than the window: each of those seen
  CHECK(p.add({1, 2, 5}) == Channels{1, 5});
  CHECK(p.add({5}) == Channels{5});
  CHECK(p.add({1, 5}) == Channels{5});
  CHECK(p.add({1}) == Channels{});          // {5} {1, 5} {1}
  CHECK(p.add({1}) == Channels{1});         // {1, 5} {1} {1}: 5 gone, 1 held for three
  CHECK(p.add({9}) == Channels{});
}

TEST_CASE("a window of one sample is that sample's outliers", "[channel_persistence]") {
  ChannelPersistence p(1);
  CHECK(p.add({3}) == Channels{3});
  CHECK(p.add({4, 7}) == Channels{4, 7});
  CHECK(p.add({}) == Channels{});
}
