#include "fp8scope/wire/wire.h"

#include <string>

#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope::wire {
namespace {

// A value added to the proto (always at the end: numbers are never reused) without its row, or a
// row without its proto value, fails the build here; wire_vocabulary_test checks every value both
// ways through the descriptors.
static_assert(vocabulary::max_wire(kDTypes) == v1::DType_MAX);
static_assert(vocabulary::max_wire(kGemmRoles) == v1::Gemm_MAX);
static_assert(vocabulary::max_wire(kOperands) == v1::Operand_MAX);
static_assert(vocabulary::max_wire(kRecipeKinds) == v1::Recipe_MAX);
static_assert(vocabulary::max_wire(kScaleLayouts) == v1::ScaleMode_MAX);

template <class Wire, class Row, std::size_t N>
Wire wire_of(const Row (&rows)[N], decltype(Row::value) value) {
  const Row* r = vocabulary::row_of(rows, value);
  return static_cast<Wire>(r != nullptr ? r->wire : 0);
}

template <class Row, std::size_t N>
std::optional<decltype(Row::value)> ours_of(const Row (&rows)[N], int wire) {
  const Row* r = wire > 0 ? vocabulary::row_on_wire(rows, static_cast<std::uint32_t>(wire)) : nullptr;
  return r != nullptr ? std::optional(r->value) : std::nullopt;
}

}  // namespace

v1::DType to_wire(DType d) { return wire_of<v1::DType>(kDTypes, d); }
v1::Gemm to_wire(GemmRole g) { return wire_of<v1::Gemm>(kGemmRoles, g); }
v1::Operand to_wire(Operand o) { return wire_of<v1::Operand>(kOperands, o); }
v1::Recipe to_wire(RecipeKind r) { return wire_of<v1::Recipe>(kRecipeKinds, r); }
v1::ScaleMode to_wire(ScaleLayout l) { return wire_of<v1::ScaleMode>(kScaleLayouts, l); }

std::optional<DType> from_wire(v1::DType d) { return ours_of(kDTypes, d); }
std::optional<GemmRole> from_wire(v1::Gemm g) { return ours_of(kGemmRoles, g); }
std::optional<Operand> from_wire(v1::Operand o) { return ours_of(kOperands, o); }
std::optional<RecipeKind> from_wire(v1::Recipe r) { return ours_of(kRecipeKinds, r); }
std::optional<ScaleLayout> from_wire(v1::ScaleMode m) { return ours_of(kScaleLayouts, m); }

std::uint32_t required_protocol(const v1::TensorHeader& h) {
  const bool block_mode = h.scale_mode() != v1::SCALE_MODE_UNSPECIFIED && h.scale_mode() != to_wire(ScaleLayout::kNone) &&
                          h.scale_mode() != to_wire(ScaleLayout::kTensorScalar);
  const bool protocol_2 = h.dtype() == to_wire(DType::kE2M1) || h.scale_bytes() != 0 || block_mode;
  const bool protocol_3 = h.has_expert() || h.experts() != 0 || h.expert_tokens_size() != 0 || h.valid_rows() != 0;
  return protocol_3 ? 3 : protocol_2 ? 2 : 1;
}

void fold_expert_into_layer(v1::TensorHeader& h) {
  if (h.has_expert()) h.set_layer(h.layer() + ".expert" + std::to_string(h.expert()));
  h.clear_expert();
  h.clear_experts();
  h.clear_expert_tokens();
  h.clear_valid_rows();
}

}  // namespace fp8scope::wire
