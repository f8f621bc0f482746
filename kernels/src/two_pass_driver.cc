#include "fp8scope/kernels/two_pass_driver.h"

#include <algorithm>

namespace fp8scope {

AnalysisPlan plan_analysis(const TensorView& t, std::span<const QuantSpec> specs, RowBlocks row_blocks) {
  AnalysisPlan plan;
  plan.channels = t.channels;
  if (t.channels != ChannelAxis::kNone) plan.channel_count = t.channels == ChannelAxis::kColumns ? t.cols : t.rows;
  for (const QuantSpec& spec : specs) {
    SpecPlan p;
    p.spec = spec;
    if (spec.per_block()) {
      p.blocks_per_row = ceil_div(t.cols, spec.block_cols);
      p.block_count = ceil_div(t.rows, spec.block_rows) * p.blocks_per_row;
      p.tabled = spec.block_rows > 1 || row_blocks == RowBlocks::kTabled;
      plan.tallest_block = std::max<std::int64_t>(plan.tallest_block, spec.block_rows);
      plan.row_amax = plan.row_amax || spec.row_scaled;
    }
    if (p.tabled) {
      p.table_offset = plan.table_floats;
      plan.table_floats += 3 * static_cast<std::size_t>(p.block_count);
    }
    plan.specs.push_back(p);
  }
  return plan;
}

namespace {

// The rules once the tensor's TE amax is known: every block spec's, and each per-tensor spec's one
// scale (a fixed one as given, a current one from the amax).
void derive_scales(AnalysisPlan& plan, float te_amax) {
  for (SpecPlan& p : plan.specs) {
    p.rule = block_rule_for(p.spec, te_amax);
    if (p.spec.rule == ScaleRule::kTensorFixed) p.tensor_scale = {p.spec.fixed_scale, 1.0f / p.spec.fixed_scale};
    if (p.spec.rule == ScaleRule::kTensorCurrent) p.tensor_scale = current_block_scale(p.rule, spec_amax(p.spec, te_amax));
  }
}

}  // namespace

Status run_two_passes(TwoPassBackend& backend, const TensorView& t, std::span<const QuantSpec> specs,
                      TensorAnalysis* out) {
  if (Status s = check_analysis_request(t, specs); !s.ok()) return s;
  AnalysisPlan plan = plan_analysis(t, specs, backend.row_blocks());
  out->moments = TensorMoments{};
  out->channel_amax.assign(static_cast<std::size_t>(plan.channel_count), 0.0f);
  if (Status s = backend.first_pass(t, plan, &out->moments, out->channel_amax); !s.ok()) return s;
  out->te_amax = te_amax(out->moments.amax, out->moments.inf > 0);
  derive_scales(plan, out->te_amax);
  if (plan.table_floats > 0) {
    if (Status s = backend.block_scales(plan); !s.ok()) return s;
  }
  out->quant.assign(specs.size(), QuantStats{});
  if (specs.empty()) return Status();
  if (Status s = backend.second_pass(t, plan, &out->quant); !s.ok()) return s;
  for (std::size_t k = 0; k < plan.specs.size(); ++k) {
    const SpecPlan& p = plan.specs[k];
    QuantStats& q = out->quant[k];
    if (!p.per_block()) {
      q.scale_min = q.scale_max = p.tensor_scale.scale;
    } else if (p.tabled) {
      Result<std::span<const float>> scales = backend.table_scales(plan, k);
      if (!scales.ok()) return scales.status();
      q.scale_min = kFloatMax;
      q.scale_max = 0.0f;
      for (float s : scales.value()) {
        q.scale_min = std::min(q.scale_min, s);
        q.scale_max = std::max(q.scale_max, s);
      }
    }
  }
  return Status();
}

}  // namespace fp8scope
