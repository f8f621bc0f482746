// Every value of every wire enum maps to one vocabulary row and back, and every row to a wire
// value, read from the generated descriptors: a value the proto gains without its row (or the
// reverse) fails here by name, besides the build's static_asserts on the largest number.
#include <catch2/catch.hpp>
#include <google/protobuf/descriptor.h>

#include <string>

#include "fp8scope/wire/wire.h"

using namespace fp8scope;

namespace {

// The values of a generated enum that fp8scope models (UNSPECIFIED and SCALE_MODE_OTHER excepted).
template <class Check>
void each_modelled_value(const google::protobuf::EnumDescriptor* d, Check check) {
  for (int i = 0; i < d->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* v = d->value(i);
    if (v->number() == 0 || v->name() == "SCALE_MODE_OTHER") continue;
    INFO(v->full_name());
    check(v->number(), v->name());
  }
}

// DTYPE_BF16 -> "bf16": the wire name of a row whose name follows the proto's.
std::string lower_suffix(const std::string& wire_name, const std::string& prefix) {
  std::string s = wire_name.substr(prefix.size());
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

template <class Wire, class Row, std::size_t N>
void both_ways(const Row (&rows)[N], const google::protobuf::EnumDescriptor* d, const char* prefix) {
  std::size_t modelled = 0;
  each_modelled_value(d, [&](int number, const std::string& name) {
    ++modelled;
    const auto ours = wire::from_wire(static_cast<Wire>(number));
    REQUIRE(ours);
    CHECK(wire::to_wire(*ours) == static_cast<Wire>(number));
    if (prefix != nullptr) CHECK(vocabulary::name_of(rows, *ours) == lower_suffix(name, prefix));
  });
  CHECK(modelled == N);
  for (const Row& r : rows) {
    INFO(r.name);
    CHECK(d->FindValueByNumber(static_cast<int>(r.wire)) != nullptr);
    CHECK(wire::from_wire(wire::to_wire(r.value)) == r.value);
  }
  CHECK_FALSE(wire::from_wire(static_cast<Wire>(0)));
  CHECK_FALSE(wire::from_wire(static_cast<Wire>(4242)));
}

}  // namespace

TEST_CASE("every dtype, gemm, operand, recipe, scale mode, cast source and activation maps both ways", "[wire]") {
  both_ways<v1::DType>(kDTypes, v1::DType_descriptor(), "DTYPE_");
  both_ways<v1::Gemm>(kGemmRoles, v1::Gemm_descriptor(), "GEMM_");
  both_ways<v1::Operand>(kOperands, v1::Operand_descriptor(), "OPERAND_");
  both_ways<v1::Recipe>(kRecipeKinds, v1::Recipe_descriptor(), "RECIPE_");
  // Scale layouts are named as cuBLASLt's modes (scalar_32f), the proto by what they hold.
  both_ways<v1::ScaleMode>(kScaleLayouts, v1::ScaleMode_descriptor(), nullptr);
  CHECK_FALSE(wire::from_wire(v1::SCALE_MODE_OTHER));
  both_ways<v1::CastSource>(kCastSources, v1::CastSource_descriptor(), "CAST_SOURCE_");
  both_ways<v1::Activation>(kActivations, v1::Activation_descriptor(), "ACTIVATION_");
}

TEST_CASE("a value with no row goes out as UNSPECIFIED, which the daemon refuses", "[wire]") {
  CHECK(wire::to_wire(static_cast<DType>(200)) == v1::DTYPE_UNSPECIFIED);
  CHECK(wire::to_wire(static_cast<Operand>(77)) == v1::OPERAND_UNSPECIFIED);
}
