// tiny_trainer: trains a small MLP (32 -> H -> H -> 16, ReLU; H = 64) to imitate a random teacher
// network, with every GEMM on the device through cuBLASLt and cuBLAS as a framework would issue
// them, and an NVTX range per layer. `--mode bf16`: BF16 operands, PyTorch's layouts (fprop TN,
// dgrad NN through cublasGemmEx, wgrad NT). `--mode fp8`: TE's delayed scaling (E4M3 forward, E5M2
// gradients), every GEMM TN with transposed copies, as FP8 cuBLASLt requires on Ada and Hopper.
// `--mode moe`: the middle layer is a mixture of experts (moe_layer.h) whose expert GEMMs run in the
// form --moe-gemm names, in BF16 or MXFP8 (--moe-recipe), BF16 elsewhere. `--mode te`: the MLP behind
// a LayerNorm, every cast made by Transformer Engine's C API in the recipe --te-recipe names
// (te_model.h). Losses go to --losses, one per line as hex floats, so runs can be compared bit for bit.
//
// Built with the tests. It runs from the build tree against the CPU fixtures (RUNPATH) on a machine
// without a GPU; on a GPU machine LD_LIBRARY_PATH to the real libraries wins.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <nvtx3/nvToolsExt.h>
#include <thread>

#include "block_scaling.h"
#include "device_gemms.h"
#include "host_tensors.h"
#include "moe_layer.h"
#include "step_graph.h"
#include "te_model.h"

using namespace fp8scope::trainer;

namespace {

constexpr int kInputs = 32, kOutputs = 16;
constexpr int kLayers = 3;
constexpr float kLearningRate = 0.05f;
constexpr int kAmaxHistory = 16;
constexpr int kMoeLayer = 1;  // --mode moe: the hidden-to-hidden layer is the mixture of experts

struct Options {
  int steps = 100;
  int hidden = 64;  // the two hidden widths
  int batch = 32;
  std::string mode = "bf16";
  std::string losses;
  std::uint64_t seed = 1;
  int dump_step = -1;
  std::string dump_dir;
  int step_sleep_ms = 0;
  int fork_at_step = -1;
  int outlier_step = -1;
  float outlier_scale = 64.0f;
  int channel_growth_from = -1;
  float channel_growth = 1.25f;
  std::string save_weights, serve_weights;
  bool capture_probe = false;
  bool no_step_api = false;
  bool cuda_graph = false;
  GraphApi graph_api = GraphApi::kDriver;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  int graph_recapture_at = -1, graph_update_at = -1, graph_twin_at = -1;
  MoeOptions moe;
  TeModelOptions te;
};

std::optional<ExpertForm> expert_form(const std::string& name) {
  if (name == "lt-grouped") return ExpertForm::kLtGrouped;
  if (name == "cublas-grouped") return ExpertForm::kCublasGrouped;
  if (name == "batched") return ExpertForm::kCublasBatched;
  if (name == "loop") return ExpertForm::kLoop;
  return std::nullopt;
}

// The hook's C API when the hook is loaded, else nothing (the trainer also runs without it).
struct HookApi {
  void (*step)(std::uint64_t) = nullptr;
  void (*log_scalar)(const char*, std::uint64_t, double) = nullptr;
};

HookApi find_hook_api(bool use_steps) {
  HookApi api;
  if (use_steps) api.step = reinterpret_cast<void (*)(std::uint64_t)>(dlsym(RTLD_DEFAULT, "fp8scope_step"));
  api.log_scalar = reinterpret_cast<void (*)(const char*, std::uint64_t, double)>(dlsym(RTLD_DEFAULT, "fp8scope_log_scalar"));
  return api;
}

template <class T>
std::vector<T> transpose(const std::vector<T>& v, int rows, int cols) {
  std::vector<T> t(v.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) t[static_cast<std::size_t>(c) * rows + r] = v[static_cast<std::size_t>(r) * cols + c];
  }
  return t;
}

// A host array on the device for one GEMM.
template <class T>
std::unique_ptr<DeviceBuffer> on_device(const std::vector<T>& host) {
  auto b = std::make_unique<DeviceBuffer>(host.size() * sizeof(T));
  b->upload(host.data(), host.size() * sizeof(T));
  return b;
}

Matrix download(const DeviceBuffer& b, int rows, int cols) {
  Matrix m(rows, cols);
  b.download(m.v.data(), m.v.size() * sizeof(float));
  return m;
}

// A teacher with fixed weights; the student learns its function.
Matrix teacher(const Matrix& x, const Matrix& t1, const Matrix& t2) {
  Matrix h(x.rows, t1.rows), y(x.rows, t2.rows);
  for (int i = 0; i < x.rows; ++i) {
    for (int j = 0; j < t1.rows; ++j) {
      float s = 0.0f;
      for (int k = 0; k < x.cols; ++k) s += x.at(i, k) * t1.at(j, k);
      h.at(i, j) = std::tanh(s);
    }
    for (int j = 0; j < t2.rows; ++j) {
      float s = 0.0f;
      for (int k = 0; k < h.cols; ++k) s += h.at(i, k) * t2.at(j, k);
      y.at(i, j) = s;
    }
  }
  return y;
}

