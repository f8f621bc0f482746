// `fp8scope push FILE`: sends tensors from a .npy or .safetensors file through the same Stream RPC
// a training process uses (tests, demos, replaying dumps).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "fp8scope/cli/connection_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct PushOptions {
  ConnectionFlags connection;
  std::string file;
  std::vector<std::string> tensors;
  std::string layer, gemm = "fprop", operand, dtype;
  std::uint64_t step = 0;
  std::uint32_t rank = 0, world_size = 1;
  std::string run = "push", job = "push";
  float scale_inv = 1.0f;
  // A job's own codes with block scales, as cuBLASLt read them.
  std::string scale_layout, scales;
  bool k_outer = false;
  float global_scale_inv = 0.0f;
  // A mixture-of-experts layer's expert (-1: a dense layer's), the tokens routed to each expert of
  // its call, and the rows of the tensor that hold tokens (0: all; the rest is padding).
  std::int64_t expert = -1;
  std::vector<std::uint64_t> expert_tokens;
  std::uint64_t valid_rows = 0;
  // The cast that wrote the codes (protocol 4): its high-precision input (a .npy or .safetensors
  // file's first tensor, f32, bf16 or f16), its recipe and the scale or amax it used.
  std::string cast_input, cast_recipe;
  float cast_scale = 0.0f, cast_amax = 0.0f;
  bool cast_columnwise = false, cast_transposed = false, cast_2d = false;
};

void add_push_command(CLI::App& app, PushOptions& options);

// 0: every sample accepted; 1: daemon unreachable; 2: bad input; 3: a sample was dropped or rejected.
int run_push(const PushOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8scope::cli
