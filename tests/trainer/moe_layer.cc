#include "moe_layer.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <nvtx3/nvToolsExt.h>

namespace fp8scope::trainer {
namespace {

std::vector<float> download_floats(const DeviceBuffer& b, std::size_t count) {
  std::vector<float> v(count);
  if (count > 0) b.download(v.data(), count * sizeof(float));
  return v;
}

// A device buffer of at least one element (a group may be empty), zeroed so that an expert
// without tokens reads as nothing rather than as garbage.
template <class T>
std::unique_ptr<DeviceBuffer> uploaded(const std::vector<T>& host, std::size_t count) {
  std::vector<T> data = host;
  data.resize(std::max<std::size_t>(count, 1), T{});
  auto b = std::make_unique<DeviceBuffer>(data.size() * sizeof(T));
  b->upload(data.data(), data.size() * sizeof(T));
  return b;
}

// Rows [first, first + count) of m.
Matrix rows_of(const Matrix& m, int first, int count) {
  Matrix r(count, m.cols);
  std::copy_n(m.v.begin() + static_cast<std::ptrdiff_t>(first) * m.cols, static_cast<std::size_t>(count) * m.cols, r.v.begin());
  return r;
}

}  // namespace

MoeLayer::MoeLayer(const std::string& name, int width, const MoeOptions& options, std::mt19937_64& rng)
    : name_(name), width_(width), o_(options) {
  router_ = random_normal(o_.experts, width, 1.0f / std::sqrt(static_cast<float>(width)), rng);
  for (int e = 0; e < o_.experts; ++e) {
    weights_.push_back(random_normal(width, width, std::sqrt(2.0f / static_cast<float>(width)), rng));
    weight_buffers_.push_back(std::make_unique<DeviceBuffer>(static_cast<std::size_t>(width) * width * 2));
  }
  expert_tokens_api_ =
      reinterpret_cast<void (*)(const std::uint64_t*, std::uint32_t)>(dlsym(RTLD_DEFAULT, "fp8scope_expert_tokens"));
  if (o_.graphed) {
    // An expert gets at most every token once (its top-k are distinct experts).
    region_rows_ = o_.tokens;
    const std::size_t rows = static_cast<std::size_t>(o_.experts) * region_rows_, w = static_cast<std::size_t>(width);
    x_device_ = std::make_unique<DeviceBuffer>(rows * w * 2);
    dy_device_ = std::make_unique<DeviceBuffer>(rows * w * 2);
    out_device_ = std::make_unique<DeviceBuffer>(rows * w * sizeof(float));
    dx_device_ = std::make_unique<DeviceBuffer>(rows * w * sizeof(float));
    dw_device_ = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(o_.experts) * w * w * sizeof(float));
    for (auto* arrays : {&fprop_arrays_, &dgrad_arrays_, &wgrad_arrays_}) {
      *arrays = std::make_unique<GroupedArrays>(o_.experts, Element::kBF16);
    }
  }
}

