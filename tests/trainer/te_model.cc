#include "te_model.h"

#include <cuda_bf16.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
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

void TeModel::cast(int step, const std::string& name, const Matrix& values, Quantized& q, Role role) {
  // The framework holds the tensor in BF16.
  const std::vector<std::uint16_t> bits = to_bf16(values);
  DeviceBuffer in(bits.size() * 2);
  in.upload(bits.data(), bits.size() * 2);
  const TeExtMatrix hp{in.get(), kBFloat16, static_cast<std::size_t>(values.rows), static_cast<std::size_t>(values.cols)};
  const TeExtQuantized out = q.desc();
  const CUstream s = gemms_.stream();
  const bool weight = role == Role::kWeight, last_gradient = role == Role::kLastGradient;
  before_delayed(q);
  switch (o_.recipe) {
    case TeRecipe::kDelayed: {
      const float zero = 0.0f;
      if (last_gradient) {
        std::vector<float> bias(static_cast<std::size_t>(values.cols));
        DeviceBuffer dbias(bias.size() * 4);
        const TeExtMatrix db{dbias.get(), kFloat32, 1, bias.size()};
        lib_->check(lib_->quantize_dbias(&hp, &out, &db, s), "nvte_quantize_dbias");
      } else if (weight) {
        // A weight's cast skips itself when its flag says the cached codes hold (here it never does).
        DeviceBuffer flag(sizeof(float));
        flag.upload(&zero, sizeof zero);
        TeExtOptions opts;
        opts.noop = flag.get();
        lib_->check(lib_->quantize(&hp, &out, &opts, s), "nvte_quantize_noop");
      } else {
        lib_->check(lib_->quantize(&hp, &out, nullptr, s), "nvte_quantize_v2");
      }
      break;
    }
    case TeRecipe::kCurrent: {
      DeviceBuffer amax(sizeof(float));
      lib_->check(lib_->quantize_current(&hp, &out, amax.get(), s), "current scaling's cast");
      break;
    }
    case TeRecipe::kMxfp8:
      if (last_gradient) {
        DeviceBuffer dbias(static_cast<std::size_t>(values.cols) * 4);
        const TeExtMatrix db{dbias.get(), kFloat32, 1, static_cast<std::size_t>(values.cols)};
        lib_->check(lib_->quantize_dbias(&hp, &out, &db, s), "nvte_quantize_dbias");
      } else {
        lib_->check(lib_->quantize(&hp, &out, nullptr, s), "nvte_quantize_v2");
      }
      break;
    case TeRecipe::kBlock: {
      TeExtOptions opts;
      opts.power_of_2 = true;  // Float8BlockScaling's default
      lib_->check(lib_->quantize(&hp, &out, &opts, s), "nvte_quantize_v2");
      break;
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
      break;
    }
  }
  after_delayed(q);
  dump_cast(step, name, bf16_rounded(values), q);
}

void TeModel::gemm(const std::string& range, const Quantized& a, bool a_columnwise, const Quantized& b,
                   bool b_columnwise, DeviceBuffer& out, int P, int Q, int L) {
  std::unique_ptr<DeviceBuffer> alpha;
  if (a.mode == kNvfp4Mode) {
    const float value = nvfp4_gemm_alpha(a.gemm_amax(a_columnwise), b.gemm_amax(b_columnwise));
    alpha = std::make_unique<DeviceBuffer>(sizeof value);
    alpha->upload(&value, sizeof value);
  }
  nvtxRangePushA(range.c_str());
  const bool mxfp8 = a.mode == kMxfp8Mode;
  if (mxfp8 && a_columnwise && !b_columnwise) {
    gemms_.dgrad_nn_lt(a.operand(true), b.operand(false), out, P, L, Q);  // dX[P, Q] = dY[P, L] W[L, Q]
  } else if (mxfp8 && a_columnwise) {
    gemms_.wgrad_nt(a.operand(true), b.operand(true), out, L, P, Q);  // dW[P, Q] = dY^T X, over L tokens
  } else {
    gemms_.tn(a.operand(a_columnwise), b.operand(b_columnwise), out, P, Q, L,
              alpha ? static_cast<const float*>(alpha->get()) : nullptr);
  }
  nvtxRangePop();
}

