// What the daemon accepts from a client before it allocates anything: protocol 2's FP4 codes and
// scale tensors are sized from the shape and the scale mode alone, so a header that disagrees with
// itself is refused with its reason; protocol 1's FP8 headers (no scale mode) still mean one
// per-tensor scale. The scale tensor sizes here are worked out by hand from cuBLAS's tiled layout
// (128 rows x 4 K-blocks per tile, rows padded to 128, K-blocks to 4).
#include "fp8scope/ingest/sample_validation.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "fp8scope/wire/wire.h"

using namespace fp8scope;
using namespace fp8scope::server;

namespace {

v1::TensorHeader header(std::int64_t rows, std::int64_t cols, v1::DType dtype, v1::ScaleMode mode,
                        std::uint64_t codes_bytes, std::uint64_t scale_bytes) {
  v1::TensorHeader h;
  h.set_step(1);
  h.set_layer("blocks.0.mlp.fc1");
  h.set_gemm(v1::GEMM_FPROP);
  h.set_operand(v1::OPERAND_X);
  h.set_dtype(dtype);
  h.add_shape(rows);
  h.add_shape(cols);
  h.set_scale_mode(mode);
  h.set_scale_bytes(scale_bytes);
  h.set_payload_bytes(codes_bytes + scale_bytes);
  return h;
}

std::string refusal(const v1::TensorHeader& h) {
  const HeaderCheck c = check_header(h, 1 << 20);
  CHECK_FALSE(c.header);
  return c.refusal.reason;
}

}  // namespace

TEST_CASE("a protocol 1 FP8 header without a scale mode means one per-tensor scale", "[validation]") {
  v1::TensorHeader h = header(4, 64, v1::DTYPE_E4M3, v1::SCALE_MODE_UNSPECIFIED, 256, 0);
  h.set_scale_inv(0.25f);
  const HeaderCheck c = check_header(h, 1 << 20);
  REQUIRE(c.header);
  CHECK(c.header->scale_layout == ScaleLayout::kTensorScalar);
  CHECK(c.header->scale_bytes == 0);
  CHECK(wire::required_protocol(h) == 1);
  const v1::TensorHeader bf16 = header(4, 64, v1::DTYPE_BF16, v1::SCALE_MODE_UNSPECIFIED, 512, 0);
  REQUIRE(check_header(bf16, 1 << 20).header);
  CHECK(check_header(bf16, 1 << 20).header->scale_layout == ScaleLayout::kNone);
  CHECK(wire::required_protocol(bf16) == 1);
}

TEST_CASE("MXFP8 and NVFP4 operands carry their tiled scale tensor after the codes", "[validation]") {
  // E4M3 130 x 64 with 1x32 E8M0 scales: 130 rows pad to 256, 2 K-blocks to 4: 1024 bytes.
  const v1::TensorHeader mx = header(130, 64, v1::DTYPE_E4M3, v1::SCALE_MODE_VEC32_UE8M0, 130 * 64, 1024);
  const HeaderCheck m = check_header(mx, 1 << 20);
  REQUIRE(m.header);
  CHECK(m.header->scale_layout == ScaleLayout::kVec32Ue8m0);
  CHECK(m.header->codes_bytes == 130 * 64);
  CHECK(m.header->scale_bytes == 1024);
  CHECK(wire::required_protocol(mx) == 2);
  // E2M1 32 x 48 (two codes a byte) with 1x16 UE4M3 scales: 32 rows pad to 128, 3 K-blocks to 4.
  const v1::TensorHeader nv = header(32, 48, v1::DTYPE_E2M1, v1::SCALE_MODE_VEC16_UE4M3, 32 * 24, 512);
  const HeaderCheck n = check_header(nv, 1 << 20);
  REQUIRE(n.header);
  CHECK(n.header->dtype == DType::kE2M1);
  CHECK(n.header->codes_bytes == 768);
  CHECK(wire::required_protocol(nv) == 2);
  // 1x128 fp32 scales, K along the rows (k_is_outer): 300 x 8 has 3 K-blocks of 8 columns: 96 bytes.
  v1::TensorHeader vec = header(300, 8, v1::DTYPE_E4M3, v1::SCALE_MODE_VEC128_F32, 2400, 96);
  vec.set_k_is_outer(true);
  REQUIRE(check_header(vec, 1 << 20).header);
  CHECK(check_header(vec, 1 << 20).header->k_is_outer);
  // FP4 codes with one per-tensor scale still need protocol 2 (the dtype is new).
  CHECK(wire::required_protocol(header(2, 2, v1::DTYPE_E2M1, v1::SCALE_MODE_TENSOR_SCALAR, 2, 0)) == 2);
}

