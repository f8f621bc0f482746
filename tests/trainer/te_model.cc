#include "te_model.h"

#include <cuda_bf16.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <stdexcept>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "block_scaling.h"
#include "fixtures/te/te_extension.h"
#include "fp8scope/kernels/delayed_scaling.h"
#include "fp8scope/kernels/recipe.h"
#include "support/cublas_scale_layouts.h"

namespace fp8scope::trainer {
namespace {

namespace doc = fp8scope::testing::cublas_layout;

// NVTEDType and NVTEScalingMode values (transformer_engine.h:25-37, :99-118).
constexpr int kFloat32 = 4, kBFloat16 = 6, kE4M3 = 7, kE5M2 = 8, kE2M1 = 10;
constexpr int kDelayedMode = 0, kMxfp8Mode = 1, kBlock1dMode = 2, kBlock2dMode = 3, kNvfp4Mode = 4;
constexpr float kLayernormEpsilon = 1e-5f;
constexpr int kAmaxHistory = 16;

std::size_t padded(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// A device buffer of `bytes` zeros (the fixtures' cuMemAlloc does not clear).
std::unique_ptr<DeviceBuffer> zeros(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  auto b = std::make_unique<DeviceBuffer>(bytes);
  const std::vector<std::uint8_t> z(bytes, 0);
  b->upload(z.data(), bytes);
  return b;
}

void* pointer(const std::unique_ptr<DeviceBuffer>& b) { return b ? b->get() : nullptr; }

Matrix bf16_rounded(const Matrix& m) { return from_bf16(to_bf16(m), m.rows, m.cols); }

}  // namespace

std::optional<TeRecipe> te_recipe_from_name(const std::string& name) {
  if (name == "delayed") return TeRecipe::kDelayed;
  if (name == "current") return TeRecipe::kCurrent;
  if (name == "mxfp8") return TeRecipe::kMxfp8;
  if (name == "block") return TeRecipe::kBlock;
  if (name == "nvfp4") return TeRecipe::kNvfp4;
  return std::nullopt;
}

struct TeModel::Library {
  void* te = nullptr;
  void* ext = nullptr;
  decltype(&te_ext_quantize) quantize = nullptr;
  decltype(&te_ext_quantize_direct) quantize_direct = nullptr;
  decltype(&te_ext_quantize_current) quantize_current = nullptr;
  decltype(&te_ext_quantize_nvfp4) quantize_nvfp4 = nullptr;
  decltype(&te_ext_quantize_nvfp4_rht) quantize_nvfp4_rht = nullptr;
  decltype(&te_ext_quantize_dbias) quantize_dbias = nullptr;
  decltype(&te_ext_quantize_dbias_drelu) quantize_dbias_drelu = nullptr;
  decltype(&te_ext_relu) relu = nullptr;
  decltype(&te_ext_layernorm) layernorm = nullptr;
  decltype(&te_ext_error) error = nullptr;

  explicit Library(const std::string& dir) {
    // As TE's package does: the library global first, then its extension.
    te = dlopen((dir + "/libtransformer_engine.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (te != nullptr) ext = dlopen((dir + "/libte_extension.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (te == nullptr || ext == nullptr) {
      std::fprintf(stderr, "tiny_trainer: --te-dir %s: %s\n", dir.c_str(), dlerror());
      std::exit(2);
    }
    resolve(quantize, "te_ext_quantize");
    resolve(quantize_direct, "te_ext_quantize_direct");
    resolve(quantize_current, "te_ext_quantize_current");
    resolve(quantize_nvfp4, "te_ext_quantize_nvfp4");
    resolve(quantize_nvfp4_rht, "te_ext_quantize_nvfp4_rht");
    resolve(quantize_dbias, "te_ext_quantize_dbias");
    resolve(quantize_dbias_drelu, "te_ext_quantize_dbias_drelu");
    resolve(relu, "te_ext_relu");
    resolve(layernorm, "te_ext_layernorm");
    resolve(error, "te_ext_error");
  }
  template <class F>
  void resolve(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(ext, name));
    if (f == nullptr) {
      std::fprintf(stderr, "tiny_trainer: the TE extension has no %s\n", name);
      std::exit(2);
    }
  }
  void check(int rc, const char* what) const {
    if (rc == 0) return;
    std::fprintf(stderr, "tiny_trainer: %s: %s\n", what, error());
    std::exit(1);
  }
};

// A quantized tensor's buffers in its recipe's layouts, as TE's Python tensor classes hold them.
struct TeModel::Quantized {
  int mode = kDelayedMode, dtype = kE4M3;
  int rows = 0, cols = 0;
  std::unique_ptr<DeviceBuffer> data, columnwise, scale_inv, columnwise_scale_inv, scale, amax, columnwise_amax;
  std::unique_ptr<DelayedScalingState> history;  // delayed scaling's amax history, on the host

