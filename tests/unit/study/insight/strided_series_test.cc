// The strided sample keeps exactly the full series' points on the grid of the smallest power-of-two
// stride that fits the cap, whatever order the points and their ranks arrive in; the nearest-steps
// windows keep exactly the points next to their step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>

#include "fp8scope/insight/strided_series.h"

using fp8scope::insight::GapCounts;
using fp8scope::insight::NearestSteps;
using fp8scope::insight::StridedSeries;

namespace {

struct Point {
  std::uint64_t step = 0;
  std::uint32_t rank = 0;
  bool operator==(const Point&) const = default;
};

// The sampled steps of a job sampled every `interval` steps from `first`, some skipped, each
// from `ranks` ranks.
std::vector<Point> sampled(std::uint64_t first, std::uint64_t interval, std::size_t count, std::uint32_t ranks,
                           std::mt19937& rng) {
  std::vector<Point> out;
  for (std::size_t i = 0; i < count; ++i) {
    if (rng() % 10 == 0) continue;
    for (std::uint32_t r = 0; r < ranks; ++r) out.push_back({first + i * interval, r});
  }
  return out;
}

// The reference: the lowest rank a step, and of those the steps a multiple of the smallest
// power-of-two stride away from the first step that leaves no more than cap.
std::pair<std::vector<Point>, std::uint64_t> reference(const std::vector<Point>& points, std::size_t cap) {
  std::vector<Point> full;
  std::set<std::uint64_t> seen;
  std::vector<Point> by_rank = points;
  std::stable_sort(by_rank.begin(), by_rank.end(), [](const Point& a, const Point& b) { return a.rank < b.rank; });
  for (const Point& p : by_rank) {
    if (seen.insert(p.step).second) full.push_back(p);
  }
  std::sort(full.begin(), full.end(), [](const Point& a, const Point& b) { return a.step < b.step; });
  const std::uint64_t origin = points.front().step;
  for (std::uint64_t stride = 1;; stride *= 2) {
    std::vector<Point> kept;
    for (const Point& p : full) {
      if ((p.step > origin ? p.step - origin : origin - p.step) % stride == 0) kept.push_back(p);
    }
    if (cap == 0 || kept.size() <= cap) return {kept, stride};
  }
}

}  // namespace

TEST_CASE("a strided series keeps the full series' points on the grid of the smallest stride that fits") {
  std::mt19937 rng(7);
  for (std::uint64_t interval : {1, 3, 10, 64}) {
    for (std::size_t count : {1, 2, 50, 64, 65, 500, 4000}) {
      for (std::size_t cap : {0, 2, 16, 64}) {
        for (std::uint32_t ranks : {1, 3}) {
          std::vector<Point> points = sampled(11, interval, count, ranks, rng);
          if (points.empty()) continue;
          // The first point names the grid's origin; the others arrive in any order.
          std::shuffle(points.begin() + 1, points.end(), rng);
          const auto [expected, stride] = reference(points, cap);
          GapCounts gaps;
          StridedSeries<Point> series(cap, &gaps);
          for (const Point& p : points) series.add(p);
          INFO("interval " << interval << " count " << count << " cap " << cap << " ranks " << ranks);
          CHECK(series.stride() == stride);
          const std::vector<Point> kept = series.take();
          CHECK(kept == expected);
          if (cap > 0) CHECK(kept.size() <= cap);
          std::uint64_t gap_total = 0;
          for (const auto& [gap, n] : gaps) gap_total += n;
          // All gaps when it kept everything; those of its first cap + 1 distinct steps otherwise.
          CHECK(gap_total == (stride == 1 ? kept.size() - 1 : cap));
        }
      }
    }
  }
}

TEST_CASE("every series with the same steps keeps the same ones") {
  std::mt19937 rng(3);
  const std::vector<Point> points = sampled(0, 5, 3000, 1, rng);
  StridedSeries<Point> a(100, nullptr), b(100, nullptr);
  for (const Point& p : points) a.add(p);
  for (const Point& p : points) b.add({p.step, 2});
  const std::vector<Point> ka = a.take(), kb = b.take();
  REQUIRE(ka.size() == kb.size());
  for (std::size_t i = 0; i < ka.size(); ++i) CHECK(ka[i].step == kb[i].step);
  // Evenly spaced: every gap is a whole number of strides of the sampling interval, and thinning
  // stopped at the first stride that fits, so more than a quarter of the cap is left.
  for (std::size_t i = 1; i < ka.size(); ++i) CHECK((ka[i].step - ka[i - 1].step) % (5 * a.stride()) == 0);
  CHECK(ka.size() > 25);
}

TEST_CASE("nearest steps keep the points just before and from a step, the lowest rank of each") {
  std::mt19937 rng(5);
  std::vector<Point> points = sampled(0, 4, 400, 3, rng);
  std::shuffle(points.begin(), points.end(), rng);
  for (std::uint64_t begin : {0, 1, 200, 798, 5000}) {
    for (std::size_t count : {0, 1, 20}) {
      NearestSteps<Point> below(begin, count, true), above(begin, count, false);
      for (const Point& p : points) {
        below.add(p);
        above.add(p);
      }
      std::set<std::uint64_t> steps;
      for (const Point& p : points) steps.insert(p.step);
      std::vector<Point> want_below, want_above;
      for (std::uint64_t s : steps) (s < begin ? want_below : want_above).push_back({s, 0});
      if (want_below.size() > count) want_below.erase(want_below.begin(), want_below.end() - static_cast<std::ptrdiff_t>(count));
      if (want_above.size() > count) want_above.resize(count);
      INFO("begin " << begin << " count " << count);
      CHECK(std::vector<Point>(below.points().begin(), below.points().end()) == want_below);
      CHECK(std::vector<Point>(above.points().begin(), above.points().end()) == want_above);
    }
  }
}
