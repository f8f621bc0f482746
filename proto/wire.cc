#include "fp8scope/wire/wire.h"

namespace fp8scope::wire {
namespace {

// The plain C++ enums (wire_enums.h) against the generated ones: one spelling, checked.
#define FP8SCOPE_SAME(ours, theirs) \
  static_assert(static_cast<int>(ours) == static_cast<int>(theirs), #ours " must equal " #theirs)
FP8SCOPE_SAME(DType::kF32, v1::DTYPE_F32);
FP8SCOPE_SAME(DType::kBF16, v1::DTYPE_BF16);
FP8SCOPE_SAME(DType::kF16, v1::DTYPE_F16);
FP8SCOPE_SAME(DType::kF64, v1::DTYPE_F64);
FP8SCOPE_SAME(DType::kE4M3, v1::DTYPE_E4M3);
FP8SCOPE_SAME(DType::kE5M2, v1::DTYPE_E5M2);
FP8SCOPE_SAME(DType::kE2M1, v1::DTYPE_E2M1);
FP8SCOPE_SAME(GemmRole::kFprop, v1::GEMM_FPROP);
FP8SCOPE_SAME(GemmRole::kDgrad, v1::GEMM_DGRAD);
FP8SCOPE_SAME(GemmRole::kWgrad, v1::GEMM_WGRAD);
FP8SCOPE_SAME(GemmRole::kUnknown, v1::GEMM_UNKNOWN);
FP8SCOPE_SAME(Operand::kX, v1::OPERAND_X);
FP8SCOPE_SAME(Operand::kW, v1::OPERAND_W);
FP8SCOPE_SAME(Operand::kDy, v1::OPERAND_DY);
FP8SCOPE_SAME(RecipeKind::kTensorCurrent, v1::RECIPE_TENSOR_CURRENT);
FP8SCOPE_SAME(RecipeKind::kTensorDelayed, v1::RECIPE_TENSOR_DELAYED);
FP8SCOPE_SAME(RecipeKind::kMxfp8, v1::RECIPE_MXFP8);
FP8SCOPE_SAME(RecipeKind::kBlock1x128, v1::RECIPE_BLOCK_1X128);
FP8SCOPE_SAME(RecipeKind::kBlock128x128, v1::RECIPE_BLOCK_128X128);
FP8SCOPE_SAME(RecipeKind::kNvfp4, v1::RECIPE_NVFP4);
FP8SCOPE_SAME(RecipeKind::kMxfp4, v1::RECIPE_MXFP4);
FP8SCOPE_SAME(ScaleLayout::kNone, v1::SCALE_MODE_NONE);
FP8SCOPE_SAME(ScaleLayout::kTensorScalar, v1::SCALE_MODE_TENSOR_SCALAR);
FP8SCOPE_SAME(ScaleLayout::kRowVector, v1::SCALE_MODE_ROW_VECTOR);
FP8SCOPE_SAME(ScaleLayout::kVec128F32, v1::SCALE_MODE_VEC128_F32);
FP8SCOPE_SAME(ScaleLayout::kBlock128x128F32, v1::SCALE_MODE_BLOCK128X128_F32);
FP8SCOPE_SAME(ScaleLayout::kVec32Ue8m0, v1::SCALE_MODE_VEC32_UE8M0);
FP8SCOPE_SAME(ScaleLayout::kVec16Ue4m3, v1::SCALE_MODE_VEC16_UE4M3);
#undef FP8SCOPE_SAME

// A wire value as one of ours, when it is one of ours (the generated enums also hold values this
// side does not model, and a peer may send any number).
template <class Ours, class Theirs>
std::optional<Ours> known(Theirs value, std::initializer_list<Ours> ours) {
  for (Ours o : ours) {
    if (static_cast<int>(o) == static_cast<int>(value)) return o;
  }
  return std::nullopt;
}

struct GemmRow {
  v1::Gemm gemm;
  const char* name;
};
constexpr GemmRow kGemms[] = {
    {v1::GEMM_FPROP, "fprop"}, {v1::GEMM_DGRAD, "dgrad"}, {v1::GEMM_WGRAD, "wgrad"}, {v1::GEMM_UNKNOWN, "unknown"}};

}  // namespace

std::optional<DType> from_wire(v1::DType d) {
  return known<DType>(d, {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kE4M3, DType::kE5M2, DType::kE2M1});
}
v1::DType to_wire(DType d) { return static_cast<v1::DType>(d); }

std::optional<RecipeKind> from_wire(v1::Recipe r) {
  for (RecipeKind k : kAllRecipeKinds) {
    if (static_cast<int>(k) == static_cast<int>(r)) return k;
  }
  return std::nullopt;
}
v1::Recipe to_wire(RecipeKind r) { return static_cast<v1::Recipe>(r); }

std::optional<Operand> from_wire(v1::Operand o) { return known<Operand>(o, {Operand::kX, Operand::kW, Operand::kDy}); }
v1::Operand to_wire(Operand o) { return static_cast<v1::Operand>(o); }

std::optional<ScaleLayout> from_wire(v1::ScaleMode m) {
  return known<ScaleLayout>(m, {ScaleLayout::kNone, ScaleLayout::kTensorScalar, ScaleLayout::kRowVector,
                                ScaleLayout::kVec128F32, ScaleLayout::kBlock128x128F32, ScaleLayout::kVec32Ue8m0,
                                ScaleLayout::kVec16Ue4m3});
}
v1::ScaleMode to_wire(ScaleLayout l) { return static_cast<v1::ScaleMode>(l); }

std::optional<GemmRole> from_wire(v1::Gemm g) {
  return known<GemmRole>(g, {GemmRole::kFprop, GemmRole::kDgrad, GemmRole::kWgrad, GemmRole::kUnknown});
}
v1::Gemm to_wire(GemmRole g) { return static_cast<v1::Gemm>(g); }

std::uint32_t required_protocol(const v1::TensorHeader& h) {
  const bool protocol_2 = h.dtype() == v1::DTYPE_E2M1 || h.scale_bytes() != 0 ||
                          (h.scale_mode() != v1::SCALE_MODE_UNSPECIFIED && h.scale_mode() != v1::SCALE_MODE_NONE &&
                           h.scale_mode() != v1::SCALE_MODE_TENSOR_SCALAR);
  return protocol_2 ? 2 : 1;
}

const char* gemm_name(v1::Gemm g) {
  for (const auto& row : kGemms) {
    if (row.gemm == g) return row.name;
  }
  return "unknown";
}

std::optional<v1::Gemm> gemm_from_name(std::string_view name) {
  for (const auto& row : kGemms) {
    if (name == row.name) return row.gemm;
  }
  return std::nullopt;
}

const char* operand_label(v1::Operand o) {
  const std::optional<Operand> op = from_wire(o);
  return op ? operand_name(*op) : "unknown";
}

}  // namespace fp8scope::wire
