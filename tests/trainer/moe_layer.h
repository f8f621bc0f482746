// tiny_trainer's mixture-of-experts layer (--mode moe): a router (a linear map to E logits, on the
// host) sends each token to its top-k experts, weighted by the softmax of their logits; each
// expert is a linear map whose GEMMs (fprop, dgrad, wgrad) run for all experts at once in one of
// the forms MoE frameworks use (device_gemms.h, ExpertForm), in BF16 or in MXFP8 (--moe-recipe:
// every GEMM TN on operands quantized along its K, as the dense MXFP8 mode runs them, with
// transposed copies for dgrad and wgrad; cuBLASLt forms only). Each expert's tokens are padded to
// a multiple of `pad` rows with zeros, as block-scaled grouped GEMMs want them; an expert may get
// no token at all. At `nan_padding_step` the first padded expert's padding rows of X are NaN
// instead (the bug fp8scope must flag). The layer tells the hook how many of each expert's rows are tokens
// (fp8scope_expert_tokens) when the hook is loaded.
//
// Graphed (tiny_trainer --cuda-graph): the layer is a program of host work and grouped GEMMs
// (forward_program, backward_program) over buffers that outlive the graph: each expert owns a
// fixed region of every buffer, as many rows as there are tokens, and each step's routing writes
// only the group sizes of cuBLASLt's grouped layouts, which the GEMMs read on the device. Its rows
// are its tokens (no padding): the hook learns them from those sizes, since a replay calls nothing
// on the host that could declare them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "block_scaling.h"
#include "device_gemms.h"
#include "host_tensors.h"

namespace fp8scope::trainer {

struct MoeOptions {
  int experts = 4, top_k = 2, pad = 32;
  ExpertForm form = ExpertForm::kLtGrouped;
  bool mxfp8 = false;
  int nan_padding_step = -1;
  bool graphed = false;  // a program over persistent buffers (lt-grouped only, no padding)
  int tokens = 0;        // graphed: the tokens of every batch
};

// Host work of a step: run now, or recorded as a host node of the graph being captured.
using HostWork = std::function<void(std::function<void()>)>;

// What dumps the operands, named "<range>.<gemm>.<operand>.e<expert>": BF16 bits, or MXFP8 codes
// with their scale tensor; rows and cols of the operand as the GEMM reads it (activations: their
// token rows only, where tokens are rows).
struct OperandDump {
  std::function<void(const std::string& name, int rows, int cols, const std::vector<std::uint16_t>&)> bf16;
  std::function<void(const std::string& name, int rows, int cols, const BlockQuantized&)> mxfp8;
};

class MoeLayer {
 public:
  MoeLayer(const std::string& name, int width, const MoeOptions& options, std::mt19937_64& rng);

  // The layer's output before its activation, [tokens, width].
  Matrix forward(int step, const Matrix& x, Gemms& gemms, const OperandDump& dump);
  // dX for the layer below, from dY of the output; updates the router and the experts.
  Matrix backward(const Matrix& dy, Gemms& gemms, const OperandDump& dump, float learning_rate);

  // The same as programs (options.graphed): host work reads x (dy) and writes y (dx) when it runs,
  // at each replay under a graph; `step` is read then too.
  void forward_program(const HostWork& host, const int& step, const Matrix& x, Matrix& y, Gemms& gemms,
                       const OperandDump& dump);
  void backward_program(const HostWork& host, const Matrix& dy, Matrix& dx, Gemms& gemms, const OperandDump& dump,
                        float learning_rate);

 private:
  struct Route {
    int expert, row;  // the expert and the token's row among its rows
    float gate;
  };
  // Each expert's rows in one buffer: its first row, its tokens and its padded count.
  struct Group {
    int first = 0, tokens = 0, rows = 0;
  };
  void route(const Matrix& x);
  // The forward pass's host parts: the input routed and each expert's rows of it (x_rows_); the
  // output from the experts' (expert_out_).
  void dispatch(int step, const Matrix& x);
  Matrix combine(int tokens) const;
  // BF16 problems of each pass, over device buffers of x_rows_, the output and dY's rows, and
  // their dumps; the forward one uploads each expert's weights.
  std::vector<ExpertProblem> bf16_fprop(const std::uint16_t* x, float* out, const OperandDump& dump);
  void bf16_backward(const std::uint16_t* x, const std::uint16_t* dy, const std::vector<std::uint16_t>& dy_bits,
                     float* dx, float* dw, const OperandDump& dump, std::vector<ExpertProblem>& dgrad,
                     std::vector<ExpertProblem>& wgrad);
  // Each expert's rows of dY (the gate times the output's gradient).
  Matrix scatter(const Matrix& dy) const;
  // The backward pass's host part after its GEMMs: dX, and the router's and experts' updates.
  Matrix finish_backward(const Matrix& dy, const std::vector<float>& dx_rows, const std::vector<float>& dw,
                         float learning_rate);
  // Runs one pass (fprop, dgrad, wgrad) of every expert in the layer's form, in its NVTX range.
  void run(Gemms& gemms, const std::string& gemm, bool transa, bool transb, const std::vector<ExpertProblem>& problems) const;
  // MXFP8: d = b a^T (TN, cuBLAS's A = a [Q, L], B = b [P, L]) with both quantized along L; the
  // device buffers go into `held` for the pass. Dumps `a` whole and b's first `b_dump_rows` rows.
  ExpertProblem mxfp8_problem(const Matrix& a, const std::string& a_name, const Matrix& b, const std::string& b_name,
                              int b_dump_rows, void* d, const OperandDump& dump,
                              std::vector<std::unique_ptr<DeviceBuffer>>& held) const;
  // An expert's padded rows of a BF16 buffer as fp32 [rows, width].
  Matrix expert_matrix(const std::vector<std::uint16_t>& rows, int expert) const;
  int padded(int tokens) const { return (tokens + o_.pad - 1) / o_.pad * o_.pad; }
  // An expert's token rows of a padded BF16 buffer, for dumps.
  std::vector<std::uint16_t> token_rows(const std::vector<std::uint16_t>& rows, int expert) const;

  std::string name_;
  int width_;
  MoeOptions o_;
  Matrix router_;                // [E, width]
  std::vector<Matrix> weights_;  // E of [width, width] ([out, in])
  std::vector<std::unique_ptr<DeviceBuffer>> weight_buffers_;
  // From the forward pass, for the backward pass.
  Matrix input_;
  std::vector<std::vector<Route>> routes_;  // per token, its top-k
  std::vector<Group> groups_;
  std::vector<std::uint16_t> x_rows_;       // every expert's rows of X, BF16, padded
  std::vector<float> expert_out_;           // every expert's rows of X W^T, fp32
  int total_rows_ = 0;
  // Graphed: the persistent buffers (each expert's region `region_rows_` rows) and grouped arrays.
  int region_rows_ = 0;
  std::unique_ptr<DeviceBuffer> x_device_, out_device_, dy_device_, dx_device_, dw_device_;
  std::unique_ptr<GroupedArrays> fprop_arrays_, dgrad_arrays_, wgrad_arrays_;
  void (*expert_tokens_api_)(const std::uint64_t*, std::uint32_t) = nullptr;
};

}  // namespace fp8scope::trainer
