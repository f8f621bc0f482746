#include "fp8scope/wire/history_rows.h"

#include <cmath>

#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"
#include "fp8scope/wire/wire.h"

namespace fp8scope::wire {

void record_to_wire(const history::HistoryRecord& r, v1::HistoryRow& row) {
  row.set_id(r.id);
  row.set_time(r.time);
  v1::TensorKey* key = row.mutable_key();
  key->set_job(r.job);
  key->set_run(r.run);
  key->set_rank(r.rank);
  key->set_layer(r.layer);
  key->set_gemm(to_wire(r.gemm));
  key->set_operand(to_wire(r.operand));
  row.set_host(r.host);
  row.set_step(r.step);
  row.set_dtype(dtype_name(r.dtype));
  row.set_numel(static_cast<std::uint64_t>(r.numel));
  row.set_recipe(r.caster.name());
  row.set_format(format_name(r.format));
  row.set_scale(r.scale);
  row.set_scale_max(r.scale_max);
  row.set_scale_current(r.scale_current);
  for (std::size_t k = 0; k < statistics().size() && k < r.statistics.size(); ++k) {
    if (!std::isnan(r.statistics[k])) (*row.mutable_statistics())[statistics()[k].key] = r.statistics[k];
  }
  if (r.scale_layout != ScaleLayout::kNone) row.set_scale_mode(to_wire(r.scale_layout));
  row.set_gemm_alpha(r.gemm_alpha);
  row.set_codes_digest(r.codes_digest);
  row.mutable_histogram()->Add(r.histogram.begin(), r.histogram.end());
  row.mutable_scale_histogram()->Add(r.scale_histogram.begin(), r.scale_histogram.end());
  if (r.expert >= 0) row.set_expert(static_cast<std::uint32_t>(r.expert));
  if (r.expert_tokens >= 0) row.set_expert_tokens(static_cast<std::uint64_t>(r.expert_tokens));
  row.set_padding_nonzero(r.padding_nonzero);
  row.set_padding_nonfinite(r.padding_nonfinite);
  row.mutable_outlier_channels()->Add(r.outlier_channels.begin(), r.outlier_channels.end());
  row.set_source(data_source_name(r.source));
  if (r.cast_recipe) row.set_cast_recipe(recipe_name(*r.cast_recipe));
  row.set_relative_values(r.relative_values);
  for (const BlockRangeValue& b : r.block_ranges) {
    v1::BlockDynamicRange* range = row.add_block_ranges();
    range->mutable_shape()->set_block_size(b.spec.block_size);
    range->mutable_shape()->set_dims(b.spec.dims);
    range->set_rowwise(b.rowwise);
    range->set_columnwise(b.columnwise);
  }
}

std::optional<history::HistoryRecord> record_from_wire(const v1::HistoryRow& row) {
  history::HistoryRecord r;
  r.id = row.id();
  r.time = row.time();
  r.job = row.key().job();
  r.run = row.key().run();
  r.host = row.host();
  r.rank = row.key().rank();
  r.step = row.step();
  r.layer = row.key().layer();
  r.gemm = from_wire(row.key().gemm()).value_or(GemmRole::kUnknown);
  r.operand = from_wire(row.key().operand()).value_or(Operand::kX);
  const std::optional<DType> dtype = dtype_from_name(row.dtype());
  const std::optional<Caster> caster = Caster::from_name(row.recipe());
  const std::optional<CastFormat> format = format_from_name(row.format());
  if (!dtype || !caster || !format) return std::nullopt;
  r.dtype = *dtype;
  r.caster = *caster;
  r.format = *format;
  r.numel = static_cast<std::int64_t>(row.numel());
  r.scale = row.scale();
  r.scale_max = row.scale_max();
  r.scale_current = row.scale_current();
  for (const Statistic& s : statistics()) {
    const auto it = row.statistics().find(s.key);
    r.statistics.push_back(it == row.statistics().end() ? std::nan("") : it->second);
  }
  if (row.scale_mode() != v1::SCALE_MODE_UNSPECIFIED) {
    const std::optional<ScaleLayout> layout = from_wire(row.scale_mode());
    if (!layout) return std::nullopt;
    r.scale_layout = *layout;
  }
  r.gemm_alpha = row.gemm_alpha();
  r.codes_digest = row.codes_digest();
  r.histogram.assign(row.histogram().begin(), row.histogram().end());
  r.scale_histogram.assign(row.scale_histogram().begin(), row.scale_histogram().end());
  r.expert = row.has_expert() ? static_cast<std::int64_t>(row.expert()) : -1;
  r.expert_tokens = row.has_expert_tokens() ? static_cast<std::int64_t>(row.expert_tokens()) : -1;
  r.padding_nonzero = row.padding_nonzero();
  r.padding_nonfinite = row.padding_nonfinite();
  r.outlier_channels.assign(row.outlier_channels().begin(), row.outlier_channels().end());
  // A daemon from before sources says none: the job's codes alone, or a high-precision operand.
  const std::optional<DataSource> source = row.source().empty() ? std::nullopt : data_source_from_name(row.source());
  if (!row.source().empty() && !source) return std::nullopt;
  r.source = source.value_or(r.caster.is_job() ? DataSource::kCodes : DataSource::kGemmOperand);
  if (!row.cast_recipe().empty()) {
    r.cast_recipe = recipe_kind_from_name(row.cast_recipe());
    if (!r.cast_recipe) return std::nullopt;
  }
  r.relative_values = row.relative_values();
  for (const v1::BlockDynamicRange& b : row.block_ranges()) {
    r.block_ranges.push_back({{b.shape().block_size(), b.shape().dims()}, b.rowwise(), b.columnwise()});
  }
  return r;
}

void scalar_to_wire(const history::ScalarRecord& s, v1::ScalarRow& row) {
  row.set_time(s.time);
  row.set_job(s.job);
  row.set_run(s.run);
  row.set_host(s.host);
  row.set_rank(s.rank);
  row.set_step(s.step);
  row.set_name(s.name);
  row.set_value(s.value);
}

history::ScalarRecord scalar_from_wire(const v1::ScalarRow& r) {
  return history::ScalarRecord{r.time(), r.job(), r.run(), r.host(), r.rank(), r.step(), r.name(), r.value()};
}

void gemm_output_to_wire(const history::GemmOutputRecord& g, v1::GemmOutputRow& row) {
  row.set_time(g.time);
  row.set_job(g.job);
  row.set_run(g.run);
  row.set_host(g.host);
  row.set_rank(g.rank);
  row.set_step(g.step);
  row.set_layer(g.layer);
  row.set_accumulate(g.accumulate);
  row.set_numel(g.numel);
  row.set_scale_x(g.scale_x);
  row.set_scale_w(g.scale_w);
  row.set_mse(g.mse);
  row.set_cosine(g.cosine);
  row.set_max_rel_error(g.max_rel_error);
}

history::GemmOutputRecord gemm_output_from_wire(const v1::GemmOutputRow& r) {
  return history::GemmOutputRecord{r.time(),    r.job(),   r.run(),        r.host(),  r.rank(),
                                   r.step(),    r.layer(), r.accumulate(), r.numel(), r.scale_x(),
                                   r.scale_w(), r.mse(),   r.cosine(),     r.max_rel_error()};
}

v1::HistoryQuery filter_to_wire(const history::HistoryFilter& f) {
  v1::HistoryQuery q;
  q.set_job(f.job);
  q.set_run(f.run);
  q.set_layer_regex(f.layer_regex);
  if (f.gemm) q.set_gemm(to_wire(*f.gemm));
  if (f.operand) q.set_operand(to_wire(*f.operand));
  if (f.caster) q.set_recipe(f.caster->name());
  q.set_min_step(f.min_step);
  q.set_max_step(f.max_step);
  q.set_limit(f.limit);
  q.set_after_id(f.after_id);
  if (f.expert) q.set_expert(*f.expert);
  return q;
}

Result<history::HistoryFilter> filter_from_wire(const v1::HistoryQuery& q) {
  history::HistoryFilter f;
  f.job = q.job();
  f.run = q.run();
  f.layer_regex = q.layer_regex();
  f.gemm = from_wire(q.gemm());
  f.operand = from_wire(q.operand());
  if (!q.recipe().empty()) {
    f.caster = Caster::from_name(q.recipe());
    if (!f.caster) {
      return Status::error("recipe: expected observed or one of " + recipe_name_list() + ", got '" + q.recipe() + "'");
    }
  }
  f.min_step = q.min_step();
  f.max_step = q.max_step();
  f.limit = q.limit();
  f.after_id = q.after_id();
  if (q.has_expert()) f.expert = q.expert();
  return f;
}

}  // namespace fp8scope::wire
