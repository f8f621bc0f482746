// Why a sample never reached the daemon, counted by the hook and the shipper and reported in
// ClientCounters.dropped under these names (the daemon's `client_<name>` drop reasons). A closed
// set: the daemon counts any other key as "other", so a client cannot mint metric series.
#pragma once

#include <cstdint>

#include "fp8scope/vocabulary/term_table.h"

namespace fp8scope {

// id, name (the key on the wire, and so its wire form; the wire number is the row's place).
#define FP8SCOPE_CLIENT_DROPS(ROW)                                                                     \
  ROW(RingFull, "ring_full")                     /* the shipper is behind (or gone): the ring is full */ \
  ROW(StagingFull, "staging_full")               /* no room in the hook's device staging ring */        \
  ROW(Budget, "budget")                          /* the policy's bytes-per-step budget was spent */      \
  ROW(TooLarge, "too_large")                     /* larger than the ring or the staging buffer */        \
  ROW(GraphCapture, "graph_capture")  /* under graph capture, a call the hook cannot record (unseen capture, expert GEMM) */ \
  ROW(UnsupportedDtype, "unsupported_dtype")     /* an operand type the statistics do not cover */       \
  ROW(UnsupportedLayout, "unsupported_layout")   /* a layout order other than row or column major */     \
  ROW(UnreadableBatch, "unreadable_batch")      /* a batched or grouped GEMM this hook cannot read */  \
  ROW(UnsupportedScaleMode, "unsupported_scale_mode") /* a mode this cuBLASLt cannot have set */         \
  ROW(NoContext, "no_context")                   /* no current CUDA context, or not the hook's */        \
  ROW(CudaError, "cuda_error")                   /* a driver call failed; the hook stopped sampling */   \
  ROW(DaemonUnreachable, "daemon_unreachable")   /* the shipper could not reach fp8scoped */             \
  ROW(DaemonRefused, "daemon_refused")           /* the daemon dropped or rejected the sample */         \
  ROW(DaemonTooOld, "daemon_too_old")            /* protocol 2 data for a daemon that reads 1 only */   \
  ROW(GroupedBlockScales, "grouped_block_scales") /* block scales of a pointer-array batch */          \
  ROW(GatherUnavailable, "gather_unavailable")   /* the gather kernel could not be loaded (driver JIT) */ \
  ROW(RuleConflict, "rule_conflict")             /* two sections of a TE config select the layer */     \
  ROW(CastUncovered, "cast_uncovered")  /* an FP8/FP4 operand whose TE cast was not seen: sent without its input */ \
  ROW(CastUnreadable, "cast_unreadable") /* TE's getters refused a cast's tensors: the cast is not captured */     \
  ROW(CastStashFull, "cast_stash_full")  /* no room to keep a cast's input until the GEMM that reads it */ \
  ROW(GraphShared, "graph_shared")  /* a replay of a graph instantiated twice or nested: its recorded copies are shared */ \
  ROW(GraphTableFull, "graph_table_full") /* no slot left in the hook's plan table for a copy recorded at capture */ \
  ROW(OutputUnsupported, "output_unsupported") /* a GEMM output the hook does not copy: an expert GEMM's, or codes */

enum class ClientDrop : std::uint32_t { FP8SCOPE_CLIENT_DROPS(FP8SCOPE_VOCABULARY_ENUMERATOR) };

struct ClientDropTerm {
  ClientDrop value;
  const char* name;
  std::uint32_t wire;
};

inline constexpr ClientDropTerm kClientDrops[] = {
#define FP8SCOPE_ROW(id, name) {ClientDrop::k##id, name, static_cast<std::uint32_t>(ClientDrop::k##id) + 1},
    FP8SCOPE_CLIENT_DROPS(FP8SCOPE_ROW)
#undef FP8SCOPE_ROW
};
static_assert(vocabulary::well_formed(kClientDrops));
inline constexpr std::size_t kClientDropCount = std::size(kClientDrops);

}  // namespace fp8scope