struct Layer {
  Matrix w;  // [out, in], fp32 master weights
  Fp8Tensor x_fp8{fp8scope::CastFormat::kE4M3, kAmaxHistory}, w_fp8{fp8scope::CastFormat::kE4M3, kAmaxHistory},
      dy_fp8{fp8scope::CastFormat::kE5M2, kAmaxHistory};
  // What the forward pass gave the backward pass.
  Matrix input, pre_activation;
  std::vector<std::uint16_t> x_bf16, w_bf16;
  std::vector<std::uint8_t> x_codes, w_codes;
  float x_scale_inv = 1.0f, w_scale_inv = 1.0f;
  // The GEMMs' device buffers by name ("fprop.w", "wgrad.dy.scales", "dgrad.out"), allocated on
  // first use and written in place every step, as a framework's are: the hook recognizes a step by
  // its first GEMM's weight address, and a captured graph replays the addresses it was captured with.
  std::map<std::string, std::unique_ptr<DeviceBuffer>> device;
  std::map<std::string, BlockQuantized> block;  // the block-scaled operands of this step, by name
};

// The block modes of each operand (block_scaling.h).
struct BlockModes {
  BlockMode x, w, dy;
  Element element;
};

std::optional<BlockModes> block_modes(const std::string& mode) {
  if (mode == "mxfp8") return BlockModes{BlockMode::kMxfp8, BlockMode::kMxfp8, BlockMode::kMxfp8, Element::kE4M3};
  if (mode == "block") return BlockModes{BlockMode::kBlock1d, BlockMode::kBlock2d, BlockMode::kBlock1d, Element::kE4M3};
  if (mode == "nvfp4") return BlockModes{BlockMode::kNvfp4, BlockMode::kNvfp4Weight, BlockMode::kNvfp4, Element::kE2M1};
  if (mode == "nvfp4_row") return BlockModes{BlockMode::kNvfp4Row, BlockMode::kNvfp4Weight, BlockMode::kNvfp4, Element::kE2M1};
  return std::nullopt;
}

// Uploads into a layer's persistent buffer, allocating it on first use.
template <class T>
DeviceBuffer& upload_into(std::unique_ptr<DeviceBuffer>& buffer, const std::vector<T>& host) {
  if (!buffer) buffer = std::make_unique<DeviceBuffer>(host.size() * sizeof(T));
  buffer->upload(host.data(), host.size() * sizeof(T));
  return *buffer;
}

class Trainer {
 public:
  Trainer(const Options& o)
      : o_(o), rng_(o.seed), hook_(find_hook_api(!o.no_step_api)), block_(block_modes(o.mode)) {
    std::mt19937_64 teacher_rng(1234);
    t1_ = random_normal(48, kInputs, 1.0f / std::sqrt(static_cast<float>(kInputs)), teacher_rng);
    t2_ = random_normal(kOutputs, 48, 1.0f / std::sqrt(48.0f), teacher_rng);
    const int widths[kLayers + 1] = {kInputs, o.hidden, o.hidden, kOutputs};
    for (int l = 0; l < kLayers; ++l) {
      layers_.emplace_back();
      layers_.back().w = random_normal(widths[l + 1], widths[l], std::sqrt(2.0f / static_cast<float>(widths[l])), rng_);
    }
    if (o.mode == "moe") moe_ = std::make_unique<MoeLayer>("mlp." + std::to_string(kMoeLayer) + ".experts", o.hidden, o.moe, rng_);
    if (o.mode == "te") {
      std::vector<Matrix> weights;
      for (const Layer& l : layers_) weights.push_back(l.w);
      TeModelOptions te = o.te;
      te.dump_dir = o.dump_dir;
      te.dump_step = o.dump_step;
      te_ = std::make_unique<TeModel>(te, gemms_, std::move(weights), rng_);
    }
    if (o.cuda_graph) graph_ = std::make_unique<StepGraph>(o.graph_api, o.capture_mode, gemms_.stream());
    acts_.resize(kLayers + 1);
    grads_.resize(kLayers + 1);
  }

  double step(int step);
  // A forward pass only, its loss logged as "eval_loss": training's closing evaluation, or one
  // batch of an inference job (--serve).
  double evaluate(int step);
  void save(const std::string& path) const;
  void load(const std::string& path);
  void fork_probe();
  void capture_probe();

 private:
  bool fp8() const { return o_.mode == "fp8"; }
  bool dumping() const { return step_ == o_.dump_step && !o_.dump_dir.empty(); }
  void dump(const std::string& name, const std::string& descr, int rows, int cols, const void* data, std::size_t bytes);
  // A block-scaled operand's codes (NAME.npy) and its scale tensor as the GEMM reads it (NAME.scales.npy).
  void dump_block(const std::string& name, const BlockQuantized& q, int rows, int cols);

  // One training step as a program of host work and GEMMs (StepGraph): run now, or captured.
  void program();
  // Host work between GEMMs: run now, or under capture a host node of the step's graph.
  void host(std::function<void()> work);
  // The step's batch (x into acts_[0]) and its target; `training`: with the planted outliers.
  void begin_batch(bool training);
  void forward(int l);
  void backward(int l);
  // The loss of acts_[kLayers] against the target, and dY into grads_[kLayers].
  void loss_and_gradient();
  // A layer's device buffer, uploaded from `host` (allocated on first use).
  template <class T>
  void put(Layer& L, const std::string& name, const std::vector<T>& host) {
    upload_into(L.device[name], host);
  }
  // A buffer the host work before the GEMM filled (this step, or under capture the warm-up's).
  static const void* at(const Layer& L, const std::string& name) { return L.device.at(name)->get(); }
  static DeviceBuffer& out(Layer& L, const std::string& name, std::size_t bytes);
  // A block-quantized operand into NAME and NAME.scales (and for NVFP4 its amax in L.block).
  void put_block(Layer& L, const std::string& name, const Matrix& m, BlockMode mode, int dump_rows, int dump_cols);
  // out[P,Q] = b[P,L] a[Q,L]^T of two operands put_block quantized along L, in the range LAYER/GEMM.
  void block_gemm(Layer& L, const std::string& layer, const std::string& gemm, const std::string& a,
                  const std::string& b, DeviceBuffer& out, int P, int Q, int K);
  // dX of layer l through the ReLU of the layer below.
  Matrix below_relu(int l, Matrix dx) const;
  OperandDump moe_dump();

