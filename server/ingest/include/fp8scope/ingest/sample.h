// A tensor sample as the daemon handles it once all its chunks have arrived: who sent it, what it
// is, and its payload, with the memory budget it holds until analysis is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "fp8scope/ingest/ack_journal.h"
#include "fp8scope/ingest/byte_budget.h"
#include "fp8scope/ingest/payload_pool.h"
#include "fp8scope/vocabulary/cast_capture.h"
#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/recipe_kind.h"
#include "fp8scope/vocabulary/scale_layout.h"

namespace fp8scope::server {

using Payload = std::vector<std::uint8_t, PayloadAllocator<std::uint8_t>>;

// One connected training process, from its Hello.
struct ClientInfo {
  std::string job, run, host, peer;
  std::uint32_t rank = 0, world_size = 0, pid = 0;
};

// The Transformer Engine cast that wrote a sample's codes (protocol 4, wire CastPart): its part of
// the payload follows the codes and the scale tensor.
struct CastHeader {
  CastSource source = CastSource::kInput;
  RecipeKind recipe = RecipeKind::kTensorCurrent;  // the job's scaling mode; the flags refine it
  DType input_dtype = DType::kBF16, param_dtype = DType::kBF16;
  std::optional<Activation> activation;
  std::int64_t rows = 0, cols = 0;  // the input as a matrix
  bool columnwise = false, transposed = false;
  bool zero_centered_gamma = false, stochastic = false, power_of_2 = false, two_dimensional = false,
       row_scaled = false, four_over_six = false, unmodeled = false;
  float epsilon = 0, limit = 0, alpha = 0, linear_offset = 0;
  std::string entry_point;
  std::uint64_t bytes = 0;
  CastLayout layout;  // where its parts lie within its bytes

  // The tensor the cast quantized, as a matrix: a gated activation's output is half its input.
  std::int64_t output_cols() const {
    return source == CastSource::kActivation && activation && activation_gated(*activation) ? cols / 2 : cols;
  }
  bool recomputed() const { return cast_source_recomputed(source, columnwise); }
};

// A sample's header in the domain's words: ingest converts the wire's TensorHeader into this once
// (sample_validation.h), and nothing after ingest sees protobuf.
struct SampleHeader {
  std::uint64_t step = 0;
  std::string layer;
  GemmRole gemm = GemmRole::kUnknown;
  Operand operand = Operand::kX;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;  // logical shape in elements, last dimension contiguous
  std::int64_t rows = 0, cols = 0;  // the tensor as a matrix: cols is the last dimension
  ScaleLayout scale_layout = ScaleLayout::kNone;  // kTensorScalar: codes with one scale_inv
  bool k_is_outer = false;                        // block scales run along the first dimension
  float scale_inv = 0;         // kTensorScalar: the dequantization scale in use; 0 means 1
  float global_scale_inv = 0;  // NVFP4: the per-tensor factor the block scales multiply; 0 = not known
  float gemm_alpha = 0;        // the GEMM's alpha when the sender read it; 0 = not read
  std::string source_call;     // "cublasLtMatmul", "push", ...
  std::uint64_t codes_bytes = 0, scale_bytes = 0;  // the payload: codes (or values), the scale tensor, the cast
  // Mixture-of-experts GEMMs (protocol 3): the expert, the call's experts and their tokens, and the
  // rows holding tokens (0: all; the rest is padding, which must be zero).
  std::optional<std::uint32_t> expert;
  std::uint32_t experts = 0;
  std::vector<std::uint64_t> expert_tokens;
  std::int64_t valid_rows = 0;
  std::optional<CastHeader> cast;  // the cast that wrote the codes, when it was captured

  std::int64_t numel() const { return rows * cols; }
  // The payload: the codes (or values), the scale tensor, the cast's part.
  std::uint64_t payload_bytes() const { return codes_bytes + scale_bytes + (cast ? cast->bytes : 0); }
  // The rows the statistics read: those holding tokens.
  std::int64_t analyzed_rows() const { return valid_rows > 0 ? valid_rows : rows; }
};

// A value a job logs at a step (the loss, ...), or the mark that it entered a step (name
// "step_started", value the time): it reaches the history through the analysis pipeline, as
// samples do.
struct ScalarMark {
  std::shared_ptr<const ClientInfo> client;
  double time = 0;  // when the daemon received it, seconds since the Unix epoch
  std::uint64_t step = 0;
  std::string name;
  double value = 0;
};

struct Sample {
  std::shared_ptr<const ClientInfo> client;
  SampleHeader header;
  Payload payload;
  BudgetLease lease;
  std::optional<JournalTicket> journal;  // held from its ACCEPTED ack until its records are stored
  std::chrono::steady_clock::time_point completed;
};

// What waits for the analysis workers.
using IngestItem = std::variant<Sample, ScalarMark>;

}  // namespace fp8scope::server
