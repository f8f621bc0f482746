// Merging partial results equals one pass. The chunks have very different means, which is where a
// wrong sign in the moments' merge shows (TE's merge has one; its same-distribution test data hides it).
#include "fp8scope/kernels/stats.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

using namespace fp8scope;

namespace {

TensorMoments one_pass(const std::vector<double>& x) {
  TensorMoments m;
  for (double v : x) {
    ++m.numel;
    ++m.finite;
    m.nonzero += v != 0.0;
    m.sum += v;
    m.sum_squares += v * v;
    m.amax = std::max(m.amax, static_cast<float>(std::fabs(v)));
    if (v != 0.0) m.amin = std::min(m.amin, static_cast<float>(std::fabs(v)));
  }
  const double mean = m.sum / static_cast<double>(m.finite);
  for (double v : x) {
    const double d = v - mean;
    m.m2 += d * d;
    m.m3 += d * d * d;
    m.m4 += d * d * d * d;
  }
  return m;
}

}  // namespace

TEST_CASE("Chan's merge of chunks with different means equals a single two-pass variance", "[stats]") {
  std::mt19937 rng(3);
  std::vector<double> all;
  TensorMoments merged;
  const double means[] = {-1000.0, 0.001, 55.0, 1e6, -3.0};
  const int sizes[] = {1, 17, 1000, 250, 3};
  for (int c = 0; c < 5; ++c) {
    std::normal_distribution<float> d(static_cast<float>(means[c]), 1.0f + c);
    std::vector<double> chunk;
    for (int i = 0; i < sizes[c]; ++i) chunk.push_back(d(rng));
    all.insert(all.end(), chunk.begin(), chunk.end());
    merge(merged, one_pass(chunk));
  }
  const TensorMoments single = one_pass(all);
  CHECK(merged.numel == single.numel);
  CHECK(merged.amax == single.amax);
  CHECK(merged.amin == single.amin);
  CHECK(merged.sum == Approx(single.sum).epsilon(1e-12));
  CHECK(merged.m2 == Approx(single.m2).epsilon(1e-10));
}

TEST_CASE("Pebay's merge of chunks with different means and scales equals a single two-pass m3 and m4", "[stats]") {
  // Chunks of skewed (exponential) data, each shifted and scaled its own way, merged in two orders:
  // left to right, and as a tree, the way threads and GPU blocks combine.
  std::mt19937 rng(11);
  const double means[] = {-40.0, 0.001, 5.0, 300.0, -3.0, 0.0};
  const double scales[] = {1.0, 1e-3, 20.0, 0.5, 7.0, 1e3};
  const int sizes[] = {2, 17, 1000, 250, 3, 64};
  std::vector<double> all;
  std::vector<TensorMoments> parts;
  for (int c = 0; c < 6; ++c) {
    std::exponential_distribution<double> d(1.0);
    std::vector<double> chunk;
    for (int i = 0; i < sizes[c]; ++i) chunk.push_back(means[c] + scales[c] * d(rng));
    all.insert(all.end(), chunk.begin(), chunk.end());
    parts.push_back(one_pass(chunk));
  }
  TensorMoments left;
  for (const TensorMoments& p : parts) merge(left, p);
  TensorMoments pairs[3];
  for (int k = 0; k < 3; ++k) {
    pairs[k] = parts[2 * k];
    merge(pairs[k], parts[2 * k + 1]);
  }
  merge(pairs[0], pairs[1]);
  merge(pairs[0], pairs[2]);
  const TensorMoments single = one_pass(all);
  for (const TensorMoments* merged : {&left, &pairs[0]}) {
    CHECK(merged->finite == single.finite);
    CHECK(merged->m2 == Approx(single.m2).epsilon(1e-10));
    CHECK(merged->m3 == Approx(single.m3).epsilon(1e-10));
    CHECK(merged->m4 == Approx(single.m4).epsilon(1e-10));
  }
}

TEST_CASE("merging with an empty part changes nothing", "[stats]") {
  const TensorMoments a = one_pass({1.0, 2.0, 4.0});
  TensorMoments into;
  merge(into, a);
  merge(into, TensorMoments{});
  CHECK(into.m2 == a.m2);
  CHECK(into.m3 == a.m3);
  CHECK(into.m4 == a.m4);
  CHECK(into.finite == 3);
}

TEST_CASE("quantization statistics add, scales take min and max", "[stats]") {
  QuantStats a, b;
  a.underflow = 2;
  a.histogram[5] = 7;
  a.scale_min = a.scale_max = 4.0f;
  b.overflow = 3;
  b.histogram[5] = 1;
  b.squared_error = 0.5;
  b.scale_min = b.scale_max = 0.25f;
  merge(a, b);
  CHECK(a.underflow == 2);
  CHECK(a.overflow == 3);
  CHECK(a.histogram[5] == 8);
  CHECK(a.squared_error == 0.5);
  CHECK(a.scale_min == 0.25f);
  CHECK(a.scale_max == 4.0f);
}
