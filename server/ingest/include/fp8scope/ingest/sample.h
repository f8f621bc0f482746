// A tensor sample as the daemon handles it once all its chunks have arrived: who sent it, what it
// is, and its payload, with the memory budget it holds until analysis is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fp8scope/ingest/ack_journal.h"
#include "fp8scope/ingest/byte_budget.h"
#include "fp8scope/ingest/payload_pool.h"
#include "fp8scope/kernels/dtype.h"
#include "fp8scope/vocabulary/wire_enums.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::server {

using Payload = std::vector<std::uint8_t, PayloadAllocator<std::uint8_t>>;

// One connected training process, from its Hello.
struct ClientInfo {
  std::string job, run, host, peer;
  std::uint32_t rank = 0, world_size = 0, pid = 0;
};

struct Sample {
  std::shared_ptr<const ClientInfo> client;
  v1::TensorHeader header;
  DType dtype = DType::kF32;
  std::int64_t rows = 0, cols = 0;  // the last dimension is cols
  ScaleLayout scale_layout = ScaleLayout::kNone;  // kTensorScalar: codes with header.scale_inv
  bool k_is_outer = false;
  std::uint64_t codes_bytes = 0;  // the payload: codes (or values), then the scale tensor
  Payload payload;
  BudgetLease lease;
  std::optional<JournalTicket> journal;  // held from its ACCEPTED ack until its records are stored
  std::chrono::steady_clock::time_point completed;
};

}  // namespace fp8scope::server