  Options o_;
  std::mt19937_64 rng_;
  HookApi hook_;
  std::optional<BlockModes> block_;
  Gemms gemms_;
  Matrix t1_, t2_;
  std::vector<Layer> layers_;
  std::unique_ptr<MoeLayer> moe_;
  Matrix moe_dx_;  // --cuda-graph: the mixture of experts' dX, between its program and the layer below
  std::unique_ptr<TeModel> te_;
  std::unique_ptr<StepGraph> graph_;
  // The step the program runs (host work reads it when it runs: a replay's, under a graph), its
  // activations and gradients by layer, its target and loss.
  int step_ = 0;
  std::vector<Matrix> acts_, grads_;
  Matrix target_;
  double loss_ = 0.0;
};

void Trainer::dump(const std::string& name, const std::string& descr, int rows, int cols, const void* data,
                   std::size_t bytes) {
  if (!dumping()) return;
  if (!write_npy(o_.dump_dir + "/" + name + ".npy", descr, rows, cols, data, bytes)) fail("writing a dump", 0);
}

void Trainer::dump_block(const std::string& name, const BlockQuantized& q, int rows, int cols) {
  const bool fp4 = block_->element == Element::kE2M1;
  dump(name, "|u1", rows, fp4 ? cols / 2 : cols, q.codes.data(), q.codes.size());
  const bool fp32_scales = q.scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ||
                           q.scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  dump(name + ".scales", fp32_scales ? "<f4" : "|u1", 1,
       static_cast<int>(q.scales.size() / (fp32_scales ? sizeof(float) : 1)), q.scales.data(), q.scales.size());
}

void Trainer::host(std::function<void()> work) {
  if (graph_ != nullptr && graph_->capturing()) return graph_->host(std::move(work));
  work();
}

DeviceBuffer& Trainer::out(Layer& L, const std::string& name, std::size_t bytes) {
  std::unique_ptr<DeviceBuffer>& b = L.device[name];
  if (!b) b = std::make_unique<DeviceBuffer>(bytes);
  return *b;
}

void Trainer::put_block(Layer& L, const std::string& name, const Matrix& m, BlockMode mode, int dump_rows,
                        int dump_cols) {
  BlockQuantized& q = L.block[name] = quantize_for_gemm(m, mode);
  put(L, name, q.codes);
  put(L, name + ".scales", q.scales);
  dump_block(name, q, dump_rows, dump_cols);
}

void Trainer::block_gemm(Layer& L, const std::string& layer, const std::string& gemm, const std::string& a,
                         const std::string& b, DeviceBuffer& out, int P, int Q, int K) {
  const std::string an = layer + "." + gemm + "." + a, bn = layer + "." + gemm + "." + b;
  const BlockQuantized &qa = L.block.at(an), &qb = L.block.at(bn);
  const bool fp4 = block_->element == Element::kE2M1;
  // NVFP4's alpha from both amaxes, on the device, as TE passes it.
  if (fp4) host([this, &L, an, bn] { put(L, an + ".alpha", std::vector<float>{nvfp4_gemm_alpha(L.block.at(an), L.block.at(bn))}); });
  const float* alpha = fp4 ? static_cast<const float*>(at(L, an + ".alpha")) : nullptr;
  nvtxRangePushA((layer + "/" + gemm).c_str());
  gemms_.tn({at(L, an), block_->element, Q, K, at(L, an + ".scales"), qa.scale_mode},
            {at(L, bn), block_->element, P, K, at(L, bn + ".scales"), qb.scale_mode}, out, P, Q, K, alpha);
  nvtxRangePop();
}

void Trainer::begin_batch(bool training) {
  Matrix& x = acts_[0] = random_normal(o_.batch, kInputs, 1.0f, rng_);
  // A planted data outlier: one input feature of this step's batch far out of its usual range.
  if (training && step_ == o_.outlier_step) {
    for (int r = 0; r < x.rows; ++r) x.v[static_cast<std::size_t>(r) * x.cols] *= o_.outlier_scale;
  }
  // An outlier channel that grows step by step, as SwiGLU's do late in training: input feature 1.
  if (training && o_.channel_growth_from >= 0 && step_ >= o_.channel_growth_from) {
    const float scale = std::pow(o_.channel_growth, static_cast<float>(step_ - o_.channel_growth_from + 1));
    for (int r = 0; r < x.rows; ++r) x.v[static_cast<std::size_t>(r) * x.cols + 1] *= scale;
  }
  target_ = teacher(x, t1_, t2_);
}