double TeModel::step(int step, const Matrix& x, const Matrix& target, float learning_rate) {
  const int layers = static_cast<int>(layers_.size()), M = x.rows;
  const bool fused = o_.recipe == TeRecipe::kDelayed || o_.recipe == TeRecipe::kMxfp8;
  const int forward_type = o_.recipe == TeRecipe::kNvfp4 ? kE2M1 : kE4M3;
  const int backward_type = o_.recipe == TeRecipe::kNvfp4 ? kE2M1 : (o_.recipe == TeRecipe::kMxfp8 || o_.recipe == TeRecipe::kBlock ? kE4M3 : kE5M2);
  const CUstream s = gemms_.stream();
  Matrix a = x;
  for (int l = 0; l < layers; ++l) {
    Layer& L = *layers_[static_cast<std::size_t>(l)];
    const int N = L.w.rows, K = L.w.cols;
    const std::string name = "mlp." + std::to_string(l);
    if (!L.x) {
      L.x = std::make_unique<Quantized>(o_.recipe, forward_type, M, K, false);
      L.wq = std::make_unique<Quantized>(o_.recipe, forward_type, N, K, true);
      L.dy = std::make_unique<Quantized>(o_.recipe, backward_type, M, N, false);
    }
    // X: LayerNormLinear's fused norm, LayerNormMLP's fused activation, or a cast of its own.
    if (fused && l == 0) {
      const Matrix xb = bf16_rounded(a);
      const std::vector<std::uint16_t> xbits = to_bf16(xb), gbits = to_bf16(gamma_), bbits = to_bf16(beta_);
      DeviceBuffer xd(xbits.size() * 2), gd(gbits.size() * 2), bd(bbits.size() * 2), mu(M * 4), rs(M * 4);
      xd.upload(xbits.data(), xbits.size() * 2);
      gd.upload(gbits.data(), gbits.size() * 2);
      bd.upload(bbits.data(), bbits.size() * 2);
      const auto k = static_cast<std::size_t>(K), m = static_cast<std::size_t>(M);
      const TeExtMatrix xm{xd.get(), kBFloat16, m, k}, gm{gd.get(), kBFloat16, 1, k}, bm{bd.get(), kBFloat16, 1, k},
          mum{mu.get(), kFloat32, 1, m}, rsm{rs.get(), kFloat32, 1, m};
      before_delayed(*L.x);
      const TeExtQuantized z = L.x->desc();
      lib_->check(lib_->layernorm(&xm, &gm, &bm, kLayernormEpsilon, &z, &mum, &rsm, s), "nvte_layernorm_fwd");
      after_delayed(*L.x);
      dump_cast(step, name + ".x", layernorm(xb), *L.x);
    } else if (fused && l > 0) {
      const Matrix pre = bf16_rounded(layers_[static_cast<std::size_t>(l) - 1]->pre_activation);
      const std::vector<std::uint16_t> bits = to_bf16(pre);
      DeviceBuffer pd(bits.size() * 2);
      pd.upload(bits.data(), bits.size() * 2);
      const TeExtMatrix pm{pd.get(), kBFloat16, static_cast<std::size_t>(pre.rows), static_cast<std::size_t>(pre.cols)};
      before_delayed(*L.x);
      const TeExtQuantized q = L.x->desc();
      lib_->check(lib_->relu(&pm, &q, s), "nvte_relu");
      after_delayed(*L.x);
      dump_cast(step, name + ".x", bf16_rounded(a), *L.x);
    } else {
      cast(step, name + ".x", l == 0 ? layernorm(bf16_rounded(a)) : a, *L.x, Role::kActivation);
    }
    // W: TE's cast, or for --te-uncovered-layer one TE never sees (a cast made elsewhere).
    if (l == o_.uncovered_layer) {
      const std::vector<std::uint16_t> bits = to_bf16(L.w);
      DeviceBuffer wd(bits.size() * 2);
      wd.upload(bits.data(), bits.size() * 2);
      const TeExtMatrix wm{wd.get(), kBFloat16, static_cast<std::size_t>(N), static_cast<std::size_t>(K)};
      before_delayed(*L.wq);
      const TeExtQuantized q = L.wq->desc();
      lib_->check(lib_->quantize_direct(&wm, &q, s), "the trainer's own cast");
      after_delayed(*L.wq);
    } else {
      cast(step, name + ".w", L.w, *L.wq, Role::kWeight);
    }
    DeviceBuffer out(static_cast<std::size_t>(M) * N * sizeof(float));
    gemm(name + "/fprop", *L.wq, false, *L.x, false, out, M, N, K);
    L.pre_activation = Matrix(M, N);
    out.download(L.pre_activation.v.data(), L.pre_activation.v.size() * sizeof(float));
    a = L.pre_activation;
    if (l + 1 < layers) {
      for (float& v : a.v) v = std::max(v, 0.0f);
    }
  }
  double loss = 0.0;
  Matrix dy(a.rows, a.cols);
  const double n = static_cast<double>(a.v.size());
  for (std::size_t i = 0; i < a.v.size(); ++i) {
    const double d = static_cast<double>(a.v[i]) - target.v[i];
    loss += d * d / n;
    dy.v[i] = static_cast<float>(2.0 * d / n);
  }
  for (int l = layers - 1; l >= 0; --l) {
    Layer& L = *layers_[static_cast<std::size_t>(l)];
    const int N = L.w.rows, K = L.w.cols;
    const std::string name = "mlp." + std::to_string(l);
    // Dy: the last layer's through bgrad_quantize; below it LayerNormMLP's fused ReLU backward.
    const bool below_relu = l + 1 < layers;
    if (fused && below_relu) {
      const Matrix grad = bf16_rounded(dy), pre = bf16_rounded(L.pre_activation);
      const std::vector<std::uint16_t> gbits = to_bf16(grad), pbits = to_bf16(pre);
      DeviceBuffer gd(gbits.size() * 2), pd(pbits.size() * 2), dbias(static_cast<std::size_t>(N) * 4);
      gd.upload(gbits.data(), gbits.size() * 2);
      pd.upload(pbits.data(), pbits.size() * 2);
      const TeExtMatrix gm{gd.get(), kBFloat16, static_cast<std::size_t>(M), static_cast<std::size_t>(N)},
          pm{pd.get(), kBFloat16, static_cast<std::size_t>(M), static_cast<std::size_t>(N)},
          db{dbias.get(), kFloat32, 1, static_cast<std::size_t>(N)};
      before_delayed(*L.dy);
      const TeExtQuantized q = L.dy->desc();
      lib_->check(lib_->quantize_dbias_drelu(&gm, &pm, &q, &db, s), "nvte_quantize_dbias_drelu");
      after_delayed(*L.dy);
      Matrix through(M, N);
      for (std::size_t i = 0; i < through.v.size(); ++i) through.v[i] = pre.v[i] > 0.0f ? grad.v[i] : 0.0f;
      dump_cast(step, name + ".dy", through, *L.dy);
    } else {
      if (below_relu) {
        for (std::size_t i = 0; i < dy.v.size(); ++i) dy.v[i] = L.pre_activation.v[i] > 0.0f ? dy.v[i] : 0.0f;
      }
      cast(step, name + ".dy", dy, *L.dy, below_relu ? Role::kGradient : Role::kLastGradient);
    }
    DeviceBuffer dx(static_cast<std::size_t>(M) * K * sizeof(float)), dw(static_cast<std::size_t>(N) * K * sizeof(float));
    gemm(name + "/dgrad", *L.wq, true, *L.dy, false, dx, M, K, N);
    gemm(name + "/wgrad", *L.x, true, *L.dy, true, dw, N, K, M);
    Matrix dwm(N, K), dxm(M, K);
    dw.download(dwm.v.data(), dwm.v.size() * sizeof(float));
    dx.download(dxm.v.data(), dxm.v.size() * sizeof(float));
    for (std::size_t i = 0; i < L.w.v.size(); ++i) L.w.v[i] -= learning_rate * dwm.v[i];
    dy = dxm;  // the layer below masks it by its ReLU (fused, or before its cast)
  }
  return loss;
}

}  // namespace fp8scope::trainer