  Quantized(TeRecipe recipe, int dtype_, int rows_, int cols_, bool weight) : dtype(dtype_), rows(rows_), cols(cols_) {
    const auto r = static_cast<std::size_t>(rows), c = static_cast<std::size_t>(cols);
    std::size_t codes = r * c, scales = 0, columnwise_scales = 0;
    switch (recipe) {
      case TeRecipe::kDelayed:
      case TeRecipe::kCurrent:
        mode = kDelayedMode;
        scales = columnwise_scales = sizeof(float);
        scale = zeros(sizeof(float));
        if (recipe == TeRecipe::kDelayed) {
          amax = zeros(sizeof(float));
          Recipe delayed = default_recipe(RecipeKind::kTensorDelayed);
          delayed.amax_history_length = kAmaxHistory;
          history = std::make_unique<DelayedScalingState>(delayed, dtype == kE5M2 ? CastFormat::kE5M2 : CastFormat::kE4M3);
        }
        break;
      case TeRecipe::kMxfp8:
        mode = kMxfp8Mode;
        scales = padded(r, 128) * padded((c + 31) / 32, 4);
        columnwise_scales = padded(c, 128) * padded((r + 31) / 32, 4);
        break;
      case TeRecipe::kBlock:
        mode = weight ? kBlock2dMode : kBlock1dMode;
        scales = sizeof(float) * (weight ? (r + 127) / 128 * padded((c + 127) / 128, 4) : (c + 127) / 128 * padded(r, 4));
        columnwise_scales =
            sizeof(float) * (weight ? (c + 127) / 128 * padded((r + 127) / 128, 4) : (r + 127) / 128 * padded(c, 4));
        break;
      case TeRecipe::kNvfp4:
        mode = kNvfp4Mode;
        codes = r * c / 2;
        scales = padded(r, 128) * padded((c + 15) / 16, 4);
        columnwise_scales = padded(c, 128) * padded((r + 15) / 16, 4);
        amax = zeros(sizeof(float));
        if (!weight) columnwise_amax = zeros(sizeof(float));  // after the Hadamard transform
        break;
    }
    data = zeros(codes);
    columnwise = zeros(codes);
    scale_inv = zeros(scales);
    columnwise_scale_inv = zeros(columnwise_scales);
  }

  TeExtQuantized desc() const {
    return {mode,
            dtype,
            static_cast<std::size_t>(rows),
            static_cast<std::size_t>(cols),
            pointer(data),
            pointer(columnwise),
            pointer(scale_inv),
            pointer(columnwise_scale_inv),
            pointer(scale),
            pointer(amax),
            pointer(columnwise_amax)};
  }

