// fp8scope's history as nvdlfw_inspect's statistics logs, the lines Transformer Engine's debug
// features write (`fp8scope history --format nvdlfw`, `fp8scoped --te-log-dir`), so that tools which parse those logs read
// fp8scope's records unchanged. Every rule is from the source (TE at d0067d0, nvidia-dlfw-inspect at
// dc19d10):
//  - a line: "<asctime> - INFO - <name> \t\t\t\t iteration=%06d \t\t\t\t value=%.4f"
//    (nvdlfw_inspect/logging.py:118, :132), one file per rank,
//    <dir>/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-<rank>.log (:74, :241);
//  - a name: "<layer>_<tensor>_<stat>" (transformer_engine/debug/features/utils/stats_buffer.py:145),
//    the tensor activation, weight or gradient (X, W, Dy), logged once an iteration by the GEMM
//    that quantizes it first (pytorch/debug_quantization.py:29-36: fprop, fprop, dgrad);
//  - the stats of LogTensorStats (cur_amax, dynamic_range in log2 binades, mean, std with Bessel's
//    correction: features/utils/stats_computation.py:210-258) and of LogFp8TensorStats, prefixed
//    by the recipe they are a what-if of (log_fp8_tensor_stats.py:36-52: fp8_current_scaling,
//    fp8_delayed_scaling, mxfp8, fp8_block_scaling) or bare for the job's own quantization:
//    underflows% (percent of all elements, stats_computation.py:317-330), mse, overflows% for
//    delayed scaling only, scale_inv_min/_max for per-tensor scales; NVFP4's are prefixed nvfp4_
//    (log_nvfp4_tensor_stats.py:98-100), and only for the job's own NVFP4 cast: TE skips the
//    feature for any other quantizer (:159-184);
//  - max_blockwise_dynamic_range for the block shapes the daemon computed (HistoryRecord::
//    block_ranges), "..._max_over_orientations" for activations and weights (log_tensor_stats.py:140);
//  - a block recipe's stats of the tensor's column-wise copy, "<stat>_columnwise", from the GEMM
//    that reads that copy (log_fp8_tensor_stats.py:165-234; MXFP8 and block scaling only, :204);
//  - LogTensorStats as torch computes them over every element: NaN where the tensor holds a NaN;
//    with an Inf, Inf amax, norms and range, NaN std, and no mean, min or max (their signs are
//    not kept);
//  - a GEMM output's LogTensorStats as TE's "output", "dgrad" or "wgrad" (fprop's, dgrad's, wgrad's:
//    debug_quantization.py:29-36), once a step; none for LayerNormMLP's fc2 dgrad, which TE logs
//    only within fc1's (te_names.h, logged_output);
//  - no line for a figure in the tensor's unit that is only relative (NVFP4 codes from a GEMM alone,
//    HistoryRecord::relative_values): TE writes it in real units, which fp8scope cannot know.
// Given the TE config the job ran, only the stats its features name are written, where they select
// the layer, tensor and step: the lines TE writes for that job.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fp8scope/history/records.h"
#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/te/sampling_config.h"

namespace fp8scope::te {

struct NvdlfwLine {
  std::uint32_t rank = 0;
  std::string text;  // without the newline
};

class NvdlfwLog {
 public:
  NvdlfwLog() = default;
  // Writes only what `config` logs (its patterns were checked when it was read).
  explicit NvdlfwLog(const TeConfig& config);

  // The lines of one record, in history order; none for a record TE would not log (a tensor's
  // later GEMMs, recipes TE has no name for). A name comes once a rank and step, from the first
  // record seen that has it, so one NvdlfwLog reads one stream of records. TE combines a step's
  // feeds of a tensor (microbatches) into that line (stats_buffer.py); fp8scope's is the first's.
  std::vector<NvdlfwLine> lines(const history::HistoryRecord& r);

  // Remembers the names written in the newest `steps` steps of each rank only (0: every step), so
  // a long-lived log (the daemon's) stays bounded; a record of a step forgotten writes its lines
  // again.
  void remember_steps(std::uint64_t steps) { steps_remembered_ = steps; }

  // The file nvdlfw_inspect writes a rank's lines to, below `dir`.
  static std::string file_of(const std::string& dir, std::uint32_t rank);

 private:
  struct Selection {
    TeLoggedStats logged;
    std::optional<LayerPattern> layers, and_layers;
  };
  // The config's entries whose rule selects the record's layer, tensor and step; nothing when the
  // log is not filtered (every stat is written).
  std::optional<std::vector<const TeLoggedStats*>> selecting(const history::HistoryRecord& r) const;
  // The names written at the record's rank and step; a newer step first forgets the steps past
  // steps_remembered_.
  std::set<std::string>& written_at(const history::HistoryRecord& r);

  bool filtered_ = false;
  std::vector<Selection> selections_;
  // The names written, by rank and step.
  std::map<std::uint32_t, std::map<std::uint64_t, std::set<std::string>>> written_;
  std::uint64_t steps_remembered_ = 0;
};

}  // namespace fp8scope::te
