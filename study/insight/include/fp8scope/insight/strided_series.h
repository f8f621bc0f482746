// The bounded forms a run's series take while its records stream in, so that a study's memory grows
// with its tensors and not with its steps: a strided sample of a series, and the few points next to
// a step that are kept whole. Points have `step` and `rank`; of several ranks' points at one step
// the lowest rank's is kept, as the study has always read them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace fp8scope::insight {

// How many times each gap between a series' consecutive sampled steps was seen: the run's sampling
// interval is their median.
using GapCounts = std::map<std::uint64_t, std::uint64_t>;

// Puts p into points (sorted by step, one point a step), or lets it replace a
// higher rank's point at its step; a lower rank's point there already stays.
template <class Points, class Point>
void insert_lowest_rank(Points& points, const Point& p) {
  auto at = std::lower_bound(points.begin(), points.end(), p.step,
                             [](const Point& q, std::uint64_t step) { return q.step < step; });
  if (at == points.end() || at->step != p.step) {
    points.insert(at, p);
  } else if (p.rank < at->rank) {
    *at = p;
  }
}

template <class Point>
void add_gaps(const std::vector<Point>& points, GapCounts* gaps) {
  if (gaps == nullptr) return;
  for (std::size_t i = 1; i < points.size(); ++i) ++(*gaps)[points[i].step - points[i - 1].step];
}

// At most `cap` points of a series, spread evenly over its steps: every point until it holds more
// than cap, then only the steps an even distance from its first step, then a multiple of 4 away,
// and so on (the stride in steps doubles each time it fills). Every series with the same steps
// keeps the same ones, so experts and recipes of one tensor still line up step by step. The same
// idea as TensorBoard's bounded scalar reservoir, but deterministic and evenly spaced. cap 0 keeps
// every point.
template <class Point>
class StridedSeries {
 public:
  // gaps (may be null) receives the gaps of the series at full resolution: all of them when it is
  // never thinned, else those of its first cap points.
  StridedSeries(std::size_t cap, GapCounts* gaps) : cap_(cap), gaps_(gaps) {}

  void add(const Point& p) {
    if (points_.empty() && stride_ == 1) origin_ = p.step;
    const std::uint64_t distance = p.step > origin_ ? p.step - origin_ : origin_ - p.step;
    if (distance % stride_ != 0) return;
    // Never more room than cap + 1: doubling past it would keep twice the bound in spare capacity.
    if (cap_ != 0 && points_.size() == points_.capacity() && points_.size() >= cap_ / 2) points_.reserve(cap_ + 1);
    insert_lowest_rank(points_, p);
    if (cap_ == 0 || points_.size() <= cap_) return;
    if (stride_ == 1) add_gaps(points_, gaps_);
    // Ends at the latest with the origin alone, once the stride passes every distance.
    while (points_.size() > cap_ && stride_ < (std::uint64_t{1} << 62)) {
      stride_ *= 2;
      std::erase_if(points_, [&](const Point& q) {
        return (q.step > origin_ ? q.step - origin_ : origin_ - q.step) % stride_ != 0;
      });
    }
  }

  // 1 while every point is kept; else the distance in steps between kept points' steps.
  std::uint64_t stride() const { return stride_; }

  // The points kept, in step order; the series is left empty.
  std::vector<Point> take() {
    if (stride_ == 1) add_gaps(points_, gaps_);
    return std::move(points_);
  }

 private:
  std::size_t cap_;
  GapCounts* gaps_;
  std::uint64_t origin_ = 0, stride_ = 1;
  std::vector<Point> points_;
};

// The `count` sampled steps nearest to `begin` on one side, kept whole whatever the stride: those
// before it (below = true) or at and after it.
template <class Point>
class NearestSteps {
 public:
  NearestSteps(std::uint64_t begin, std::size_t count, bool below) : begin_(begin), count_(count), below_(below) {}

  void add(const Point& p) {
    if (count_ == 0 || below_ != (p.step < begin_)) return;
    const std::span<const Point> kept = points();
    if (kept.size() == count_ && (below_ ? p.step < kept.front().step : p.step > kept.back().step)) return;
    insert_lowest_rank(points_, p);
    if (!below_) {
      if (points_.size() > count_) points_.pop_back();
    } else if (points_.size() >= 2 * count_) {
      // The window before a later step takes each new point at its back as the rows stream in:
      // its front is dropped count points at a time, not one (a shift of the whole window) a row.
      points_.erase(points_.begin(), points_.end() - static_cast<std::ptrdiff_t>(count_));
    }
  }

  // In step order.
  std::span<const Point> points() const {
    const std::size_t n = std::min(points_.size(), count_);
    return std::span<const Point>(points_).subspan(points_.size() - n);
  }

 private:
  std::uint64_t begin_;
  std::size_t count_;
  bool below_;
  std::vector<Point> points_;  // below: up to 2 x count, of which the last count are the window
};

}  // namespace fp8scope::insight
