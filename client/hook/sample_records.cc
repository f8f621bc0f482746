#include "fp8scope/hook/sample_records.h"

#include <cstdio>
#include <cstring>

namespace fp8scope::hook {
namespace {

void copy_text(char* dst, std::size_t size, const char* src) { std::snprintf(dst, size, "%s", src == nullptr ? "" : src); }

}  // namespace

std::uint64_t valid_rows(const std::vector<std::uint64_t>& tokens, Operand operand, std::int64_t expert,
                         std::uint64_t rows) {
  if (operand == Operand::kW || expert < 0 || static_cast<std::uint64_t>(expert) >= tokens.size()) return 0;
  const std::uint64_t t = tokens[static_cast<std::size_t>(expert)];
  return t < rows ? t : 0;
}

shm::RecordHeader* reserve_record(shm::RingWriter& writer, std::uint64_t payload_bytes, std::uint64_t& end) {
  const std::uint64_t bytes = shm::round_up(sizeof(shm::RecordHeader) + payload_bytes);
  const std::optional<std::uint64_t> pos = writer.reserve(bytes);
  if (!pos) return nullptr;
  shm::RecordHeader* r = writer.at(*pos);
  std::memset(r, 0, sizeof *r);
  r->magic = shm::kMagic;
  r->record_bytes = bytes;
  r->payload_bytes = payload_bytes;
  end = *pos + bytes;
  return r;
}

void fill_sample_header(shm::RecordHeader& r, const SampleSpec& spec, const OperandView& v, const GemmAlpha& alpha,
                        std::uint64_t payload) {
  r.kind = shm::RecordKind::kSample;
  r.step = spec.step;
  copy_text(r.name, sizeof r.name, spec.layer.c_str());
  copy_text(r.source_call, sizeof r.source_call, spec.source);
  r.gemm = static_cast<std::uint32_t>(spec.role);
  r.operand = static_cast<std::uint32_t>(spec.operand);
  r.dtype = static_cast<std::uint32_t>(v.dtype);
  r.scale_layout = static_cast<std::uint32_t>(v.scale_layout);
  r.scale_inv = 1.0f;
  r.gemm_alpha = alpha.host;
  r.k_is_outer = v.k_is_outer ? 1 : 0;
  r.scale_bytes = payload - static_cast<std::uint64_t>(v.batch_count) * v.matrix_bytes();
  r.expert = static_cast<std::int32_t>(spec.expert);
  r.experts = spec.experts;
  r.valid_rows = spec.valid_rows;
  r.ndim = v.batch_count > 1 ? 3 : 2;
  const std::int64_t outer = static_cast<std::int64_t>(v.outer()), inner = static_cast<std::int64_t>(v.inner());
  if (v.batch_count > 1) {
    r.shape[0] = v.batch_count;
    r.shape[1] = outer;
    r.shape[2] = inner;
  } else {
    r.shape[0] = outer;
    r.shape[1] = inner;
  }
  r.leading_dimension = v.ld;
}

}  // namespace fp8scope::hook