void MoeLayer::route(const Matrix& x) {
  const int tokens = x.rows;
  routes_.assign(static_cast<std::size_t>(tokens), {});
  std::vector<int> count(static_cast<std::size_t>(o_.experts), 0);
  for (int t = 0; t < tokens; ++t) {
    std::vector<float> logits(static_cast<std::size_t>(o_.experts));
    for (int e = 0; e < o_.experts; ++e) {
      float s = 0.0f;
      for (int k = 0; k < width_; ++k) s += x.at(t, k) * router_.at(e, k);
      logits[static_cast<std::size_t>(e)] = s;
    }
    std::vector<int> order(static_cast<std::size_t>(o_.experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    float top = logits[order[0]], sum = 0.0f;
    for (int j = 0; j < o_.top_k; ++j) sum += std::exp(logits[order[j]] - top);
    for (int j = 0; j < o_.top_k; ++j) {
      const int e = order[static_cast<std::size_t>(j)];
      routes_[t].push_back({e, count[e]++, std::exp(logits[e] - top) / sum});
    }
  }
  // Every expert's rows, padded; a batched GEMM needs one shape, so every expert gets the most.
  const int most = padded(*std::max_element(count.begin(), count.end()));
  groups_.assign(static_cast<std::size_t>(o_.experts), {});
  total_rows_ = 0;
  for (int e = 0; e < o_.experts; ++e) {
    Group& g = groups_[static_cast<std::size_t>(e)];
    g.first = o_.graphed ? e * region_rows_ : total_rows_;
    g.tokens = count[e];
    g.rows = o_.form == ExpertForm::kCublasBatched ? most : padded(count[e]);
    total_rows_ += o_.graphed ? region_rows_ : g.rows;
  }
}

void MoeLayer::run(Gemms& gemms, const std::string& gemm, bool transa, bool transb,
                   const std::vector<ExpertProblem>& problems) const {
  nvtxRangePushA((name_ + "/" + gemm).c_str());
  if (expert_tokens_api_ != nullptr) {
    std::vector<std::uint64_t> tokens;
    for (const Group& g : groups_) tokens.push_back(static_cast<std::uint64_t>(g.tokens));
    expert_tokens_api_(tokens.data(), static_cast<std::uint32_t>(tokens.size()));
  }
  gemms.experts(o_.form, transa, transb, problems);
  nvtxRangePop();
}

Matrix MoeLayer::expert_matrix(const std::vector<std::uint16_t>& rows, int expert) const {
  const Group& g = groups_[static_cast<std::size_t>(expert)];
  const auto begin = rows.begin() + static_cast<std::ptrdiff_t>(g.first) * width_;
  return from_bf16(std::vector<std::uint16_t>(begin, begin + static_cast<std::ptrdiff_t>(g.rows) * width_), g.rows, width_);
}

ExpertProblem MoeLayer::mxfp8_problem(const Matrix& a, const std::string& a_name, const Matrix& b,
                                      const std::string& b_name, int b_dump_rows, void* d, const OperandDump& dump,
                                      std::vector<std::unique_ptr<DeviceBuffer>>& held) const {
  const BlockQuantized qa = quantize_for_gemm(a, BlockMode::kMxfp8), qb = quantize_for_gemm(b, BlockMode::kMxfp8);
  for (const auto* bytes : {&qa.codes, &qa.scales, &qb.codes, &qb.scales}) held.push_back(uploaded(*bytes, bytes->size()));
  if (!a_name.empty()) dump.mxfp8(a_name, a.rows, a.cols, qa);
  // A block scale covers 1 x 32 of a row: the token rows quantize alone exactly as with the padding.
  if (!b_name.empty()) dump.mxfp8(b_name, b_dump_rows, b.cols, quantize_for_gemm(rows_of(b, 0, b_dump_rows), BlockMode::kMxfp8));
  const std::size_t at = held.size() - 4;
  return {held[at]->get(), a.cols, a.rows, held[at + 2]->get(), b.cols, b.rows, d, a.rows, b.rows,
          Element::kE4M3, held[at + 1]->get(), held[at + 3]->get()};
}

std::vector<std::uint16_t> MoeLayer::token_rows(const std::vector<std::uint16_t>& rows, int expert) const {
  const Group& g = groups_[static_cast<std::size_t>(expert)];
  const auto begin = rows.begin() + static_cast<std::ptrdiff_t>(g.first) * width_;
  return std::vector<std::uint16_t>(begin, begin + static_cast<std::ptrdiff_t>(g.tokens) * width_);
}

void MoeLayer::dispatch(int step, const Matrix& x) {
  input_ = x;
  route(x);
  const std::size_t row_elements = static_cast<std::size_t>(width_);
  x_rows_.assign(static_cast<std::size_t>(total_rows_) * row_elements, 0);
  const std::vector<std::uint16_t> x_bits = to_bf16(x);
  for (int t = 0; t < x.rows; ++t) {
    for (const Route& r : routes_[t]) {
      const std::size_t row = static_cast<std::size_t>(groups_[r.expert].first + r.row);
      std::copy_n(x_bits.begin() + static_cast<std::ptrdiff_t>(t) * width_, width_, x_rows_.begin() + row * row_elements);
    }
  }
  if (step == o_.nan_padding_step) {  // the first padded expert's padding made NaN, as a buggy dispatch leaves it
    const auto g = std::find_if(groups_.begin(), groups_.end(), [](const Group& g) { return g.tokens > 0 && g.rows > g.tokens; });
    if (g != groups_.end()) {
      std::fill(x_rows_.begin() + static_cast<std::ptrdiff_t>(g->first + g->tokens) * width_,
                x_rows_.begin() + static_cast<std::ptrdiff_t>(g->first + g->rows) * width_, std::uint16_t{0x7FC0});
    }
  }
}

Matrix MoeLayer::combine(int tokens) const {
  const std::size_t row_elements = static_cast<std::size_t>(width_);
  Matrix y(tokens, width_);
  for (int t = 0; t < tokens; ++t) {
    for (const Route& r : routes_[t]) {
      const std::size_t row = static_cast<std::size_t>(groups_[r.expert].first + r.row);
      for (int c = 0; c < width_; ++c) y.at(t, c) += r.gate * expert_out_[row * row_elements + c];
    }
  }
  return y;
}

std::vector<ExpertProblem> MoeLayer::bf16_fprop(const std::uint16_t* xb, float* ob, const OperandDump& dump) {
  std::vector<ExpertProblem> problems;
  for (int e = 0; e < o_.experts; ++e) {
    const Group& g = groups_[static_cast<std::size_t>(e)];
    const std::vector<std::uint16_t> w_bits = to_bf16(weights_[static_cast<std::size_t>(e)]);
    weight_buffers_[static_cast<std::size_t>(e)]->upload(w_bits.data(), w_bits.size() * 2);
    // out_e (col major N x rows) = W_e^T (stored K x N, transposed) X_e (stored K x rows).
    problems.push_back({weight_buffers_[static_cast<std::size_t>(e)]->get(), width_, width_,
                        xb + static_cast<std::ptrdiff_t>(g.first) * width_, width_, g.rows,
                        ob + static_cast<std::ptrdiff_t>(g.first) * width_, width_, g.rows});
    if (g.tokens > 0) {
      dump.bf16(name_ + ".fprop.x.e" + std::to_string(e), g.tokens, width_, token_rows(x_rows_, e));
      dump.bf16(name_ + ".fprop.w.e" + std::to_string(e), width_, width_, w_bits);
    }
  }
  return problems;
}

Matrix MoeLayer::forward(int step, const Matrix& x, Gemms& gemms, const OperandDump& dump) {
  dispatch(step, x);
  const std::size_t row_elements = static_cast<std::size_t>(width_);
  const auto x_device = uploaded(x_rows_, x_rows_.size());
  auto out = uploaded(std::vector<float>{}, static_cast<std::size_t>(total_rows_) * row_elements);
  auto* ob = static_cast<float*>(out->get());
  std::vector<ExpertProblem> problems;
  std::vector<std::unique_ptr<DeviceBuffer>> held;
  if (o_.mxfp8) {
    for (int e = 0; e < o_.experts; ++e) {
      const Group& g = groups_[static_cast<std::size_t>(e)];
      const std::string tag = g.tokens > 0 ? ".e" + std::to_string(e) : "";
      problems.push_back(mxfp8_problem(weights_[static_cast<std::size_t>(e)], tag.empty() ? "" : name_ + ".fprop.w" + tag,
                                       expert_matrix(x_rows_, e), tag.empty() ? "" : name_ + ".fprop.x" + tag, g.tokens,
                                       ob + static_cast<std::ptrdiff_t>(g.first) * width_, dump, held));
    }
  } else {
    problems = bf16_fprop(static_cast<const std::uint16_t*>(x_device->get()), ob, dump);
  }
  run(gemms, "fprop", true, false, problems);
  expert_out_ = download_floats(*out, static_cast<std::size_t>(total_rows_) * row_elements);
  return combine(x.rows);
}

void MoeLayer::forward_program(const HostWork& host, const int& step, const Matrix& x, Matrix& y, Gemms& gemms,
                               const OperandDump& dump) {
  host([this, &step, &x, dump] {
    dispatch(step, x);
    x_device_->upload(x_rows_.data(), x_rows_.size() * 2);
    fprop_arrays_->write(
        bf16_fprop(static_cast<const std::uint16_t*>(x_device_->get()), static_cast<float*>(out_device_->get()), dump));
  });
  // No tokens declared: a replay could not declare each step's (the hook reads the group sizes).
  nvtxRangePushA((name_ + "/fprop").c_str());
  gemms.lt_grouped(true, false, *fprop_arrays_);
  nvtxRangePop();
  host([this, &x, &y] {
    expert_out_ = download_floats(*out_device_, static_cast<std::size_t>(total_rows_) * width_);
    y = combine(x.rows);
  });
}

Matrix MoeLayer::scatter(const Matrix& dy) const {
  Matrix dy_rows(total_rows_, width_);
  for (int t = 0; t < dy.rows; ++t) {
    for (const Route& r : routes_[t]) {
      const int row = groups_[r.expert].first + r.row;
      for (int c = 0; c < width_; ++c) dy_rows.at(row, c) = r.gate * dy.at(t, c);
    }
  }
  return dy_rows;
}

void MoeLayer::bf16_backward(const std::uint16_t* xb, const std::uint16_t* dyb, const std::vector<std::uint16_t>& dy_bits,
                             float* dxb, float* dwb, const OperandDump& dump, std::vector<ExpertProblem>& dgrad,
                             std::vector<ExpertProblem>& wgrad) {
  for (int e = 0; e < o_.experts; ++e) {
    const Group& g = groups_[static_cast<std::size_t>(e)];
    const void* w = weight_buffers_[static_cast<std::size_t>(e)]->get();  // the forward pass's copy
    const std::uint16_t* dy_e = dyb + static_cast<std::ptrdiff_t>(g.first) * width_;
    // dX_e (K x rows) = W_e (stored K x N) dY_e (stored N x rows); dW_e (K x N) = X_e (K x rows) dY_e^T.
    dgrad.push_back({w, width_, width_, dy_e, width_, g.rows, dxb + static_cast<std::ptrdiff_t>(g.first) * width_, width_,
                     g.rows});
    wgrad.push_back({xb + static_cast<std::ptrdiff_t>(g.first) * width_, width_, g.rows, dy_e, width_, g.rows,
                     dwb + static_cast<std::ptrdiff_t>(e) * width_ * width_, width_, width_});
    if (g.tokens > 0) {
      const std::string tag = ".e" + std::to_string(e);
      dump.bf16(name_ + ".dgrad.w" + tag, width_, width_, to_bf16(weights_[static_cast<std::size_t>(e)]));
      dump.bf16(name_ + ".dgrad.dy" + tag, g.tokens, width_, token_rows(dy_bits, e));
      dump.bf16(name_ + ".wgrad.x" + tag, g.tokens, width_, token_rows(x_rows_, e));
      dump.bf16(name_ + ".wgrad.dy" + tag, g.tokens, width_, token_rows(dy_bits, e));
    }
  }
}

Matrix MoeLayer::backward(const Matrix& dy, Gemms& gemms, const OperandDump& dump, float learning_rate) {
  const std::size_t row_elements = static_cast<std::size_t>(width_);
  const Matrix dy_rows = scatter(dy);
  const std::vector<std::uint16_t> dy_bits = to_bf16(dy_rows);
  const auto dy_device = uploaded(dy_bits, dy_bits.size()), x_device = uploaded(x_rows_, x_rows_.size());
  auto dx_out = uploaded(std::vector<float>{}, static_cast<std::size_t>(total_rows_) * row_elements);
  auto dw_out = uploaded(std::vector<float>{}, static_cast<std::size_t>(o_.experts) * row_elements * row_elements);
  auto* dxb = static_cast<float*>(dx_out->get());
  auto* dwb = static_cast<float*>(dw_out->get());
  std::vector<ExpertProblem> dgrad, wgrad;
  std::vector<std::unique_ptr<DeviceBuffer>> held;
  if (o_.mxfp8) {
    for (int e = 0; e < o_.experts; ++e) {
      const Group& g = groups_[static_cast<std::size_t>(e)];
      // TN with transposed copies: dX_e = dY_e W_e, dW_e = dY_e^T X_e (K along N, then along the tokens).
      const std::string tag = g.tokens > 0 ? ".e" + std::to_string(e) : "";
      const auto named = [&](const char* what) { return tag.empty() ? std::string() : name_ + what + tag; };
      const Matrix dy_e = rows_of(dy_rows, g.first, g.rows);
      dgrad.push_back(mxfp8_problem(weights_[static_cast<std::size_t>(e)].transposed(), named(".dgrad.w"), dy_e,
                                    named(".dgrad.dy"), g.tokens, dxb + static_cast<std::ptrdiff_t>(g.first) * width_,
                                    dump, held));
      wgrad.push_back(mxfp8_problem(expert_matrix(x_rows_, e).transposed(), named(".wgrad.x"), dy_e.transposed(),
                                    named(".wgrad.dy"), width_, dwb + static_cast<std::ptrdiff_t>(e) * width_ * width_,
                                    dump, held));
    }
  } else {
    bf16_backward(static_cast<const std::uint16_t*>(x_device->get()), static_cast<const std::uint16_t*>(dy_device->get()),
                  dy_bits, dxb, dwb, dump, dgrad, wgrad);
  }
  run(gemms, "dgrad", o_.mxfp8, false, dgrad);
  run(gemms, "wgrad", o_.mxfp8, !o_.mxfp8, wgrad);
  return finish_backward(dy, download_floats(*dx_out, static_cast<std::size_t>(total_rows_) * row_elements),
                         download_floats(*dw_out, static_cast<std::size_t>(o_.experts) * row_elements * row_elements),
                         learning_rate);
}

void MoeLayer::backward_program(const HostWork& host, const Matrix& dy, Matrix& dx, Gemms& gemms,
                                const OperandDump& dump, float learning_rate) {
  host([this, &dy, dump] {
    const std::vector<std::uint16_t> dy_bits = to_bf16(scatter(dy));
    dy_device_->upload(dy_bits.data(), dy_bits.size() * 2);
    std::vector<ExpertProblem> dgrad, wgrad;
    bf16_backward(static_cast<const std::uint16_t*>(x_device_->get()), static_cast<const std::uint16_t*>(dy_device_->get()),
                  dy_bits, static_cast<float*>(dx_device_->get()), static_cast<float*>(dw_device_->get()), dump, dgrad,
                  wgrad);
    dgrad_arrays_->write(dgrad);
    wgrad_arrays_->write(wgrad);
  });
  nvtxRangePushA((name_ + "/dgrad").c_str());
  gemms.lt_grouped(false, false, *dgrad_arrays_);
  nvtxRangePop();
  nvtxRangePushA((name_ + "/wgrad").c_str());
  gemms.lt_grouped(false, true, *wgrad_arrays_);
  nvtxRangePop();
  host([this, &dy, &dx, learning_rate] {
    const std::size_t row_elements = static_cast<std::size_t>(width_);
    dx = finish_backward(dy, download_floats(*dx_device_, static_cast<std::size_t>(total_rows_) * row_elements),
                         download_floats(*dw_device_, static_cast<std::size_t>(o_.experts) * row_elements * row_elements),
                         learning_rate);
  });
}

Matrix MoeLayer::finish_backward(const Matrix& dy, const std::vector<float>& dx_rows, const std::vector<float>& dw,
                                 float learning_rate) {
  const std::size_t row_elements = static_cast<std::size_t>(width_);
  // dX through the experts, and through the gates to the router (softmax over each token's top-k).
  Matrix dx(dy.rows, width_), d_router(o_.experts, width_);
  for (int t = 0; t < dy.rows; ++t) {
    std::vector<float> d_gate;
    float weighted = 0.0f;
    for (const Route& r : routes_[t]) {
      const std::size_t row = static_cast<std::size_t>(groups_[r.expert].first + r.row);
      float g = 0.0f;
      for (int c = 0; c < width_; ++c) {
        dx.at(t, c) += dx_rows[row * row_elements + c];
        g += dy.at(t, c) * expert_out_[row * row_elements + c];
      }
      d_gate.push_back(g);
      weighted += r.gate * g;
    }
    for (std::size_t j = 0; j < routes_[t].size(); ++j) {
      const Route& r = routes_[t][j];
      const float d_logit = r.gate * (d_gate[j] - weighted);
      for (int c = 0; c < width_; ++c) {
        d_router.at(r.expert, c) += d_logit * input_.at(t, c);
        dx.at(t, c) += d_logit * router_.at(r.expert, c);
      }
    }
  }
  // dW_e is stored column major K x N: element (k, n) is W_e[n][k]'s gradient.
  for (int e = 0; e < o_.experts; ++e) {
    Matrix& w = weights_[static_cast<std::size_t>(e)];
    for (int n = 0; n < width_; ++n) {
      for (int k = 0; k < width_; ++k) {
        w.at(n, k) -= learning_rate * dw[static_cast<std::size_t>(e) * row_elements * row_elements +
                                         static_cast<std::size_t>(n) * row_elements + static_cast<std::size_t>(k)];
      }
    }
  }
  for (std::size_t i = 0; i < router_.v.size(); ++i) router_.v[i] -= learning_rate * d_router.v[i];
  return dx;
}

}  // namespace fp8scope::trainer