  Element element() const { return dtype == kE5M2 ? Element::kE5M2 : dtype == kE2M1 ? Element::kE2M1 : Element::kE4M3; }
  cublasLtMatmulMatrixScale_t scale_mode() const {
    switch (mode) {
      case kMxfp8Mode: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
      case kBlock1dMode: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      case kBlock2dMode: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      case kNvfp4Mode: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
      default: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    }
  }
  // The operand a GEMM reads: the row-wise copy, or the column-wise one.
  DeviceOperand operand(bool use_columnwise) const {
    const bool transposed = mode != kMxfp8Mode && use_columnwise;
    return {use_columnwise ? columnwise->get() : data->get(), element(), transposed ? cols : rows,
            transposed ? rows : cols, use_columnwise ? columnwise_scale_inv->get() : scale_inv->get(), scale_mode()};
  }
  float read(const std::unique_ptr<DeviceBuffer>& b) const {
    float v = 0.0f;
    if (b) b->download(&v, sizeof v);
    return v;
  }
  // NVFP4: the per-tensor amax the GEMM's alpha folds in (the column-wise copy's own, if it has one).
  float gemm_amax(bool use_columnwise) const { return read(use_columnwise && columnwise_amax ? columnwise_amax : amax); }
};

struct TeModel::Layer {
  Matrix w;                             // [out, in], fp32 master
  std::unique_ptr<Quantized> x, wq, dy;
  Matrix pre_activation;                // its GEMM's output
};

TeModel::TeModel(const TeModelOptions& options, Gemms& gemms, std::vector<Matrix> weights, std::mt19937_64& rng)
    : o_(options), gemms_(gemms), lib_(std::make_unique<Library>(options.library_dir)) {
  for (Matrix& w : weights) {
    auto l = std::make_unique<Layer>();
    l->w = std::move(w);
    layers_.push_back(std::move(l));
  }
  gamma_ = random_normal(1, layers_.front()->w.cols, 0.1f, rng);
  for (float& g : gamma_.v) g += 1.0f;
  beta_ = random_normal(1, layers_.front()->w.cols, 0.1f, rng);
  gamma_ = bf16_rounded(gamma_);
  beta_ = bf16_rounded(beta_);
}

TeModel::~TeModel() = default;

// ln_fwd_kernels.cuh's arithmetic, for the recipes that run the norm in high precision and for
// the dumps of the fused one: fp32 sums in element order.
Matrix TeModel::layernorm(const Matrix& x) const {
  Matrix y(x.rows, x.cols);
  for (int r = 0; r < x.rows; ++r) {
    float sum = 0.0f;
    for (int c = 0; c < x.cols; ++c) sum += x.at(r, c);
    const float m = sum / static_cast<float>(x.cols);
    float var = 0.0f;
    for (int c = 0; c < x.cols; ++c) var += (x.at(r, c) - m) * (x.at(r, c) - m);
    const float rs = 1.0f / sqrtf(var / static_cast<float>(x.cols) + kLayernormEpsilon);
    for (int c = 0; c < x.cols; ++c) y.at(r, c) = gamma_.v[c] * (rs * (x.at(r, c) - m)) + beta_.v[c];
  }
  return y;
}

void TeModel::dump_cast(int step, const std::string& name, const Matrix& values, const Quantized& q) {
  if (step != o_.dump_step || o_.dump_dir.empty()) return;
  const std::string base = o_.dump_dir + "/" + name;
  bool ok = write_npy(base + ".hp.npy", "<f4", values.rows, values.cols, values.v.data(), values.v.size() * 4);
  const auto scalar = [&](const char* suffix, const std::unique_ptr<DeviceBuffer>& b) {
    const float v = q.read(b);
    if (b) ok = ok && write_npy(base + suffix, "<f4", 1, 1, &v, sizeof v);
  };
  scalar(".scale.npy", q.scale);
  if (q.mode == kNvfp4Mode) {
    scalar(".amax.npy", q.amax);
    scalar(".columnwise_amax.npy", q.columnwise_amax);
  }
  if (!ok) fail("writing a dump", errno);
}

void TeModel::before_delayed(Quantized& q) {
  if (!q.history) return;
  const float scale = q.history->scale(), zero = 0.0f;
  q.scale->upload(&scale, sizeof scale);
  q.amax->upload(&zero, sizeof zero);
}

void TeModel::after_delayed(Quantized& q) {
  if (q.history) q.history->update(q.read(q.amax));
}

DeviceBuffer& TeModel::buffer(const std::string& name, std::size_t bytes) {
  std::unique_ptr<DeviceBuffer>& b = buffers_[name];
  if (!b) b = zeros(bytes);
  return *b;
}

DeviceBuffer& TeModel::put_bf16(const std::string& name, const Matrix& m) {
  const std::vector<std::uint16_t> bits = to_bf16(m);
  DeviceBuffer& b = buffer(name, bits.size() * 2);
  b.upload(bits.data(), bits.size() * 2);
  return b;
}

void TeModel::fused_cast(const HostWork& host, const int& step, const std::string& name, Quantized& q,
                         std::function<void()> fill, const std::function<void()>& call,
                         std::function<Matrix()> dumped) {
  host([&q, fill = std::move(fill)] {
    fill();
    before_delayed(q);
  });
  call();
  host([this, &q, &step, name, dumped = std::move(dumped)] {
    after_delayed(q);
    dump_cast(step, name, dumped(), q);
  });
}

void TeModel::cast(const HostWork& host, const int& step, const std::string& name, std::function<Matrix()> values,
                   Quantized& q, Role role) {
  const auto rows = static_cast<std::size_t>(q.rows), cols = static_cast<std::size_t>(q.cols);
  // The framework holds the tensor in BF16.
  DeviceBuffer& in = buffer(name + ".in", rows * cols * 2);
  const TeExtMatrix hp{in.get(), kBFloat16, rows, cols};
  const TeExtQuantized out = q.desc();
  const CUstream s = gemms_.stream();
  const bool weight = role == Role::kWeight, last_gradient = role == Role::kLastGradient;
  const auto call = [&] {
    switch (o_.recipe) {
      case TeRecipe::kDelayed:
        if (last_gradient) {
          const TeExtMatrix db{buffer(name + ".dbias", cols * 4).get(), kFloat32, 1, cols};
          lib_->check(lib_->quantize_dbias(&hp, &out, &db, s), "nvte_quantize_dbias");
        } else if (weight) {
          // A weight's cast skips itself when its flag says the cached codes hold (here it never does).
          TeExtOptions opts;
          opts.noop = buffer(name + ".noop", sizeof(float)).get();
          lib_->check(lib_->quantize(&hp, &out, &opts, s), "nvte_quantize_noop");
        } else {
          lib_->check(lib_->quantize(&hp, &out, nullptr, s), "nvte_quantize_v2");
        }
        return;
      case TeRecipe::kCurrent:
        lib_->check(lib_->quantize_current(&hp, &out, buffer(name + ".amax", sizeof(float)).get(), s),
                    "current scaling's cast");
        return;
      case TeRecipe::kMxfp8:
        if (last_gradient) {
          const TeExtMatrix db{buffer(name + ".dbias", cols * 4).get(), kFloat32, 1, cols};
          lib_->check(lib_->quantize_dbias(&hp, &out, &db, s), "nvte_quantize_dbias");
        } else {
          lib_->check(lib_->quantize(&hp, &out, nullptr, s), "nvte_quantize_v2");
        }
        return;
      case TeRecipe::kBlock: {
        TeExtOptions opts;
        opts.power_of_2 = true;  // Float8BlockScaling's default
        lib_->check(lib_->quantize(&hp, &out, &opts, s), "nvte_quantize_v2");
        return;
      }
      case TeRecipe::kNvfp4: {
        TeExtOptions opts;
        if (weight) {
          opts.nvfp4_2d = true;
          lib_->check(lib_->quantize_nvfp4(&hp, &out, &opts, s), "nvte_quantize_v2");
        } else {
          opts.stochastic = role != Role::kActivation;  // NVFP4BlockScaling's defaults: RHT for X and Dy, SR for Dy
          lib_->check(lib_->quantize_nvfp4_rht(&hp, &out, &opts, s), "nvte_quantize_with_hadamard_transform");
        }
        return;
      }
    }
  };
  fused_cast(
      host, step, name, q,
      [this, &in, name, values = std::move(values)] {
        const Matrix& v = held_[name] = values();
        const std::vector<std::uint16_t> bits = to_bf16(v);
        in.upload(bits.data(), bits.size() * 2);
      },
      call, [this, name] { return bf16_rounded(held_.at(name)); });
}

namespace {

// fp8scope_range_gemms of the hook in the process, if one is (fp8scope/hook.h, API version 3).
void declare_gemms(const char* sequence) {
  using Declare = void (*)(const char*);
  static const auto declare = reinterpret_cast<Declare>(dlsym(RTLD_DEFAULT, "fp8scope_range_gemms"));
  if (declare != nullptr) declare(sequence);
}

constexpr const char* kMlpModule = "model.layers.1.layernorm_mlp";
constexpr const char* kOutputModule = "model.output_layer";

}  // namespace

// The ranges fp8scope.name_modules opens and the GEMMs it declares for TE's modules (client/python/
// fp8scope.py _TE_GEMMS): forward fc1 then fc2, backward fc2's GEMMs then fc1's.
void TeModel::module_begin(int l, bool backward) {
  if (!o_.te_names || l == (backward ? 0 : 1)) return;  // fc1 and fc2 share one module range
  const bool mlp = l < 2;
  nvtxRangePushA((std::string(mlp ? kMlpModule : kOutputModule) + (backward ? "/backward" : "/forward")).c_str());
  declare_gemms(mlp ? (backward ? "fc2/dgrad fc2/wgrad fc1/dgrad fc1/wgrad" : "fc1/fprop fc2/fprop")
                    : (backward ? "/dgrad /wgrad" : "/fprop"));
}

void TeModel::module_end(int l, bool backward) {
  if (o_.te_names && l != (backward ? 1 : 0)) nvtxRangePop();
}

void TeModel::gemm(const HostWork& host, const std::string& range, const Quantized& a, bool a_columnwise,
                   const Quantized& b, bool b_columnwise, DeviceBuffer& out, int P, int Q, int L) {
  const float* alpha = nullptr;
  if (a.mode == kNvfp4Mode) {
    DeviceBuffer& value = buffer(range + ".alpha", sizeof(float));
    host([&value, &a, &b, a_columnwise, b_columnwise] {
      const float v = nvfp4_gemm_alpha(a.gemm_amax(a_columnwise), b.gemm_amax(b_columnwise));
      value.upload(&v, sizeof v);
    });
    alpha = static_cast<const float*>(value.get());
  }
  if (!o_.te_names) nvtxRangePushA(range.c_str());
  const bool mxfp8 = a.mode == kMxfp8Mode;
  if (mxfp8 && a_columnwise && !b_columnwise) {
    gemms_.dgrad_nn_lt(a.operand(true), b.operand(false), out, P, L, Q);  // dX[P, Q] = dY[P, L] W[L, Q]
  } else if (mxfp8 && a_columnwise) {
    gemms_.wgrad_nt(a.operand(true), b.operand(true), out, L, P, Q);  // dW[P, Q] = dY^T X, over L tokens
  } else {
    gemms_.tn(a.operand(a_columnwise), b.operand(b_columnwise), out, P, Q, L, alpha);
  }
  if (!o_.te_names) nvtxRangePop();
}

void TeModel::program(const HostWork& host, const int& step, const Matrix& x, const Matrix& target,
                      float learning_rate, double& loss) {
  const int layers = static_cast<int>(layers_.size()), M = x.rows;
  if (o_.te_names && layers != 3) throw std::invalid_argument("te_names: the model has three layers");
  const bool fused = o_.recipe == TeRecipe::kDelayed || o_.recipe == TeRecipe::kMxfp8;
  const int forward_type = o_.recipe == TeRecipe::kNvfp4 ? kE2M1 : kE4M3;
  const int backward_type = o_.recipe == TeRecipe::kNvfp4 ? kE2M1 : (o_.recipe == TeRecipe::kMxfp8 || o_.recipe == TeRecipe::kBlock ? kE4M3 : kE5M2);
  const CUstream s = gemms_.stream();
  host([this, &x] { a_ = x; });
  for (int l = 0; l < layers; ++l) {
    Layer& L = *layers_[static_cast<std::size_t>(l)];
    const int N = L.w.rows, K = L.w.cols;
    const std::string name = "mlp." + std::to_string(l);
    if (!L.x) {
      L.x = std::make_unique<Quantized>(o_.recipe, forward_type, M, K, false);
      L.wq = std::make_unique<Quantized>(o_.recipe, forward_type, N, K, true);
      L.dy = std::make_unique<Quantized>(o_.recipe, backward_type, M, N, false);
    }
    const auto m = static_cast<std::size_t>(M), k = static_cast<std::size_t>(K), n = static_cast<std::size_t>(N);
    module_begin(l, false);
    // X: LayerNormLinear's fused norm, LayerNormMLP's fused activation, or a cast of its own.
    if (fused && l == 0) {
      DeviceBuffer &xd = buffer(name + ".x.in", m * k * 2), &gd = buffer(name + ".gamma", k * 2),
                   &bd = buffer(name + ".beta", k * 2), &mu = buffer(name + ".x.mu", m * 4),
                   &rs = buffer(name + ".x.rsigma", m * 4);
      const TeExtMatrix xm{xd.get(), kBFloat16, m, k}, gm{gd.get(), kBFloat16, 1, k}, bm{bd.get(), kBFloat16, 1, k},
          mum{mu.get(), kFloat32, 1, m}, rsm{rs.get(), kFloat32, 1, m};
      const TeExtQuantized z = L.x->desc();
      fused_cast(
          host, step, name + ".x", *L.x,
          [this, name] {
            const Matrix& xb = held_[name + ".x"] = bf16_rounded(a_);
            put_bf16(name + ".x.in", xb);
            put_bf16(name + ".gamma", gamma_);
            put_bf16(name + ".beta", beta_);
          },
          [&] { lib_->check(lib_->layernorm(&xm, &gm, &bm, kLayernormEpsilon, &z, &mum, &rsm, s), "nvte_layernorm_fwd"); },
          [this, name] { return layernorm(held_.at(name + ".x")); });
    } else if (fused && l > 0) {
      Layer& below = *layers_[static_cast<std::size_t>(l) - 1];
      DeviceBuffer& pd = buffer(name + ".x.in", m * k * 2);
      const TeExtMatrix pm{pd.get(), kBFloat16, m, k};
      const TeExtQuantized q = L.x->desc();
      fused_cast(
          host, step, name + ".x", *L.x,
          [this, &below, name] { put_bf16(name + ".x.in", bf16_rounded(below.pre_activation)); },
          [&] { lib_->check(lib_->relu(&pm, &q, s), "nvte_relu"); }, [this] { return bf16_rounded(a_); });
    } else {
      cast(host, step, name + ".x", [this, l] { return l == 0 ? layernorm(bf16_rounded(a_)) : a_; }, *L.x,
           Role::kActivation);
    }
    // W: TE's cast, or for --te-uncovered-layer one TE never sees (a cast made elsewhere).
    if (l == o_.uncovered_layer) {
      DeviceBuffer& wd = buffer(name + ".w.in", n * k * 2);
      const TeExtMatrix wm{wd.get(), kBFloat16, n, k};
      const TeExtQuantized q = L.wq->desc();
      host([this, &L, name] {
        put_bf16(name + ".w.in", L.w);
        before_delayed(*L.wq);
      });
      lib_->check(lib_->quantize_direct(&wm, &q, s), "the trainer's own cast");
      host([&L] { after_delayed(*L.wq); });
    } else {
      cast(host, step, name + ".w", [&L] { return L.w; }, *L.wq, Role::kWeight);
    }
    DeviceBuffer& out = buffer(name + ".fprop.out", m * n * sizeof(float));
    gemm(host, name + "/fprop", *L.wq, false, *L.x, false, out, M, N, K);
    module_end(l, false);
    host([this, &L, &out, M, N, last = l + 1 == layers] {
      L.pre_activation = Matrix(M, N);
      out.download(L.pre_activation.v.data(), L.pre_activation.v.size() * sizeof(float));
      a_ = L.pre_activation;
      if (!last) {
        for (float& v : a_.v) v = std::max(v, 0.0f);
      }
    });
  }
  host([this, &target, &loss] {
    loss = 0.0;
    dy_ = Matrix(a_.rows, a_.cols);
    const double count = static_cast<double>(a_.v.size());
    for (std::size_t i = 0; i < a_.v.size(); ++i) {
      const double d = static_cast<double>(a_.v[i]) - target.v[i];
      loss += d * d / count;
      dy_.v[i] = static_cast<float>(2.0 * d / count);
    }
  });
  for (int l = layers - 1; l >= 0; --l) backward_layer(host, step, l, M, learning_rate);
}

// Layer l's backward: its Dy cast (fused with the ReLU below it, or its own), dgrad and wgrad, and
// the weight update.
void TeModel::backward_layer(const HostWork& host, const int& step, int l, int M, float learning_rate) {
  const int layers = static_cast<int>(layers_.size());
  const bool fused = o_.recipe == TeRecipe::kDelayed || o_.recipe == TeRecipe::kMxfp8;
  const CUstream s = gemms_.stream();
  Layer& L = *layers_[static_cast<std::size_t>(l)];
  const int N = L.w.rows, K = L.w.cols;
  const auto m = static_cast<std::size_t>(M), n = static_cast<std::size_t>(N), k = static_cast<std::size_t>(K);
  const std::string name = "mlp." + std::to_string(l);
  module_begin(l, true);
  // Dy: the last layer's through bgrad_quantize; below it LayerNormMLP's fused ReLU backward.
  const bool below_relu = l + 1 < layers;
  if (fused && below_relu) {
    DeviceBuffer &gd = buffer(name + ".dy.in", m * n * 2), &pd = buffer(name + ".dy.act", m * n * 2),
                 &dbias = buffer(name + ".dy.dbias", n * 4);
    const TeExtMatrix gm{gd.get(), kBFloat16, m, n}, pm{pd.get(), kBFloat16, m, n}, db{dbias.get(), kFloat32, 1, n};
    const TeExtQuantized q = L.dy->desc();
    fused_cast(
        host, step, name + ".dy", *L.dy,
        [this, &L, name] {
          put_bf16(name + ".dy.in", bf16_rounded(dy_));
          put_bf16(name + ".dy.act", bf16_rounded(L.pre_activation));
        },
        [&] { lib_->check(lib_->quantize_dbias_drelu(&gm, &pm, &q, &db, s), "nvte_quantize_dbias_drelu"); },
        [this, &L] {
          const Matrix grad = bf16_rounded(dy_), pre = bf16_rounded(L.pre_activation);
          Matrix through(grad.rows, grad.cols);
          for (std::size_t i = 0; i < through.v.size(); ++i) through.v[i] = pre.v[i] > 0.0f ? grad.v[i] : 0.0f;
          return through;
        });
  } else {
    cast(
        host, step, name + ".dy",
        [this, &L, below_relu] {
          if (below_relu) {
            for (std::size_t i = 0; i < dy_.v.size(); ++i) dy_.v[i] = L.pre_activation.v[i] > 0.0f ? dy_.v[i] : 0.0f;
          }
          return dy_;
        },
        *L.dy, below_relu ? Role::kGradient : Role::kLastGradient);
  }
  DeviceBuffer &dx = buffer(name + ".dgrad.out", m * k * sizeof(float)),
               &dw = buffer(name + ".wgrad.out", n * k * sizeof(float));
  gemm(host, name + "/dgrad", *L.wq, true, *L.dy, false, dx, M, K, N);
  gemm(host, name + "/wgrad", *L.x, true, *L.dy, true, dw, N, K, M);
  module_end(l, true);
  host([this, &L, &dx, &dw, M, N, K, learning_rate] {
    Matrix dwm(N, K), dxm(M, K);
    dw.download(dwm.v.data(), dwm.v.size() * sizeof(float));
    dx.download(dxm.v.data(), dxm.v.size() * sizeof(float));
    for (std::size_t i = 0; i < L.w.v.size(); ++i) L.w.v[i] -= learning_rate * dwm.v[i];
    dy_ = dxm;  // the layer below masks it by its ReLU (fused, or before its cast)
  });
}

}  // namespace fp8scope::trainer
