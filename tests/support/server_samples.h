// Samples as ingest hands them to the analysis, built in-process for the stage tests: an f32 or
// FP8 tensor with its header in the domain's words.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fp8scope/ingest/sample.h"

namespace fp8scope::testing {

inline std::shared_ptr<server::ClientInfo> client(const std::string& job = "job", const std::string& run = "run") {
  auto c = std::make_shared<server::ClientInfo>();
  c->job = job;
  c->run = run;
  c->host = "node-a";
  c->rank = 3;
  return c;
}

// A rows x cols f32 tensor with the given values (cycled).
inline server::Sample f32_sample(const std::string& layer, std::uint64_t step, Operand operand,
                                 const std::vector<float>& values, std::int64_t rows = 4, std::int64_t cols = 32,
                                 GemmRole gemm = GemmRole::kFprop) {
  server::Sample s;
  s.client = client();
  s.header.layer = layer;
  s.header.step = step;
  s.header.gemm = gemm;
  s.header.operand = operand;
  s.header.dtype = DType::kF32;
  s.header.shape = {rows, cols};
  s.header.rows = rows;
  s.header.cols = cols;
  s.header.codes_bytes = static_cast<std::uint64_t>(rows * cols) * sizeof(float);
  s.payload.resize(s.header.codes_bytes);
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    const float v = values[static_cast<std::size_t>(i) % values.size()];
    std::memcpy(s.payload.data() + i * sizeof(float), &v, sizeof v);
  }
  return s;
}

// E4M3 codes with one per-tensor scale_inv, as an FP8 GEMM read them.
inline server::Sample e4m3_sample(const std::string& layer, std::uint64_t step, const std::vector<std::uint8_t>& codes,
                                  float scale_inv) {
  server::Sample s;
  s.client = client();
  s.header.layer = layer;
  s.header.step = step;
  s.header.gemm = GemmRole::kFprop;
  s.header.operand = Operand::kW;
  s.header.dtype = DType::kE4M3;
  s.header.shape = {1, static_cast<std::int64_t>(codes.size())};
  s.header.rows = 1;
  s.header.cols = static_cast<std::int64_t>(codes.size());
  s.header.scale_layout = ScaleLayout::kTensorScalar;
  s.header.scale_inv = scale_inv;
  s.header.codes_bytes = codes.size();
  s.payload.assign(codes.begin(), codes.end());
  return s;
}

}  // namespace fp8scope::testing
