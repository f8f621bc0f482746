// A sample's record in the shared ring: its reservation and its header, written on the training
// thread from what the GEMM capture knows (names, roles, shapes, scale layout, expert identity).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8scope/hook/gemm_operands.h"
#include "fp8scope/shm/shm_ring.h"

namespace fp8scope::hook {

struct SampleSpec {
  std::uint64_t step;
  const std::string& layer;
  GemmRole role;
  Operand operand;
  const char* source;
  // Mixture-of-experts GEMMs: the expert (-1: none), the call's experts, the tokens routed to each
  // (null: not known on the host), the rows of the sample holding tokens (0: all), and which of the
  // activation's dimensions counts the tokens when only the device knows it (tokens_in_b_cols).
  std::int64_t expert = -1;
  std::uint32_t experts = 0;
  const std::vector<std::uint64_t>* tokens = nullptr;
  std::uint64_t valid_rows = 0;
  bool tokens_in_b_cols = true;
};

// The rows of an expert's activation that hold tokens, from the tokens declared per expert, when
// fewer than its `rows` (padding follows them); 0 (all rows) otherwise, and for weights.
std::uint64_t valid_rows(const std::vector<std::uint64_t>& tokens, Operand operand, std::int64_t expert,
                         std::uint64_t rows);

// A zeroed record of `payload_bytes` after its header, its magic and sizes set, and where its
// publication ends (`end`); null when the ring has no room.
shm::RecordHeader* reserve_record(shm::RingWriter& writer, std::uint64_t payload_bytes, std::uint64_t& end);

// A sample record's header for operand v of the GEMM spec names (payload: codes then scales).
void fill_sample_header(shm::RecordHeader& r, const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                        std::uint64_t payload);

}  // namespace fp8scope::hook
