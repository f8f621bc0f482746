// The .npy and .safetensors readers: every real file from the reference writers parses with the
// contents its README lists, and every malformed file is refused with a line naming the problem.
#include "fp8scope/tensorfile/tensor_file.h"
#include "fp8scope/tensorfile/safetensors_header.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <cmath>
#include <cstring>

#include "support/temp_dir.h"

using namespace fp8scope;
using fp8scope::testing::le_bytes;
using fp8scope::testing::npy_file;
using fp8scope::testing::safetensors_file;
using fp8scope::testing::TempDir;

namespace {

float element(const FileTensor& t, std::size_t i) { return load_element(t.bytes.data(), i, *t.dtype, 1.0f); }

float amax(const FileTensor& t) {
  float a = 0.0f;
  for (std::size_t i = 0; i < static_cast<std::size_t>(t.numel()); ++i) {
    const float v = std::fabs(element(t, i));
    if (std::isfinite(v)) a = std::max(a, v);
  }
  return a;
}

std::string floats(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s += le_bytes(v);
  return s;
}

}  // namespace

TEST_CASE("real files from the reference writers parse with their documented contents", "[tensor_file]") {
  const std::string dir = fp8scope::testing::shared_testdata();
  INFO("the reference writers' files: " << dir << " (../shared/testdata/real beside the checkout)");
  REQUIRE(std::filesystem::is_directory(dir));
  SECTION("safetensors.torch, all dtypes, with metadata") {
    auto f = read_tensor_file(dir + "/st_fluxml_torch_alldtypes_meta.safetensors");
    REQUIRE(f.ok());
    CHECK(f.value().tensors().size() == 36);
    int analyzable = 0;
    for (const FileTensor& t : f.value().tensors()) analyzable += t.dtype.has_value();
    CHECK(analyzable == 18);  // F8_E4M3, F8_E5M2, BF16, F16, F32, F64 x 3 shapes
    const FileTensor* e4m3 = f.value().find("float8_e4m3fn_357");
    REQUIRE(e4m3 != nullptr);
    CHECK(e4m3->shape == std::vector<std::int64_t>{3, 5, 7});
    CHECK(amax(*e4m3) == 2.25f);
    CHECK(e4m3->bytes[79] == 0x81);
    CHECK(element(*e4m3, 79) == -0x1p-9f);  // the one subnormal
    CHECK(amax(*f.value().find("bfloat16_357")) == 2.859375f);
    CHECK(amax(*f.value().find("float8_e5m2_357")) == 3.0f);
    CHECK(amax(*f.value().find("float16_357")) == Approx(2.9668).epsilon(1e-4));
    CHECK(f.value().find("int64_35")->skip_reason == "integer tensor");
    CHECK(f.value().find("bool_3")->skip_reason == "boolean tensor");
  }
  SECTION("a shard with a padded header") {
    auto f = read_tensor_file(dir + "/st_fluxml_torch_shard_bf16_f8.safetensors");
    REQUIRE(f.ok());
    REQUIRE(f.value().tensors().size() == 3);
    CHECK(f.value().tensors()[0].name == "bfloat16_357");  // header order is kept
    int zeros = 0;
    for (std::size_t i = 0; i < 105; ++i) zeros += element(f.value().tensors()[0], i) == 0.0f;
    CHECK(zeros == 2);
  }
  SECTION("safetensors.numpy arange values, with an unaligned old header") {
    auto f = read_tensor_file(dir + "/st_fluxml_numpy_arange.safetensors");
    REQUIRE(f.ok());
    CHECK(amax(*f.value().find("float32_357")) == 104.0f);
    CHECK(amax(*f.value().find("float64_35")) == 14.0f);
    auto old = read_tensor_file(dir + "/st_hf_pr84_overall_unaligned.safetensors");
    REQUIRE(old.ok());
    const FileTensor* e = old.value().find("e");
    REQUIRE(e != nullptr);
    CHECK(*e->dtype == DType::kF16);
    for (std::size_t i = 0; i < 6; ++i) CHECK(element(*e, i) == static_cast<float>(static_cast<int>(i) - 3));
  }
  SECTION("a real PyTorch state_dict with a 0-d integer") {
    auto f = read_tensor_file(dir + "/st_burn_torch_multilayer_f32.safetensors");
    REQUIRE(f.ok());
    const FileTensor* n = f.value().find("norm1.num_batches_tracked");
    REQUIRE(n != nullptr);
    CHECK(n->shape.empty());
    CHECK(n->numel() == 1);
    CHECK(!n->dtype);
    CHECK(amax(*f.value().find("fc1.weight")) == Approx(0.0624892).epsilon(1e-6));
    CHECK(f.value().find("fc1.weight")->view().rows == 16);
    CHECK(f.value().find("fc1.weight")->view().cols == 256);
  }
  SECTION("np.save files: 2-D, 5-D, 0-d, NaN/Inf and Fortran order") {
    auto f32 = read_tensor_file(dir + "/npy_npyjs_f32_65x65.npy");
    REQUIRE(f32.ok());
    CHECK(f32.value().tensors()[0].name == "npy_npyjs_f32_65x65");
    CHECK(amax(f32.value().tensors()[0]) == 254.0f);
    auto f16 = read_tensor_file(dir + "/npy_npyjs_f16_4x4x4x4x4.npy");
    REQUIRE(f16.ok());
    CHECK(f16.value().tensors()[0].numel() == 1024);
    CHECK(amax(f16.value().tensors()[0]) == 254.0f);
    auto scalar = read_tensor_file(dir + "/npy_npyio_f32_scalar.npy");
    REQUIRE(scalar.ok());
    CHECK(scalar.value().tensors()[0].shape.empty());
    CHECK(element(scalar.value().tensors()[0], 0) == 42.0f);
    auto nan_inf = read_tensor_file(dir + "/npy_npyio_f64_nan_inf.npy");
    REQUIRE(nan_inf.ok());
    CHECK(std::isnan(element(nan_inf.value().tensors()[0], 0)));
    CHECK(element(nan_inf.value().tensors()[0], 1) == -INFINITY);
    auto fortran = read_tensor_file(dir + "/npy_npyio_f32_2x3_fortran.npy");
    REQUIRE(fortran.ok());
    const FileTensor& t = fortran.value().tensors()[0];
    for (std::size_t i = 0; i < 6; ++i) CHECK(element(t, i) == std::vector<float>{0, 2, 4, 1, 3, 5}[i]);  // C order
  }
}