void Trainer::forward(int l) {
  Layer& L = layers_[static_cast<std::size_t>(l)];
  const int M = o_.batch, K = L.w.cols, N = L.w.rows;
  const std::string name = "mlp." + std::to_string(l);
  if (moe_ && l == kMoeLayer) {
    const auto activate = [this, &L, l] {
      acts_[l + 1] = L.pre_activation;
      for (float& v : acts_[l + 1].v) v = std::max(v, 0.0f);
    };
    if (o_.cuda_graph) {  // a program of host work and grouped GEMMs, as the dense layers are
      host([this, &L, l] { L.input = acts_[l]; });
      moe_->forward_program([this](std::function<void()> work) { host(std::move(work)); }, step_, L.input,
                            L.pre_activation, gemms_, moe_dump());
      host(activate);
      return;
    }
    L.input = acts_[l];
    L.pre_activation = moe_->forward(step_, L.input, gemms_, moe_dump());
    activate();
    return;
  }
  DeviceBuffer& y = out(L, "fprop.out", static_cast<std::size_t>(M) * N * sizeof(float));
  if (block_) {
    host([this, &L, l, name, M, N, K] {
      L.input = acts_[l];
      put_block(L, name + ".fprop.w", L.w, block_->w, N, K);
      put_block(L, name + ".fprop.x", L.input, block_->x, M, K);
    });
    block_gemm(L, name, "fprop", "w", "x", y, M, N, K);
  } else if (fp8()) {
    host([this, &L, l, name, M, N, K] {
      L.input = acts_[l];
      if (o_.serve_weights.empty()) {
        L.x_codes = L.x_fp8.cast(L.input, L.x_scale_inv);
        L.w_codes = L.w_fp8.cast(L.w, L.w_scale_inv);
      } else {
        // An FP8 inference job: the BF16 checkpoint's weights and the activations, current scaling.
        L.x_codes = cast_current_e4m3(L.input, L.x_scale_inv);
        L.w_codes = cast_current_e4m3(from_bf16(to_bf16(L.w), L.w.rows, L.w.cols), L.w_scale_inv);
      }
      put(L, "fprop.x", L.x_codes);
      put(L, "fprop.x.scale", std::vector<float>{L.x_scale_inv});
      put(L, "fprop.w", L.w_codes);
      put(L, "fprop.w.scale", std::vector<float>{L.w_scale_inv});
      dump(name + ".fprop.x", "|u1", M, K, L.x_codes.data(), L.x_codes.size());
      dump(name + ".fprop.w", "|u1", N, K, L.w_codes.data(), L.w_codes.size());
    });
    nvtxRangePushA((name + "/fprop").c_str());
    gemms_.tn({at(L, "fprop.w"), Element::kE4M3, N, K, at(L, "fprop.w.scale")},
              {at(L, "fprop.x"), Element::kE4M3, M, K, at(L, "fprop.x.scale")}, y, M, N, K);
    nvtxRangePop();
  } else {
    host([this, &L, l, name, M, N, K] {
      L.input = acts_[l];
      L.x_bf16 = to_bf16(L.input);
      L.w_bf16 = to_bf16(L.w);
      put(L, "fprop.x", L.x_bf16);
      put(L, "fprop.w", L.w_bf16);
      dump(name + ".fprop.x", "<u2", M, K, L.x_bf16.data(), L.x_bf16.size() * 2);
      dump(name + ".fprop.w", "<u2", N, K, L.w_bf16.data(), L.w_bf16.size() * 2);
    });
    nvtxRangePushA((name + "/forward").c_str());
    gemms_.fprop({at(L, "fprop.w"), Element::kBF16, N, K}, {at(L, "fprop.x"), Element::kBF16, M, K}, y, M, N, K);
    nvtxRangePop();
  }
  host([this, &L, l, name, M, N] {
    L.pre_activation = download(*L.device.at("fprop.out"), M, N);
    dump(name + ".fprop.out", "<f4", M, N, L.pre_activation.v.data(), L.pre_activation.v.size() * sizeof(float));
    // TE's row scales after a row-scaled NVFP4 GEMM.
    if (block_) apply_row_scales(L.pre_activation, L.block.at(name + ".fprop.w"), L.block.at(name + ".fprop.x"));
    acts_[l + 1] = L.pre_activation;
    if (l + 1 < kLayers) {
      for (float& v : acts_[l + 1].v) v = std::max(v, 0.0f);
    }
  });
}

void Trainer::loss_and_gradient() {
  const Matrix& a = acts_[kLayers];
  loss_ = 0.0;
  Matrix dy(a.rows, a.cols);
  const double n = static_cast<double>(a.v.size());
  for (std::size_t i = 0; i < a.v.size(); ++i) {
    const double d = static_cast<double>(a.v[i]) - target_.v[i];
    loss_ += d * d / n;
    dy.v[i] = static_cast<float>(2.0 * d / n);
  }
  grads_[kLayers] = std::move(dy);
}

