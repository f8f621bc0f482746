// A sample's cast (SampleHeader::cast) made ready for the engine: the high-precision tensor the job
// quantized, in fp32 and in the codes' K-major order (cast_check.h), recomputed from a fused
// kernel's inputs where it never existed; and the job's cast as a QuantSpec, from its scaling mode,
// its options and the scale and amax it used.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fp8scope/ingest/sample.h"
#include "fp8scope/kernels/stats_engine.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/vocabulary/cast_capture.h"
#include "fp8scope/vocabulary/recipe_kind.h"

namespace fp8scope::server {

// The cast part of a sample's payload (after its codes and scale tensor).
std::span<const std::uint8_t> cast_part(const Sample& s);
CastScalars cast_scalars(std::span<const std::uint8_t> part);

struct CastTensor {
  std::vector<float> values;  // rows x cols, K-major like observed_elements() of the codes
  std::int64_t rows = 0, cols = 0;
  ChannelAxis channels = ChannelAxis::kNone;  // the operand's channels in this orientation
  TensorView view() const { return {values.data(), DType::kF32, rows, cols, 1.0f, channels}; }
};

// The tensor the cast quantized: its input converted to fp32, or recomputed (a norm, an activation,
// its gradient, the Hadamard transform of a column-wise copy), oriented as the codes are read.
Result<CastTensor> cast_tensor(const SampleHeader& h, std::span<const std::uint8_t> part);

struct JobCast {
  RecipeKind recipe;  // what fp8scope calls the job's recipe for this tensor (a metric label)
  QuantSpec spec;     // the model of the job's cast
  bool modeled;       // false: an option the model lacks; statistics but no code check
};

// The job's cast of h's codes, with the scale (per-tensor recipes) and amax (NVFP4) it used.
JobCast job_cast(const SampleHeader& h, const CastScalars& scalars);

}  // namespace fp8scope::server
