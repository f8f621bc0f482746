#include "code_histogram.h"

#include <algorithm>

#include "fp8scope/kernels/quantize_element.h"
#include "fp8scope/kernels/scale_rules.h"

namespace fp8scope::cpu {

bool countable(DType dtype) { return dtype_bytes(dtype) == 1 || dtype_bytes(dtype) == 2; }

CodeHistogram::CodeHistogram(DType dtype) : dtype_(dtype) {
  const std::size_t bins = bins_of(dtype);
  counts_.assign(bins, 0);
  pending_[0].assign(bins, 0);
  pending_[1].assign(bins, 0);
}

void CodeHistogram::add(const void* data, std::int64_t first, int n) {
  // Two tables, even and odd elements, so runs of one value do not serialize on one counter.
  std::uint32_t* even = pending_[0].data();
  std::uint32_t* odd = pending_[1].data();
  auto count = [&](const auto* p) {
    int i = 0;
    for (; i + 2 <= n; i += 2) {
      ++even[p[i]];
      ++odd[p[i + 1]];
    }
    if (i < n) ++even[p[i]];
  };
  if (dtype_bytes(dtype_) == 2) {
    count(static_cast<const std::uint16_t*>(data) + first);
  } else {
    count(static_cast<const std::uint8_t*>(data) + first);
  }
}

void CodeHistogram::absorb(CodeHistogram& other) {
  for (std::size_t c = 0; c < counts_.size(); ++c) {
    counts_[c] += other.counts_[c] + other.pending_[0][c] + other.pending_[1][c];
    other.counts_[c] = 0;
    other.pending_[0][c] = other.pending_[1][c] = 0;
  }
}

void CodeHistogram::settle() {
  present_.clear();
  for (std::size_t c = 0; c < counts_.size(); ++c) {
    counts_[c] += pending_[0][c] + pending_[1][c];
    pending_[0][c] = pending_[1][c] = 0;
    if (counts_[c] != 0) present_.push_back(static_cast<std::uint32_t>(c));
  }
  settled_ = true;
}

void CodeHistogram::clear() {
  if (settled_) {
    for (const std::uint32_t c : present_) counts_[c] = 0;
  } else {
    for (auto* v : {&pending_[0], &pending_[1]}) std::fill(v->begin(), v->end(), 0u);
    std::fill(counts_.begin(), counts_.end(), 0u);
  }
  present_.clear();
  settled_ = false;
}

template <class F>
void CodeHistogram::for_each_code(float input_scale_inv, F f) const {
  for (const std::uint32_t c : present_) f(small_element_value(dtype_, c, input_scale_inv), counts_[c]);
}

std::vector<CodeHistogram> HistogramPool::take(DType dtype, std::size_t n) {
  std::vector<CodeHistogram> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = kept_.begin(); it != kept_.end() && taken.size() < n;) {
      if (!it->fits(dtype)) {
        ++it;
        continue;
      }
      taken.push_back(std::move(*it));
      it = kept_.erase(it);
    }
  }
  for (CodeHistogram& h : taken) h.set_dtype(dtype);
  while (taken.size() < n) taken.emplace_back(dtype);
  return taken;
}

void HistogramPool::give_back(std::vector<CodeHistogram> histograms) {
  std::lock_guard<std::mutex> lock(mu_);
  for (CodeHistogram& h : histograms) {
    if (kept_.size() < kKept) kept_.push_back(std::move(h));
  }
}

TensorMoments CodeHistogram::moments(float input_scale_inv) const {
  TensorMoments m;
  for_each_code(input_scale_inv, [&](float x, std::uint64_t n) {
    m.numel += n;
    if (x != x) {
      m.nan += n;
      return;
    }
    const float a = x < 0.0f ? -x : x;
    if (a == __builtin_inff()) {
      m.inf += n;
      return;
    }
    m.finite += n;
    m.min = x < m.min ? x : m.min;
    m.max = x > m.max ? x : m.max;
    if (a == 0.0f) return;
    m.nonzero += n;
    m.amax = a > m.amax ? a : m.amax;
    m.amin = a < m.amin ? a : m.amin;
    m.sum += static_cast<double>(n) * x;
    m.sum_abs += static_cast<double>(n) * a;
    m.sum_squares += static_cast<double>(n) * (static_cast<double>(x) * x);
  });
  if (m.finite > 0) {
    const double mean = m.sum / static_cast<double>(m.finite);
    for_each_code(input_scale_inv, [&](float x, std::uint64_t n) {
      if (is_finite(x)) add_deviation(m, x - mean, static_cast<double>(n));
    });
  }
  return m;
}

QuantStats CodeHistogram::quantize(CastFormat format, float scale, float scale_inv, float input_scale_inv) const {
  QuantStats q;
  auto evaluate = [&](auto format_tag) {
    constexpr const FloatFormat& F = decltype(format_tag)::value;
    for_each_code(input_scale_inv, [&](float x, std::uint64_t n) {
      if (!is_finite(x)) return;
      const QuantizedElement<float> e = quantize_element<F>(x, scale, scale_inv);
      q.underflow += e.underflow ? n : 0;
      q.overflow += e.overflow ? n : 0;
      q.saturated += e.saturated ? n : 0;
      const double w = static_cast<double>(n), xd = x, qd = e.dequantized;
      q.squared_error += w * ((xd - qd) * (xd - qd));
      q.dot += w * (xd * qd);
      q.dequant_squares += w * (qd * qd);
      if (x != 0.0f) q.histogram[log2_bin(e.abs_scaled)] += n;
    });
  };
  switch (format) {
    case CastFormat::kE4M3: evaluate(std::integral_constant<const FloatFormat&, kE4M3>{}); break;
    case CastFormat::kE5M2: evaluate(std::integral_constant<const FloatFormat&, kE5M2>{}); break;
    case CastFormat::kE2M1: evaluate(std::integral_constant<const FloatFormat&, kE2M1>{}); break;
  }
  q.scale_min = q.scale_max = scale;
  return q;
}

}  // namespace fp8scope::cpu