// dX for the layer below into grads_[l]; updates the layer's weights.
void Trainer::backward(int l) {
  Layer& L = layers_[static_cast<std::size_t>(l)];
  const int M = o_.batch, N = L.w.rows, K = L.w.cols;
  const std::string name = "mlp." + std::to_string(l);
  if (moe_ && l == kMoeLayer) {
    if (o_.cuda_graph) {
      moe_->backward_program([this](std::function<void()> work) { host(std::move(work)); }, grads_[l + 1], moe_dx_,
                             gemms_, moe_dump(), kLearningRate);
      host([this, l] { grads_[l] = below_relu(l, moe_dx_); });
      return;
    }
    grads_[l] = below_relu(l, moe_->backward(grads_[l + 1], gemms_, moe_dump(), kLearningRate));
    return;
  }
  DeviceBuffer& dx_out = out(L, "dgrad.out", static_cast<std::size_t>(M) * K * sizeof(float));
  DeviceBuffer& dw_out = out(L, "wgrad.out", static_cast<std::size_t>(N) * K * sizeof(float));
  if (block_) {
    // dX[M,K] = dY[M,N] W[N,K] and dW[N,K] = dY^T[N,M] X[M,K], each TN with operands quantized along
    // the GEMM's K: W^T and dY along N, X^T and dY^T along M.
    host([this, &L, l, name, M, N, K] {
      const Matrix& dy = grads_[l + 1];
      put_block(L, name + ".dgrad.w", L.w.transposed(), block_->w, K, N);
      put_block(L, name + ".dgrad.dy", dy, block_->dy, M, N);
      put_block(L, name + ".wgrad.x", L.input.transposed(), block_->x, K, M);
      put_block(L, name + ".wgrad.dy", dy.transposed(), block_->dy, N, M);
    });
    block_gemm(L, name, "dgrad", "w", "dy", dx_out, M, K, N);
    block_gemm(L, name, "wgrad", "x", "dy", dw_out, N, K, M);
  } else if (fp8()) {
    host([this, &L, l, name, M, N, K] {
      float dy_scale_inv = 1.0f;
      const std::vector<std::uint8_t> dy_codes = L.dy_fp8.cast(grads_[l + 1], dy_scale_inv);
      // Transposed copies of the codes: the transposed tensors under the same scales.
      const std::vector<std::uint8_t> wt = transpose(L.w_codes, N, K), xt = transpose(L.x_codes, M, K),
                                      dyt = transpose(dy_codes, M, N);
      put(L, "dgrad.dy", dy_codes);
      put(L, "dgrad.w", wt);
      put(L, "wgrad.x", xt);
      put(L, "wgrad.dy", dyt);
      put(L, "dy.scale", std::vector<float>{dy_scale_inv});
      dump(name + ".dgrad.w", "|u1", K, N, wt.data(), wt.size());
      dump(name + ".dgrad.dy", "|u1", M, N, dy_codes.data(), dy_codes.size());
      dump(name + ".wgrad.x", "|u1", K, M, xt.data(), xt.size());
      dump(name + ".wgrad.dy", "|u1", N, M, dyt.data(), dyt.size());
    });
    nvtxRangePushA((name + "/dgrad").c_str());
    gemms_.tn({at(L, "dgrad.w"), Element::kE4M3, K, N, at(L, "fprop.w.scale")},
              {at(L, "dgrad.dy"), Element::kE5M2, M, N, at(L, "dy.scale")}, dx_out, M, K, N);
    nvtxRangePop();
    nvtxRangePushA((name + "/wgrad").c_str());
    gemms_.tn({at(L, "wgrad.x"), Element::kE4M3, K, M, at(L, "fprop.x.scale")},
              {at(L, "wgrad.dy"), Element::kE5M2, N, M, at(L, "dy.scale")}, dw_out, N, K, M);
    nvtxRangePop();
  } else {
    host([this, &L, l, name, M, N, K] {
      const std::vector<std::uint16_t> dy_bf16 = to_bf16(grads_[l + 1]);
      put(L, "dy", dy_bf16);
      dump(name + ".dgrad.w", "<u2", N, K, L.w_bf16.data(), L.w_bf16.size() * 2);
      dump(name + ".dgrad.dy", "<u2", M, N, dy_bf16.data(), dy_bf16.size() * 2);
      dump(name + ".wgrad.x", "<u2", M, K, L.x_bf16.data(), L.x_bf16.size() * 2);
      dump(name + ".wgrad.dy", "<u2", M, N, dy_bf16.data(), dy_bf16.size() * 2);
    });
    // The forward pass's copies of W and X: W has not changed yet.
    nvtxRangePushA((name + "/backward").c_str());
    gemms_.dgrad_nn({at(L, "fprop.w"), Element::kBF16, N, K}, {at(L, "dy"), Element::kBF16, M, N}, dx_out, M, N, K);
    gemms_.wgrad_nt({at(L, "fprop.x"), Element::kBF16, M, K}, {at(L, "dy"), Element::kBF16, M, N}, dw_out, M, N, K);
    nvtxRangePop();
  }
  host([this, &L, l, name, M, N, K] {
    Matrix dw = download(*L.device.at("wgrad.out"), N, K), dx = download(*L.device.at("dgrad.out"), M, K);
    dump(name + ".dgrad.out", "<f4", M, K, dx.v.data(), dx.v.size() * sizeof(float));
    dump(name + ".wgrad.out", "<f4", N, K, dw.v.data(), dw.v.size() * sizeof(float));
    if (block_) {
      apply_row_scales(dx, L.block.at(name + ".dgrad.w"), L.block.at(name + ".dgrad.dy"));
      apply_row_scales(dw, L.block.at(name + ".wgrad.x"), L.block.at(name + ".wgrad.dy"));
    }
    for (std::size_t i = 0; i < L.w.v.size(); ++i) L.w.v[i] -= kLearningRate * dw.v[i];
    grads_[l] = below_relu(l, std::move(dx));
  });
}

Matrix Trainer::below_relu(int l, Matrix dx) const {
  if (l > 0) {
    const Matrix& below = layers_[static_cast<std::size_t>(l - 1)].pre_activation;
    for (std::size_t i = 0; i < dx.v.size(); ++i) dx.v[i] = below.v[i] > 0.0f ? dx.v[i] : 0.0f;
  }
  return dx;
}

