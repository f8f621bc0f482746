// The bounded forms a run's series take while its records stream in, so that a study's memory grows
// with its tensors and not with its steps: a strided sample of a series, and the few points next to
// a step that are kept whole. Points have `step` and `rank`; of several ranks' points at one step
// the lowest rank's is kept, as the study has always read them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

namespace fp8scope::insight {

// How many times each gap between a series' consecutive sampled steps was seen: the run's sampling
// interval is their median.
using GapCounts = std::map<std::uint64_t, std::uint64_t>;

// Puts p into points (sorted by step, one point a step), or lets it replace a higher rank's point
// at its step. Returns where it is, or points.end() when a lower rank's point was there already.
template <class Point>
typename std::vector<Point>::iterator insert_lowest_rank(std::vector<Point>& points, const Point& p) {
  auto at = std::lower_bound(points.begin(), points.end(), p.step,
                             [](const Point& q, std::uint64_t step) { return q.step < step; });
  if (at != points.end() && at->step == p.step) {
    if (p.rank >= at->rank) return points.end();
    *at = p;
    return at;
  }
  return points.insert(at, p);
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
    if (points_.size() == count_ && (below_ ? p.step < points_.front().step : p.step > points_.back().step)) return;
    insert_lowest_rank(points_, p);
    if (points_.size() <= count_) return;
    if (below_) points_.erase(points_.begin());
    else points_.pop_back();
  }

  const std::vector<Point>& points() const { return points_; }

 private:
  std::uint64_t begin_;
  std::size_t count_;
  bool below_;
  std::vector<Point> points_;
};

}  // namespace fp8scope::insight