TEST_CASE("every safetensors dtype's bits are its float format's and its element type's", "[tensor_file]") {
  for (const fp8scope::tensorfile::SafetensorsDtype& d : fp8scope::tensorfile::safetensors_dtypes()) {
    INFO(d.name);
    if (d.codes != nullptr) CHECK(fp8scope::code_bits(*d.codes) == d.bits);
    if (d.dtype) CHECK(fp8scope::dtype_bits(*d.dtype) == d.bits);
    CHECK((d.dtype.has_value() == (std::string(d.skip_reason).empty())));
  }
  CHECK(fp8scope::tensorfile::find_safetensors_dtype("F8_E4M3FNUZ")->codes == &fp8scope::kE4M3Fnuz);
}

TEST_CASE(".npy variants np.save and ml_dtypes write", "[tensor_file]") {
  TempDir dir;
  SECTION("bfloat16 bits as '<V2' or '<u2' need --dtype bf16") {
    const std::string data = le_bytes(std::uint16_t{0x3FC0}) + le_bytes(std::uint16_t{0xC000});  // 1.5, -2
    for (const char* descr : {"<V2", "<u2"}) {
      const std::string path = dir.write("bf16.npy", npy_file(descr, false, "(2,)", data));
      auto raw = read_tensor_file(path);
      REQUIRE(raw.ok());
      CHECK(!raw.value().tensors()[0].dtype);
      CHECK(raw.value().tensors()[0].skip_reason.find("--dtype bf16") != std::string::npos);
      ReadOptions options;
      options.npy_raw_dtype = DType::kBF16;
      auto bf16 = read_tensor_file(path, options);
      REQUIRE(bf16.ok());
      CHECK(element(bf16.value().tensors()[0], 1) == -2.0f);
    }
  }
  SECTION("packed FP4 codes as '|u1' with --dtype e2m1: two a byte, the last dimension doubled") {
    const std::string data = {static_cast<char>(0x72), static_cast<char>(0xF8)};  // 1, 6 | -0, -6
    ReadOptions options;
    options.npy_raw_dtype = DType::kE2M1;
    auto f = read_tensor_file(dir.write("fp4.npy", npy_file("|u1", false, "(1, 2)", data)), options);
    REQUIRE(f.ok());
    const FileTensor& t = f.value().tensors()[0];
    CHECK(t.shape == std::vector<std::int64_t>{1, 4});
    CHECK(element(t, 0) == 1.0f);
    CHECK(element(t, 1) == 6.0f);
    CHECK(element(t, 3) == -6.0f);
    CHECK(!read_tensor_file(dir.write("fp4f.npy", npy_file("|u1", true, "(2, 2)", data + data)), options).ok());
  }
  SECTION("big-endian floats are byte-swapped") {
    std::string data = floats({1.25f, -3.0f});
    for (std::size_t i = 0; i < data.size(); i += 4) std::reverse(data.begin() + i, data.begin() + i + 4);
    auto f = read_tensor_file(dir.write("be.npy", npy_file(">f4", false, "(2,)", data)));
    REQUIRE(f.ok());
    CHECK(element(f.value().tensors()[0], 0) == 1.25f);
    CHECK(element(f.value().tensors()[0], 1) == -3.0f);
  }
  SECTION("a version 2.0 header") {
    std::string v1 = npy_file("<f4", false, "(1,)", floats({7.0f}));
    const std::string dict = v1.substr(10, v1.size() - 14);
    const std::string v2 = std::string("\x93NUMPY\x02\x00", 8) + le_bytes(static_cast<std::uint32_t>(dict.size())) +
                           dict + floats({7.0f});
    auto f = read_tensor_file(dir.write("v2.npy", v2));
    REQUIRE(f.ok());
    CHECK(element(f.value().tensors()[0], 0) == 7.0f);
  }
}