OperandDump Trainer::moe_dump() {
  OperandDump d;
  d.bf16 = [this](const std::string& name, int rows, int cols, const std::vector<std::uint16_t>& bits) {
    dump(name, "<u2", rows, cols, bits.data(), bits.size() * 2);
  };
  d.mxfp8 = [this](const std::string& name, int rows, int cols, const BlockQuantized& q) {
    dump(name, "|u1", rows, cols, q.codes.data(), q.codes.size());
    dump(name + ".scales", "|u1", 1, static_cast<int>(q.scales.size()), q.scales.data(), q.scales.size());
  };
  return d;
}

void Trainer::program() {
  host([this] { begin_batch(true); });
  if (te_) {
    te_->program([this](std::function<void()> work) { host(std::move(work)); }, step_, acts_[0], target_,
                 kLearningRate, loss_);
    return;
  }
  for (int l = 0; l < kLayers; ++l) forward(l);
  host([this] { loss_and_gradient(); });
  for (int l = kLayers - 1; l >= 0; --l) backward(l);
}

double Trainer::step(int step) {
  step_ = step;
  if (hook_.step != nullptr) hook_.step(static_cast<std::uint64_t>(step));
  // Step 0 runs as it is (the warm-up that fills the buffers the graph will read), the next one
  // captures the program, and every step then replays it; a recapture instantiates the graph anew
  // or updates the running one in place.
  if (graph_ != nullptr && step > 0) {
    if (!graph_->ready() || step == o_.graph_recapture_at) {
      graph_->capture([this] { program(); });
    } else if (step == o_.graph_update_at) {
      graph_->capture([this] { program(); }, StepGraph::Replace::kUpdate);
    }
    graph_->twin(o_.graph_twin_at >= 0 && step >= o_.graph_twin_at && step < o_.graph_twin_at + 2);
    graph_->launch();
  } else {
    program();
  }
  if (hook_.log_scalar != nullptr) hook_.log_scalar("loss", static_cast<std::uint64_t>(step), loss_);
  return loss_;
}

double Trainer::evaluate(int step) {
  step_ = step;
  if (hook_.step != nullptr) hook_.step(static_cast<std::uint64_t>(step));
  begin_batch(false);
  for (int l = 0; l < kLayers; ++l) forward(l);
  const Matrix& a = acts_[kLayers];
  double loss = 0.0;
  for (std::size_t i = 0; i < a.v.size(); ++i) {
    const double d = static_cast<double>(a.v[i]) - target_.v[i];
    loss += d * d / static_cast<double>(a.v.size());
  }
  if (hook_.log_scalar != nullptr) hook_.log_scalar("eval_loss", static_cast<std::uint64_t>(step), loss);
  return loss;
}

// The fp32 master weights, layer by layer: rows, cols (int32) and the values.
void Trainer::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary);
  for (const Layer& L : layers_) {
    const std::int32_t shape[2] = {L.w.rows, L.w.cols};
    out.write(reinterpret_cast<const char*>(shape), sizeof shape);
    out.write(reinterpret_cast<const char*>(L.w.v.data()), static_cast<std::streamsize>(L.w.v.size() * sizeof(float)));
  }
  if (!out) fail("writing --save-weights", errno);
}

void Trainer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  for (Layer& L : layers_) {
    std::int32_t shape[2] = {0, 0};
    in.read(reinterpret_cast<char*>(shape), sizeof shape);
    if (!in || shape[0] != L.w.rows || shape[1] != L.w.cols) {
      std::fprintf(stderr, "tiny_trainer: --serve %s: not weights of this model (--hidden %d)\n", path.c_str(), o_.hidden);
      std::exit(2);
    }
    in.read(reinterpret_cast<char*>(L.w.v.data()), static_cast<std::streamsize>(L.w.v.size() * sizeof(float)));
  }
  if (!in) fail("reading --serve weights", errno);
}

// A forked child runs one GEMM and checks its result; the hook must leave it alone.
void Trainer::fork_probe() {
  std::fflush(nullptr);  // or the child's exit() writes our buffered output a second time
  const pid_t pid = fork();
  if (pid < 0) fail("fork", errno);
  if (pid == 0) {
    const Matrix w = random_normal(16, 32, 1.0f, rng_), x = random_normal(16, 32, 1.0f, rng_);
    const std::vector<std::uint16_t> wb = to_bf16(w), xb = to_bf16(x);
    auto dw = on_device(wb), dx = on_device(xb);
    DeviceBuffer out(16 * 16 * sizeof(float));
    gemms_.fprop({dw->get(), Element::kBF16, 16, 32}, {dx->get(), Element::kBF16, 16, 32}, out, 16, 16, 32);
    const Matrix y = download(out, 16, 16), wr = from_bf16(wb, 16, 32), xr = from_bf16(xb, 16, 32);
    double worst = 0.0;
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) {
        double s = 0.0;
        for (int k = 0; k < 32; ++k) s += static_cast<double>(xr.at(i, k)) * wr.at(j, k);
        worst = std::max(worst, std::fabs(s - y.at(i, j)));
      }
    }
    std::exit(worst < 1e-3 ? 0 : 3);  // exit(), not _exit(): the child runs its exit handlers too
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::printf("tiny_trainer: forked child exited with %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("the forked child's GEMM", status);
}