TEST_CASE("a header that disagrees with itself about its scales or FP4 codes is refused with its reason",
          "[validation]") {
  const v1::TensorHeader good = header(130, 64, v1::DTYPE_E4M3, v1::SCALE_MODE_VEC32_UE8M0, 130 * 64, 1024);
  v1::TensorHeader bad = good;
  bad.set_scale_bytes(1000);
  bad.set_payload_bytes(130 * 64 + 1000);
  CHECK(refusal(bad) == "size_mismatch");
  CHECK_THAT(check_header(bad, 1 << 20).refusal.message, Catch::Contains("take 1024 bytes, the header says 1000"));
  bad = good;
  bad.set_payload_bytes(130 * 64);  // the scales left out of the payload
  CHECK(refusal(bad) == "size_mismatch");
  bad = good;
  bad.set_scale_mode(static_cast<v1::ScaleMode>(42));
  CHECK(refusal(bad) == "bad_scale_mode");
  bad = good;
  bad.set_scale_mode(v1::SCALE_MODE_OTHER);  // never sent: a sender drops what it cannot copy
  CHECK(refusal(bad) == "bad_scale_mode");
  CHECK(refusal(header(4, 64, v1::DTYPE_E4M3, v1::SCALE_MODE_NONE, 256, 0)) == "bad_scale_mode");
  CHECK(refusal(header(4, 64, v1::DTYPE_BF16, v1::SCALE_MODE_VEC128_F32, 512, 16)) == "bad_scale_mode");
  CHECK(refusal(header(4, 64, v1::DTYPE_E4M3, v1::SCALE_MODE_TENSOR_SCALAR, 256, 4)) == "size_mismatch");
  // FP4 codes come two a byte: an odd last dimension has no byte layout.
  const v1::TensorHeader odd = header(32, 47, v1::DTYPE_E2M1, v1::SCALE_MODE_VEC16_UE4M3, 32 * 24, 512);
  CHECK(refusal(odd) == "bad_shape");
  CHECK_THAT(check_header(odd, 1 << 20).refusal.message, Catch::Contains("even last dimension"));
  // A block-scaled operand is one matrix.
  v1::TensorHeader batched = good;
  batched.add_shape(1);
  CHECK(refusal(batched) == "bad_shape");
  bad = header(32, 48, v1::DTYPE_E2M1, v1::SCALE_MODE_VEC16_UE4M3, 768, 512);
  bad.set_global_scale_inv(-1.0f);
  CHECK(refusal(bad) == "bad_scale");
  bad.set_global_scale_inv(0.5f);
  bad.set_gemm_alpha(INFINITY);
  CHECK(refusal(bad) == "bad_scale");
  // Over the daemon's sample limit, counting the scales.
  CHECK(check_header(good, 130 * 64 + 1023).refusal.reason == "too_large");
}

TEST_CASE("the daemon speaks protocols 1 to 4 and refuses others with the range it speaks", "[validation]") {
  v1::Hello hello;
  hello.set_job("j");
  hello.set_run("r");
  for (std::uint32_t v : {1u, 2u, 3u, 4u}) {
    hello.set_protocol_version(v);
    CHECK_FALSE(check_hello(hello));
  }
  for (std::uint32_t v : {0u, 5u}) {
    hello.set_protocol_version(v);
    const auto r = check_hello(hello);
    REQUIRE(r);
    CHECK(r->reason == "bad_version");
    CHECK_THAT(r->message, Catch::Contains("versions 1 to 4"));
  }
}

namespace {

// A cast sample (protocol 4): E4M3 codes of a BF16 input, per tensor, its cast part after the codes.
v1::TensorHeader cast_sample(v1::CastSource source, std::int64_t rows, std::int64_t cols, bool transposed) {
  const std::uint64_t part = fp8scope::cast_layout(*wire::from_wire(source), static_cast<std::uint64_t>(rows),
                                                   static_cast<std::uint64_t>(cols), DType::kBF16, DType::kBF16)
                                 .total;
  v1::TensorHeader h = header(transposed ? cols : rows, transposed ? rows : cols, v1::DTYPE_E4M3,
                              v1::SCALE_MODE_TENSOR_SCALAR, static_cast<std::uint64_t>(rows * cols), 0);
  h.set_payload_bytes(static_cast<std::uint64_t>(rows * cols) + part);
  v1::CastPart* c = h.mutable_cast();
  c->set_source(source);
  c->set_recipe(v1::RECIPE_TENSOR_DELAYED);
  c->set_input_dtype(v1::DTYPE_BF16);
  c->set_param_dtype(v1::DTYPE_BF16);
  c->set_rows(rows);
  c->set_cols(cols);
  c->set_columnwise(transposed);
  c->set_transposed(transposed);
  c->set_entry_point("nvte_quantize_v2");
  c->set_bytes(part);
  return h;
}

}  // namespace

