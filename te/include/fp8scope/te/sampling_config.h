// A Transformer Engine debug-API config (debug_config.h) as sampling rules: `fp8scope run
// --te-config` and `policy set --te-config`. Every rule is from the source (nvidia-dlfw-inspect
// dc19d10, TE d0067d0):
//  - every section has `enabled` (required) and, when enabled, `layers` and features: under
//    `transformer_engine:` TE's, directly under the section nvdlfw's own LogTensorStats
//    (nvdlfw_inspect/config_manager.py:186-222);
//  - layers: exact_layer_names decides alone, else layer_name_regex_pattern (re.search) alone,
//    else layer_types (substrings; "all") and layer_numbers (the one number findall(r"(?<!fc)\d+")
//    finds; "a-b" inclusive; "all") together (config_manager.py:58-122, 250-304);
//  - tensors_struct's first item for a tensor overrides the feature's fields, else `tensors`
//    (nvdlfw_inspect/base.py:32-58); TE's features read tensors only, never gemms;
//  - steps: TE's features run where it % freq == 0 and start_step <= it <= end_step, or inside an
//    inclusive [s, e] of start_end_list (TE debug/features/utils/__init__.py:36-68; end_step -1
//    never runs); nvdlfw's own LogTensorStats has exclusive start_end_list ends and end_step -1
//    for no end (nvdlfw_inspect/logging.py:192-216);
//  - stats: LogTensorStats (log_tensor_stats.py:102-125), LogFp8TensorStats'
//    [<recipe>_]<stat>[_columnwise] (log_fp8_tensor_stats.py:36, 165-234), LogNvfp4TensorStats'
//    underflows% and mse (log_nvfp4_tensor_stats.py:86-100).
// A section becomes rules of one group (a layer two sections select is sampled by neither, as
// nvdlfw_inspect refuses it); each feature and tensor a rule, rules that differ only in tensors
// merged. What fp8scope does not do is listed with the reason, and the rest applies.
#pragma once

#include <string>
#include <vector>

#include "fp8scope/kernels/block_dynamic_range.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/te/debug_config.h"
#include "fp8scope/te/te_names.h"
#include "fp8scope/vocabulary/recipe_kind.h"
#include "fp8scope/wire/sampling_rule.h"

namespace fp8scope::te {

struct TeConfigRule {
  SamplingRule rule;
  std::string source;  // "config.yaml:12 log_fc1 LogFp8TensorStats activation"
};

// What one feature logs for one tensor: the stats it names, as the config writes them
// ("underflows%", "mxfp8_mse", "mxfp8_underflows%_columnwise", "cur_amax"), where its rule (one
// tensor's, before rules are merged) selects the layer and step.
struct TeLoggedStats {
  SamplingRule rule;
  FeatureRole feature = FeatureRole::kLogTensorStats;
  Operand operand = Operand::kX;
  std::vector<std::string> stats;
};

struct TeConfig {
  std::vector<TeConfigRule> rules;
  std::vector<TeLoggedStats> logged;
  std::vector<RecipeKind> recipes;       // the what-ifs the stats name; empty when they name none
  std::vector<BlockRange> block_ranges;  // max_blockwise_dynamic_range's block shapes, for the daemon
  std::vector<std::string> not_applied;  // "config.yaml:14: log_fc1: FakeQuant changes the run: not applied"
};

// The rules of a config; an error names the file, line and key.
Result<TeConfig> sampling_config(const DebugConfig& config);
// read_debug_config, then sampling_config.
Result<TeConfig> read_te_config(const std::string& path);

}  // namespace fp8scope::te