void Trainer::capture_probe() {
  const std::vector<std::uint16_t> w = to_bf16(Matrix(16, 32)), x = to_bf16(Matrix(16, 32));
  auto dw = on_device(w), dx = on_device(x);
  DeviceBuffer out(16 * 16 * sizeof(float));
  gemms_.capture_probe({dw->get(), Element::kBF16, 16, 32}, {dx->get(), Element::kBF16, 16, 32}, out, 16, 16, 32);
}

// The command line into o; an exit status when the process should stop there (help, bad input).
std::optional<int> parse_options(int argc, char** argv, Options& o) {
  CLI::App app{"tiny_trainer: a small MLP trained through cuBLASLt/cuBLAS, for testing fp8scope's hook"};
  app.add_option("--steps", o.steps, "Training steps")->check(CLI::Range(1, 1000000));
  app.add_option("--hidden", o.hidden, "Width of the two hidden layers (a multiple of 16, as FP8 GEMMs need)")
      ->check(CLI::Range(16, 4096));
  app.add_option("--batch", o.batch, "Rows per step (a multiple of 16)")->check(CLI::Range(16, 4096));
  app.add_option("--mode", o.mode,
                 "bf16, fp8 (delayed scaling, E4M3 forward, E5M2 backward), mxfp8, block (1x128 and 128x128), nvfp4, "
                 "nvfp4_row (TE's row-scaled NVFP4 activations), "
                 "moe (BF16 with a mixture of experts in the middle), or te (casts by Transformer Engine's C API)")
      ->check(CLI::IsMember({"bf16", "fp8", "mxfp8", "block", "nvfp4", "nvfp4_row", "moe", "te"}));
  std::string te_recipe = "delayed";
  app.add_option("--te-recipe", te_recipe, "te: delayed, current, mxfp8, block or nvfp4")
      ->check(CLI::IsMember({"delayed", "current", "mxfp8", "block", "nvfp4"}));
  app.add_option("--te-dir", o.te.library_dir,
                 "te: the directory of libtransformer_engine.so and the extension built against it (libte_extension.so)");
  app.add_flag("--te-names", o.te.te_names,
               "te: name the layers as TE's modules: a LayerNormMLP (fc1, fc2) and a Linear, as fp8scope.name_modules "
               "names them");
  app.add_option("--te-uncovered-layer", o.te.uncovered_layer,
                 "te: this layer's W is cast without TE's entry points (a cast the hook cannot see)");
  std::string moe_gemm = "lt-grouped";
  app.add_option("--moe-gemm", moe_gemm, "moe: the expert GEMMs' form: lt-grouped, cublas-grouped, batched or loop")
      ->check(CLI::IsMember({"lt-grouped", "cublas-grouped", "batched", "loop"}));
  std::string moe_recipe = "bf16";
  app.add_option("--moe-recipe", moe_recipe, "moe: the expert GEMMs' recipe: bf16, or mxfp8 (lt-grouped and loop only)")
      ->check(CLI::IsMember({"bf16", "mxfp8"}));
  app.add_option("--experts", o.moe.experts, "moe: experts")->check(CLI::Range(1, 256));
  app.add_option("--top-k", o.moe.top_k, "moe: experts per token")->check(CLI::Range(1, 256));
  app.add_option("--moe-pad", o.moe.pad, "moe: each expert's rows padded to a multiple of this")->check(CLI::Range(1, 1024));
  app.add_option("--nan-padding-step", o.moe.nan_padding_step,
                 "moe: at this step the first padded expert's padding rows of X are NaN");
  app.add_option("--losses", o.losses, "Write one loss per line (hex float) here");
  app.add_option("--seed", o.seed, "Data and initialization seed");
  app.add_option("--dump-step", o.dump_step,
                 "Write every GEMM operand and output of this step as .npy into --dump-dir");
  app.add_option("--dump-dir", o.dump_dir, "Where --dump-step writes");
  app.add_option("--step-sleep-ms", o.step_sleep_ms, "Sleep this long after each step");
  app.add_option("--outlier-step", o.outlier_step, "At this step scale input feature 0 of the batch by --outlier-scale");
  app.add_option("--outlier-scale", o.outlier_scale, "How far out the planted outlier is")->check(CLI::Range(1.0f, 1e6f));
  app.add_option("--channel-growth-from", o.channel_growth_from,
                 "From this step scale input feature 1 by --channel-growth more each step (an outlier channel)");
  app.add_option("--channel-growth", o.channel_growth, "The outlier channel's growth per step")
      ->check(CLI::Range(1.0f, 4.0f));
  app.add_option("--save-weights", o.save_weights,
                 "After training, run one evaluation pass (step --steps) and write the weights here");
  app.add_option("--serve", o.serve_weights,
                 "Inference: load these weights and run --steps forward passes (fp8: current scaling of the BF16 weights)");
  app.add_option("--fork-at-step", o.fork_at_step, "At this step fork a child that runs one GEMM (CPU fixtures only)");
  app.add_flag("--capture-probe", o.capture_probe, "At step 1, run one GEMM under CUDA graph capture");
  app.add_flag("--no-step-api", o.no_step_api, "Do not call fp8scope_step (the hook then finds steps itself)");
  app.add_flag("--cuda-graph", o.cuda_graph,
               "Capture the training step into a CUDA graph at step 1 and replay it every step (CPU fixtures only: "
               "its host nodes call the driver)");
  std::string graph_api = "driver", capture_mode = "global";
  app.add_option("--graph-api", graph_api,
                 "--cuda-graph through the driver API, through entry points from cuGetProcAddress, or the runtime API")
      ->check(CLI::IsMember({"driver", "proc-address", "runtime"}));
  app.add_option("--graph-capture-mode", capture_mode, "--cuda-graph's stream capture mode")
      ->check(CLI::IsMember({"global", "thread-local", "relaxed"}));
  app.add_option("--graph-recapture-at", o.graph_recapture_at,
                 "At this step capture the step again, instantiate it and destroy the graph running so far");
  app.add_option("--graph-update-at", o.graph_update_at,
                 "At this step capture the step again and update the running graph in place (cuGraphExecUpdate)");
  app.add_option("--graph-twin-at", o.graph_twin_at,
                 "At this step instantiate the running graph a second time, and destroy that exec two steps later");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.moe.form = *expert_form(moe_gemm);
  o.graph_api = graph_api == "driver" ? GraphApi::kDriver : graph_api == "runtime" ? GraphApi::kRuntime : GraphApi::kProcAddress;
  o.capture_mode = capture_mode == "global"         ? CU_STREAM_CAPTURE_MODE_GLOBAL
                   : capture_mode == "thread-local" ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                                                    : CU_STREAM_CAPTURE_MODE_RELAXED;
  if (o.cuda_graph && !o.serve_weights.empty()) {
    std::fprintf(stderr, "tiny_trainer: --cuda-graph captures a training step, not --serve's\n");
    return 2;
  }
  if (o.cuda_graph && o.mode == "moe" && (moe_gemm != "lt-grouped" || moe_recipe != "bf16" || o.moe.pad != 1)) {
    // Graphed, the experts' group sizes live on the device and change at every replay: only
    // cuBLASLt's grouped layouts read them there, and the hook counts tokens from them (no padding).
    std::fprintf(stderr, "tiny_trainer: --cuda-graph --mode moe runs --moe-gemm lt-grouped --moe-recipe bf16 "
                         "--moe-pad 1\n");
    return 2;
  }
  o.moe.graphed = o.cuda_graph && o.mode == "moe";
  o.moe.tokens = o.batch;
  o.te.recipe = *te_recipe_from_name(te_recipe);
  if (o.mode == "te" && o.te.library_dir.empty()) {
    std::fprintf(stderr, "tiny_trainer: --mode te needs --te-dir\n");
    return 2;
  }
  if (o.mode == "te" && (!o.serve_weights.empty() || !o.save_weights.empty())) {
    std::fprintf(stderr, "tiny_trainer: --mode te saves and serves no weights\n");
    return 2;
  }
  o.moe.mxfp8 = moe_recipe == "mxfp8";
  if (o.moe.mxfp8 && o.moe.form != ExpertForm::kLtGrouped && o.moe.form != ExpertForm::kLoop) {
    std::fprintf(stderr, "tiny_trainer: --moe-recipe mxfp8 needs --moe-gemm lt-grouped or loop (cuBLAS has no "
                         "block-scaled batched GEMM), got %s\n", moe_gemm.c_str());
    return 2;
  }
  if (o.moe.top_k > o.moe.experts) {
    std::fprintf(stderr, "tiny_trainer: --top-k %d: expected at most --experts (%d)\n", o.moe.top_k, o.moe.experts);
    return 2;
  }
  if (o.mode == "moe" && (!o.serve_weights.empty() || !o.save_weights.empty())) {
    std::fprintf(stderr, "tiny_trainer: --mode moe saves and serves no weights\n");
    return 2;
  }
  if (o.hidden % 16 != 0 || o.batch % 16 != 0) {
    std::fprintf(stderr, "tiny_trainer: --hidden and --batch: expected multiples of 16, got %d and %d\n", o.hidden, o.batch);
    return 2;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const std::optional<int> stop = parse_options(argc, argv, o)) return *stop;
  std::FILE* losses = nullptr;
  if (!o.losses.empty() && (losses = std::fopen(o.losses.c_str(), "w")) == nullptr) fail("opening --losses", errno);
  Trainer trainer(o);
  double first = 0.0, last = 0.0;
  auto start = std::chrono::steady_clock::now();
  if (!o.serve_weights.empty()) {
    trainer.load(o.serve_weights);
    for (int step = 0; step < o.steps; ++step) {
      last = trainer.evaluate(step);
      if (o.step_sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_sleep_ms));
    }
    std::printf("tiny_trainer: %s inference, %d batches, eval loss %.4g\n", o.mode.c_str(), o.steps, last);
    return 0;
  }
  for (int step = 0; step < o.steps; ++step) {
    if (step == o.fork_at_step) trainer.fork_probe();
    if (step == 1 && o.capture_probe) trainer.capture_probe();
    last = trainer.step(step);
    // Step 0 also pays for one-time set-up (the hook's first GEMM creates its ring and starts the
    // shipper): the figure is the steady state, from step 1 on.
    if (step == 0) {
      first = last;
      if (o.steps > 1) start = std::chrono::steady_clock::now();
    }
    if (losses != nullptr) std::fprintf(losses, "%a\n", last);
    if (o.step_sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_sleep_ms));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (losses != nullptr) std::fclose(losses);
  if (!o.save_weights.empty()) {
    trainer.evaluate(o.steps);
    trainer.save(o.save_weights);
  }
  std::printf("tiny_trainer: %s, %d steps, loss %.4g -> %.4g, %.4f ms/step\n", o.mode.c_str(), o.steps, first, last,
              1e3 * seconds / std::max(o.steps - 1, 1));
  return 0;
}
