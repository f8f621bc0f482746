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

TEST_CASE("the daemon speaks protocols 1 to 3 and refuses others with the range it speaks", "[validation]") {
  v1::Hello hello;
  hello.set_job("j");
  hello.set_run("r");
  for (std::uint32_t v : {1u, 2u, 3u}) {
    hello.set_protocol_version(v);
    CHECK_FALSE(check_hello(hello));
  }
  for (std::uint32_t v : {0u, 4u}) {
    hello.set_protocol_version(v);
    const auto r = check_hello(hello);
    REQUIRE(r);
    CHECK(r->reason == "bad_version");
    CHECK_THAT(r->message, Catch::Contains("versions 1 to 3"));
  }
}