TEST_CASE("a cast sample's part holds what its source needs, and its codes are the tensor it cast", "[validation]") {
  const v1::TensorHeader rowwise = cast_sample(v1::CAST_SOURCE_INPUT, 32, 64, false);
  const HeaderCheck c = check_header(rowwise, 1 << 20);
  REQUIRE(c.header);
  REQUIRE(c.header->cast);
  CHECK(c.header->cast->source == CastSource::kInput);
  CHECK(c.header->payload_bytes() == rowwise.payload_bytes());
  CHECK(wire::required_protocol(rowwise) == 4);
  // The input, at 16 bytes after four fp32 scalars: 16 + 32 * 64 * 2.
  CHECK(c.header->cast->layout.offset[0] == 16);
  CHECK(c.header->cast->bytes == 16 + 32 * 64 * 2);
  // A transposed column-wise copy's codes are the input's transpose.
  CHECK(check_header(cast_sample(v1::CAST_SOURCE_INPUT, 32, 64, true), 1 << 20).header);
  v1::TensorHeader not_transposed = cast_sample(v1::CAST_SOURCE_INPUT, 32, 64, true);
  not_transposed.mutable_cast()->set_transposed(false);
  CHECK(refusal(not_transposed) == "bad_cast");
  // A layernorm's part: x, gamma, beta, mu and rsigma, each on a 16-byte boundary.
  const HeaderCheck ln = check_header(cast_sample(v1::CAST_SOURCE_LAYERNORM, 32, 64, false), 1 << 20);
  REQUIRE(ln.header);
  CHECK(ln.header->cast->bytes == 16 + 32 * 64 * 2 + 64 * 2 + 64 * 2 + 32 * 4 + 32 * 4);
  // The part's size is checked against its source and shape, and the payload against all three parts.
  v1::TensorHeader short_part = cast_sample(v1::CAST_SOURCE_INPUT, 32, 64, false);
  short_part.mutable_cast()->set_bytes(short_part.cast().bytes() - 16);
  short_part.set_payload_bytes(short_part.payload_bytes() - 16);
  CHECK(refusal(short_part) == "size_mismatch");
  v1::TensorHeader long_payload = cast_sample(v1::CAST_SOURCE_INPUT, 32, 64, false);
  long_payload.set_payload_bytes(long_payload.payload_bytes() + 1);
  CHECK(refusal(long_payload) == "size_mismatch");
  // An activation source names its activation; a gated one's input holds both halves.
  v1::TensorHeader activation = cast_sample(v1::CAST_SOURCE_ACTIVATION, 32, 64, false);
  CHECK(refusal(activation) == "bad_cast");
  activation.mutable_cast()->set_activation(v1::ACTIVATION_SWIGLU);
  CHECK(refusal(activation) == "bad_cast");  // the codes are the output: half the input's columns
  v1::TensorHeader gated = cast_sample(v1::CAST_SOURCE_ACTIVATION, 32, 128, false);
  gated.mutable_cast()->set_activation(v1::ACTIVATION_SWIGLU);
  gated.clear_shape();
  gated.add_shape(32);
  gated.add_shape(64);
  gated.set_payload_bytes(32 * 64 + gated.cast().bytes());
  CHECK(check_header(gated, 1 << 20).header);
  // Unknown words, non-finite parameters and codes that are no codes are refused.
  v1::TensorHeader unknown = cast_sample(v1::CAST_SOURCE_INPUT, 32, 64, false);
  unknown.mutable_cast()->set_source(static_cast<v1::CastSource>(77));
  CHECK(refusal(unknown) == "bad_cast");
  v1::TensorHeader nan_eps = cast_sample(v1::CAST_SOURCE_INPUT, 32, 64, false);
  nan_eps.mutable_cast()->set_epsilon(NAN);
  CHECK(refusal(nan_eps) == "bad_cast");
  v1::TensorHeader bf16 = cast_sample(v1::CAST_SOURCE_INPUT, 32, 64, false);
  bf16.set_dtype(v1::DTYPE_BF16);
  bf16.set_scale_mode(v1::SCALE_MODE_NONE);
  bf16.set_payload_bytes(32 * 64 * 2 + bf16.cast().bytes());
  CHECK(refusal(bf16) == "bad_cast");
}

TEST_CASE("a cast sample for a protocol 3 daemon loses its cast part, not its codes", "[validation]") {
  v1::TensorHeader h = cast_sample(v1::CAST_SOURCE_INPUT, 32, 64, false);
  wire::strip_cast(h);
  CHECK_FALSE(h.has_cast());
  CHECK(wire::required_protocol(h) == 1);  // per-tensor FP8 codes: what protocol 1 carries
  const HeaderCheck c = check_header(h, 1 << 20);
  REQUIRE(c.header);
  CHECK_FALSE(c.header->cast);
  CHECK(c.header->payload_bytes() == 32 * 64);
}
