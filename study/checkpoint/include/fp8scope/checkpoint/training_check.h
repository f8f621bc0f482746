// The export against what training ended with (`fp8scope checkpoint --run R`): its per-tensor FP8
// weights as an inference run's records, the scale a GEMM multiplies by (1 / the stored
// dequantization scale) and a fingerprint of the codes (code_digest.h), keyed by training's own
// label of the same module (its NVTX name without the "#ordinal"), so insight's inference check
// (inference_check.h) says per weight whether the export is what training produced.
#pragma once

#include <string>
#include <vector>

#include "fp8scope/insight/run_records.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::checkpoint {

struct ExportRun {
  insight::RunRecords records;             // the export's per-tensor FP8 weights, run "export"
  std::vector<std::string> not_compared;   // block-scaled or FP4 weights: no per-tensor fingerprint to hold
};

Result<ExportRun> export_as_run(const std::string& export_path, const insight::RunRecords& training);

}  // namespace fp8scope::checkpoint