TEST_CASE("malformed files are refused with the file and the problem", "[tensor_file]") {
  TempDir dir;
  auto error_for = [&](const std::string& name, const std::string& bytes) {
    const std::string path = dir.write(name, bytes);
    auto f = read_tensor_file(path);
    REQUIRE(!f.ok());
    CHECK(f.message().rfind(path + ": ", 0) == 0);
    return f.message();
  };
  const std::string good_npy = npy_file("<f4", false, "(2, 2)", floats({1, 2, 3, 4}));
  CHECK(error_for("empty.npy", "").find("empty file") != std::string::npos);
  CHECK(error_for("junk.bin", "hello, this is not a tensor").find("neither a .npy file") != std::string::npos);
  CHECK(error_for("short.npy", good_npy.substr(0, good_npy.size() - 3)).find("truncated: shape x dtype is 16 bytes") !=
        std::string::npos);
  CHECK(error_for("long.npy", good_npy + "xx").find("trailing bytes") != std::string::npos);
  CHECK(error_for("header.npy", good_npy.substr(0, 40)).find("truncated .npy header") != std::string::npos);
  CHECK(error_for("dict.npy", npy_file("<f4", false, "[2, 2]", floats({1, 2, 3, 4}))).find("'shape'") !=
        std::string::npos);
  CHECK(error_for("version.npy", std::string("\x93NUMPY\x07\x00", 8) + "xx").find("version 1, 2 or 3, got 7") !=
        std::string::npos);
  CHECK(error_for("descr.npy", npy_file("<f", false, "(1,)", "")).find("cannot read element type") !=
        std::string::npos);

  const std::string entry = R"("w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  CHECK(error_for("huge.safetensors", le_bytes(std::uint64_t{1} << 40) + "{}").find("exceeds 100 MB") !=
        std::string::npos);
  CHECK(error_for("cut.safetensors", le_bytes(std::uint64_t{500}) + "{\"w\"").find("truncated: the header size says 500") !=
        std::string::npos);
  CHECK(error_for("json.safetensors", safetensors_file("{\"w\": [1,", "")).find("not valid JSON") != std::string::npos);
  CHECK(error_for("range.safetensors", safetensors_file("{" + entry + "}", floats({1}))).find("outside the 4-byte") !=
        std::string::npos);
  CHECK(error_for("size.safetensors",
                  safetensors_file(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", floats({1, 2})))
            .find("shape x dtype is 12 bytes, data_offsets span 8") != std::string::npos);
  CHECK(error_for("dtype.safetensors",
                  safetensors_file(R"({"w": {"dtype": "Q4_K", "shape": [1], "data_offsets": [0, 1]}})", "x"))
            .find("unsupported dtype Q4_K") != std::string::npos);
  CHECK(error_for("fields.safetensors", safetensors_file(R"({"w": {"dtype": "F32"}})", "")).find("needs dtype") !=
        std::string::npos);
  CHECK(error_for("neg.safetensors",
                  safetensors_file(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", ""))
            .find("not a count") != std::string::npos);
}

TEST_CASE("a well-formed safetensors file built here reads back", "[tensor_file]") {
  TempDir dir;
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "b": {"dtype": "BF16", "shape": [], "data_offsets": [8, 10]},)"
      R"( "a": {"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 8]}, "z": {"dtype": "F16", "shape": [0, 4], "data_offsets": [10, 10]}})";
  auto f = read_tensor_file(dir.write("t.safetensors", safetensors_file(header, floats({1, -2}) + le_bytes(std::uint16_t{0x4040}))));
  REQUIRE(f.ok());
  REQUIRE(f.value().tensors().size() == 3);
  CHECK(f.value().tensors()[0].name == "b");
  CHECK(element(f.value().tensors()[0], 0) == 3.0f);
  CHECK(f.value().find("a")->view().rows == 2);
  CHECK(f.value().find("z")->numel() == 0);
  // F4: float4_e2m1fn two a byte, the shape logical.
  auto fp4 = read_tensor_file(dir.write(
      "fp4.safetensors", safetensors_file(R"({"q": {"dtype": "F4", "shape": [2, 2], "data_offsets": [0, 2]}})",
                                          std::string{static_cast<char>(0x72), static_cast<char>(0x0F)})));
  REQUIRE(fp4.ok());
  CHECK(fp4.value().tensors()[0].dtype == DType::kE2M1);
  CHECK(element(fp4.value().tensors()[0], 1) == 6.0f);
  CHECK(element(fp4.value().tensors()[0], 2) == -6.0f);
}
