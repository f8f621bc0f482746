#include "gemm_pairing.h"

namespace fp8scope::server {

std::optional<GemmPair> GemmPairing::offer(const Sample& s) {
  const bool is_x = s.header.operand() == v1::OPERAND_X;
  if (s.header.gemm() != v1::GEMM_FPROP || (!is_x && s.header.operand() != v1::OPERAND_W) ||
      s.payload.size() > max_operand_bytes_) {
    return std::nullopt;
  }
  const std::string key = s.client->job + '\x1f' + s.client->run + '\x1f' + std::to_string(s.client->rank) + '\x1f' +
                          s.header.layer() + '\x1f' + std::to_string(s.header.step());
  const float scale_inv = s.header.scale_inv() > 0.0f ? s.header.scale_inv() : 1.0f;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->key != key || it->is_x == is_x) continue;
    GemmPair pair;
    pair.client = s.client;
    pair.layer = s.header.layer();
    pair.step = s.header.step();
    Pending& other = *it;
    auto fill = [](bool x_side, DType dtype, std::int64_t rows, std::int64_t cols, float si, Payload payload,
                   GemmPair& p) {
      (x_side ? p.x_dtype : p.w_dtype) = dtype;
      (x_side ? p.x_rows : p.w_rows) = rows;
      (x_side ? p.x_cols : p.w_cols) = cols;
      (x_side ? p.x_scale_inv : p.w_scale_inv) = si;
      (x_side ? p.x : p.w) = std::move(payload);
    };
    fill(other.is_x, other.dtype, other.rows, other.cols, other.scale_inv, std::move(other.payload), pair);
    fill(is_x, s.dtype, s.rows, s.cols, scale_inv, Payload(s.payload.begin(), s.payload.end()), pair);
    pending_.erase(it);
    return pair;
  }
  // Waiting for the partner; the same operand of the same GEMM replaces its older copy.
  pending_.remove_if([&](const Pending& p) { return p.key == key && p.is_x == is_x; });
  if (pending_.size() >= max_pending_) pending_.pop_front();
  Pending p{key, is_x, s.client, s.header.layer(), s.header.step(), s.dtype, s.rows, s.cols, scale_inv,
            Payload(s.payload.begin(), s.payload.end())};
  pending_.push_back(std::move(p));
  return std::nullopt;
}

}  // namespace fp8scope::server
