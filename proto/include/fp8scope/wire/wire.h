// The wire contract's enums (proto/fp8scope/v1) against the vocabulary's: every conversion goes
// through the vocabulary's tables (a row's wire number), none by casting, so a value either has a
// row or is refused. Protocol versions and chunk sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fp8scope/v1/fp8scope.pb.h"
#include "fp8scope/vocabulary/cast_capture.h"
#include "fp8scope/vocabulary/dtype.h"
#include "fp8scope/vocabulary/gemm_role.h"
#include "fp8scope/vocabulary/operand.h"
#include "fp8scope/vocabulary/recipe_kind.h"
#include "fp8scope/vocabulary/scale_layout.h"
#include "fp8scope/wire/sampling_rule.h"

namespace fp8scope::wire {

// Protocol 1: FP8 with per-tensor scales. Protocol 2 adds FP4 codes, scale tensors in the
// payload (TensorHeader fields 12-15) and the FP4 recipes. Protocol 3 adds experts (fields 16-19),
// protocol 4 the cast that wrote a sample's codes (field 20). A daemon reads all; a client learns
// from Welcome which it may send.
inline constexpr std::uint32_t kProtocolVersion = 4;
inline constexpr std::uint32_t kOldestProtocolVersion = 1;
inline constexpr std::uint64_t kMaxChunkBytes = 4u << 20;  // the protocol's largest chunk
// What fp8scoped asks for in Welcome: gRPC holds about a chunk and a flow-control window per
// sending stream, so smaller chunks bound the daemon's memory; 1 MiB is as fast as 4 on loopback.
inline constexpr std::uint64_t kDaemonChunkBytes = 1u << 20;

// Ours to the wire's: UNSPECIFIED for a value no row has.
v1::DType to_wire(DType d);
v1::Gemm to_wire(GemmRole g);
v1::Operand to_wire(Operand o);
v1::Recipe to_wire(RecipeKind r);
v1::ScaleMode to_wire(ScaleLayout l);
v1::CastSource to_wire(CastSource s);
v1::Activation to_wire(Activation a);

// The wire's to ours: nothing for UNSPECIFIED, for values this side does not model
// (SCALE_MODE_OTHER) and for any number a peer may send.
std::optional<DType> from_wire(v1::DType d);
std::optional<GemmRole> from_wire(v1::Gemm g);
std::optional<Operand> from_wire(v1::Operand o);
std::optional<RecipeKind> from_wire(v1::Recipe r);
std::optional<ScaleLayout> from_wire(v1::ScaleMode m);
std::optional<CastSource> from_wire(v1::CastSource s);
std::optional<Activation> from_wire(v1::Activation a);

// A policy's rule on the wire and back. From the wire: an error names what is wrong (bounds,
// unknown tensors, a pattern that does not compile).
v1::SamplingRule to_wire(const SamplingRule& rule);
std::optional<SamplingRule> from_wire(const v1::SamplingRule& rule, std::string* error);

// What one feature of a TE config logs for one tensor (Policy.te_logged), added to `policy`.
void add_logged_stats(v1::Policy& policy, const SamplingRule& rule, const std::string& feature, Operand operand,
                      const std::vector<std::string>& stats);

// The oldest protocol that can carry this sample: 4 for one with its cast, 3 for an expert's, 2 for
// FP4 codes or a scale tensor, else 1.
std::uint32_t required_protocol(const v1::TensorHeader& header);

// A cast sample for a daemon that reads protocol 3 at most: its cast part left out of the header and
// of the payload (which then ends before it), so the codes still arrive, as a GEMM sample.
void strip_cast(v1::TensorHeader& header);

// An expert's sample for a daemon that reads protocol 2 at most: the expert folded into the layer
// ("<layer>.expert<N>") and the expert fields cleared, so its experts stay apart there too.
void fold_expert_into_layer(v1::TensorHeader& header);

}  // namespace fp8scope::wire
