// TE's stochastic rounding to E2M1, every draw of it: the oracle the tests of NVFP4's stochastic
// rounding compare the engines' expectations with. Written from TE's software twin of
// cvt.rs.satfinite (TE d0067d0, common/util/ptx.cuh:532-547), sharing no code with the engines.
#pragma once

#include <cmath>

namespace fp8scope::testing {

// One draw of TE's rounder (util/ptx.cuh:532-547): u = byte / 256, the step at |y| and at
// |y| + u * step (fmaf), floored to the grid, clipped to 6 by fminf, the sign put back.
struct Draw {
  float q;
  bool clipped;  // the floor landed past 6
};

inline Draw te_stochastic_round(float y, unsigned byte) {
  const float u = static_cast<float>(byte & 0xFF) * (1.0f / 256.0f), a = std::fabs(y);
  const float step = a >= 4.0f ? 2.0f : (a >= 2.0f ? 1.0f : 0.5f);
  const float t = std::fma(u, step, a);
  const float step_t = t >= 4.0f ? 2.0f : (t >= 2.0f ? 1.0f : 0.5f);
  const float floored = std::floor(t * (1.0f / step_t)) * step_t;
  return {std::copysign(std::fmin(floored, 6.0f), y), floored > 6.0f};
}

// The mean over all 256 draws of y = fp32(x * scale), dequantized by scale_inv, in long double; the
// error and dot product against `exact`, the value x is a rounding of (x itself by default).
struct DrawMean {
  long double mean = 0, squared_error = 0, dot = 0;
  int clipped = 0, saturated = 0, zero = 0;  // draws of each kind, of 256
};

inline DrawMean te_draw_mean(float x, float scale, float scale_inv, long double exact) {
  DrawMean m;
  const float y = x * scale;
  for (unsigned byte = 0; byte < 256; ++byte) {
    const Draw d = te_stochastic_round(y, byte);
    const long double xq = static_cast<long double>(d.q * scale_inv);
    m.mean += xq / 256;
    m.squared_error += (exact - xq) * (exact - xq) / 256;
    m.dot += exact * xq / 256;
    m.clipped += d.clipped;
    m.saturated += std::fabs(d.q) == 6.0f;
    m.zero += d.q == 0.0f;
  }
  return m;
}

inline DrawMean te_draw_mean(float x, float scale, float scale_inv) { return te_draw_mean(x, scale, scale_inv, x); }

}  // namespace fp8scope::testing
