#include "fp8scope/analysis/gemm_pairing.h"

namespace fp8scope::server {

std::optional<GemmPair> GemmPairing::offer(Sample&& s) {
  const bool is_x = s.header.operand == Operand::kX;
  if (s.header.gemm != GemmRole::kFprop || (!is_x && s.header.operand != Operand::kW) ||
      s.payload.size() > max_operand_bytes_ || s.payload.size() > max_pending_bytes_) {
    return std::nullopt;
  }
  const std::string key = s.client->job + '\x1f' + s.client->run + '\x1f' + std::to_string(s.client->rank) + '\x1f' +
                          s.header.layer + '\x1f' + std::to_string(s.header.step);
  const float scale_inv = s.header.scale_inv > 0.0f ? s.header.scale_inv : 1.0f;
  Pending mine{key, is_x, s.client, s.header.layer, s.header.step, s.header.dtype, s.header.rows, s.header.cols, scale_inv,
               std::move(s.payload), std::move(s.lease)};
  std::lock_guard<std::mutex> lock(mu_);
  auto erase = [&](std::list<Pending>::iterator it) {
    pending_bytes_ -= it->payload.size();
    return pending_.erase(it);
  };
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->key != key || it->is_x == is_x) continue;
    GemmPair pair;
    pair.client = mine.client;
    pair.layer = mine.layer;
    pair.step = mine.step;
    for (Pending* side : {&*it, &mine}) {
      const bool x = side->is_x;
      (x ? pair.x_dtype : pair.w_dtype) = side->dtype;
      (x ? pair.x_rows : pair.w_rows) = side->rows;
      (x ? pair.x_cols : pair.w_cols) = side->cols;
      (x ? pair.x_scale_inv : pair.w_scale_inv) = side->scale_inv;
      (x ? pair.x : pair.w) = std::move(side->payload);
      (x ? pair.x_lease : pair.w_lease) = std::move(side->lease);
    }
    pending_bytes_ -= (is_x ? pair.w : pair.x).size();
    pending_.erase(it);
    return pair;
  }
  // Waiting for the partner; the same operand of the same GEMM replaces its older copy, and the
  // oldest go first when the count or the bytes would overrun.
  for (auto it = pending_.begin(); it != pending_.end();) {
    it = it->key == key && it->is_x == is_x ? erase(it) : std::next(it);
  }
  while (!pending_.empty() &&
         (pending_.size() >= max_pending_ || pending_bytes_ + mine.payload.size() > max_pending_bytes_)) {
    erase(pending_.begin());
  }
  pending_bytes_ += mine.payload.size();
  pending_.push_back(std::move(mine));
  return std::nullopt;
}

std::uint64_t GemmPairing::pending_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_bytes_;
}

}  // namespace fp8scope::server
