#include "columns.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"

namespace fp8scope::history {
namespace {

// Block dynamic ranges as text: "<block_size>x<dims>:<rowwise>:<columnwise>" joined by ";"
// (NaN as "nan"); nothing when the text is not that.
std::string block_ranges_text(const std::vector<BlockRangeValue>& ranges) {
  std::string out;
  char part[96];
  for (const BlockRangeValue& b : ranges) {
    std::snprintf(part, sizeof part, "%s%ux%u:%.17g:%.17g", out.empty() ? "" : ";", b.spec.block_size, b.spec.dims,
                  b.rowwise, b.columnwise);
    out += part;
  }
  return out;
}

std::optional<std::vector<BlockRangeValue>> block_ranges_of(const std::string& text) {
  std::vector<BlockRangeValue> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find(';', at), text.size());
    const std::string part = text.substr(at, end - at);
    BlockRangeValue b;
    char rowwise[40] = {}, columnwise[40] = {};
    int used = 0;
    if (std::sscanf(part.c_str(), "%ux%u:%39[^:]:%39s%n", &b.spec.block_size, &b.spec.dims, rowwise, columnwise, &used) != 4 ||
        static_cast<std::size_t>(used) != part.size() || out.size() == kMaxBlockRanges) {
      return std::nullopt;
    }
    char* tail = nullptr;
    b.rowwise = std::strtod(rowwise, &tail);
    if (*tail != '\0') return std::nullopt;
    b.columnwise = std::strtod(columnwise, &tail);
    if (*tail != '\0') return std::nullopt;
    out.push_back(b);
    at = end + 1;
  }
  return out;
}

// When a value is stored as NULL instead (and what NULL reads back as).
enum class Null { kNever, kEmpty, kNaN, kZero };

template <class R>
Column<R> text(std::string name, std::string R::*field, Null null = Null::kNever) {
  return {std::move(name), SqlType::kText, null == Null::kNever,
          [=](const R& r, FieldSink& s) { null == Null::kEmpty && (r.*field).empty() ? s.null() : s.text(r.*field); },
          [=](const FieldSource& s, R& r) {
            r.*field = s.text();
            return true;
          }};
}

// A vocabulary word stored by its name; a name `from` does not know refuses the row.
template <class R, class V>
Column<R> named(std::string name, V R::*field, const char* (*to)(V), std::optional<V> (*from)(std::string_view)) {
  return {std::move(name), SqlType::kText, true, [=](const R& r, FieldSink& s) { s.text(to(r.*field)); },
          [=](const FieldSource& s, R& r) {
            const std::optional<V> v = from(s.text());
            if (v) r.*field = *v;
            return v.has_value();
          }};
}

template <class R>
Column<R> real(std::string name, double R::*field, Null null = Null::kNever) {
  return {std::move(name), SqlType::kReal, null == Null::kNever,
          [=](const R& r, FieldSink& s) {
            const double v = r.*field;
            (null == Null::kNaN && std::isnan(v)) || (null == Null::kZero && v == 0) ? s.null() : s.real(v);
          },
          [=](const FieldSource& s, R& r) {
            r.*field = null == Null::kZero && s.null() ? 0.0 : s.real();
            return true;
          }};
}

template <class R, class I>
Column<R> integer(std::string name, I R::*field) {
  return {std::move(name), SqlType::kInteger, true,
          [=](const R& r, FieldSink& s) { s.integer(static_cast<std::int64_t>(r.*field)); },
          [=](const FieldSource& s, R& r) {
            // A value the field cannot hold (a rank of -1 or 2^40 from another writer) is no record
            // of ours: converting it would name another rank's file or wrap a count.
            const std::int64_t v = s.integer();
            if (!std::in_range<I>(v)) return false;
            r.*field = static_cast<I>(v);
            return true;
          }};
}

// An integer stored as NULL when it equals `absent` (a record without that fact; a row from before
// the column existed reads back as absent too).
template <class R, class I>
Column<R> optional_integer(std::string name, I R::*field, I absent) {
  return {std::move(name), SqlType::kInteger, false,
          [=](const R& r, FieldSink& s) { r.*field == absent ? s.null() : s.integer(static_cast<std::int64_t>(r.*field)); },
          [=](const FieldSource& s, R& r) {
            if (s.null()) {
              r.*field = absent;
              return true;
            }
            const std::int64_t v = s.integer();
            if (!std::in_range<I>(v)) return false;  // as integer()'s
            r.*field = static_cast<I>(v);
            return true;
          }};
}

template <class R>
Column<R> counts(std::string name, std::vector<std::uint64_t> R::*field) {
  return {std::move(name), SqlType::kCounts, false,
          [=](const R& r, FieldSink& s) { (r.*field).empty() ? s.null() : s.counts(r.*field); },
          [=](const FieldSource& s, R& r) {
            r.*field = s.counts();
            return true;
          }};
}

// Every row's key comes first: when, whose, which step.
template <class R>
std::vector<Column<R>> key_columns() {
  return {real<R>("time", &R::time),      text<R>("job", &R::job),           text<R>("run", &R::run),
          text<R>("host", &R::host),      integer<R>("rank", &R::rank),      integer<R>("step", &R::step)};
}

// What a record's figures come from and how they read: the source, the job's cast recipe, the
// block dynamic ranges, the units.
void add_source_columns(std::vector<Column<HistoryRecord>>& c) {
  using R = HistoryRecord;
  // A row from before the column held the job's codes alone, or a high-precision operand.
  c.push_back({"source", SqlType::kText, false, [](const R& r, FieldSink& s) { s.text(data_source_name(r.source)); },
               [](const FieldSource& s, R& r) {
                 const std::optional<DataSource> v = s.null() ? std::nullopt : data_source_from_name(s.text());
                 r.source = v.value_or(r.caster.is_job() ? DataSource::kCodes : DataSource::kGemmOperand);
                 return s.null() || v.has_value();
               }});
  c.push_back({"cast_recipe", SqlType::kText, false,
               [](const R& r, FieldSink& s) { r.cast_recipe ? s.text(recipe_name(*r.cast_recipe)) : s.null(); },
               [](const FieldSource& s, R& r) {
                 r.cast_recipe = s.null() ? std::nullopt : recipe_kind_from_name(s.text());
                 return s.null() || r.cast_recipe.has_value();
               }});
  c.push_back({"block_dynamic_ranges", SqlType::kText, false,
               [](const R& r, FieldSink& s) { r.block_ranges.empty() ? s.null() : s.text(block_ranges_text(r.block_ranges)); },
               [](const FieldSource& s, R& r) {
                 if (s.null()) return true;
                 std::optional<std::vector<BlockRangeValue>> v = block_ranges_of(s.text());
                 if (v) r.block_ranges = std::move(*v);
                 return v.has_value();
               }});
  // "relative" when relative_values; a row from before the column was in the tensor's units.
  c.push_back({"value_units", SqlType::kText, false,
               [](const R& r, FieldSink& s) { r.relative_values ? s.text("relative") : s.null(); },
               [](const FieldSource& s, R& r) {
                 r.relative_values = !s.null() && s.text() == "relative";
                 return s.null() || r.relative_values;
               }});
}

// One column a statistic, in statistics() order.
void add_statistic_columns(std::vector<Column<HistoryRecord>>& c) {
  using R = HistoryRecord;
  const std::size_t n = statistics().size();
  for (std::size_t k = 0; k < n; ++k) {
    c.push_back({std::string("stat_") + statistics()[k].key, SqlType::kReal, false,
                 [k](const R& r, FieldSink& s) {
                   const double v = k < r.statistics.size() ? r.statistics[k] : std::nan("");
                   std::isnan(v) ? s.null() : s.real(v);
                 },
                 [k, n](const FieldSource& s, R& r) {
                   r.statistics.resize(n, std::nan(""));
                   r.statistics[k] = s.real();
                   return true;
                 }});
  }
}

std::vector<Column<HistoryRecord>> make_record_columns() {
  using R = HistoryRecord;
  std::vector<Column<R>> c = key_columns<R>();
  c.push_back(text<R>("layer", &R::layer));
  c.push_back({"gemm", SqlType::kText, true, [](const R& r, FieldSink& s) { s.text(gemm_name(r.gemm)); },
               [](const FieldSource& s, R& r) {
                 r.gemm = gemm_from_name(s.text()).value_or(GemmRole::kUnknown);
                 return true;
               }});
  // A SQLite file from before schema version 2 keeps GEMM checks among the records (operand "y"):
  // not a record this build reads.
  c.push_back({"operand", SqlType::kText, true, [](const R& r, FieldSink& s) { s.text(operand_name(r.operand)); },
               [](const FieldSource& s, R& r) {
                 const std::optional<Operand> op = operand_from_name(s.text());
                 r.operand = op.value_or(Operand::kX);
                 return op.has_value();
               }});
  // The vocabulary's words, stored by name; a row naming one this build does not know is refused.
  c.push_back(named<R, DType>("dtype", &R::dtype, dtype_name, dtype_from_name));
  c.push_back(integer<R>("numel", &R::numel));
  c.push_back(named<R, Caster>("recipe", &R::caster, [](Caster k) { return k.name(); }, Caster::from_name));
  c.push_back(named<R, CastFormat>("format", &R::format, format_name, format_from_name));
  c.push_back(real<R>("scale", &R::scale, Null::kNaN));
  c.push_back(real<R>("scale_max", &R::scale_max, Null::kNaN));
  c.push_back(real<R>("scale_current", &R::scale_current, Null::kNaN));
  c.push_back(counts<R>("histogram", &R::histogram));
  c.push_back(text<R>("codes_digest", &R::codes_digest, Null::kEmpty));
  c.push_back({"scale_layout", SqlType::kText, false,
               [](const R& r, FieldSink& s) { r.scale_layout == ScaleLayout::kNone ? s.null() : s.text(scale_layout_name(r.scale_layout)); },
               [](const FieldSource& s, R& r) {
                 const ScaleLayoutTerm* info = s.null() ? nullptr : scale_layout_from_name(s.text());
                 r.scale_layout = info != nullptr ? info->value : ScaleLayout::kNone;
                 return s.null() || info != nullptr;
               }});
  c.push_back(real<R>("gemm_alpha", &R::gemm_alpha, Null::kZero));
  c.push_back(counts<R>("scale_histogram", &R::scale_histogram));
  c.push_back(optional_integer<R, std::int64_t>("expert", &R::expert, -1));
  c.push_back(optional_integer<R, std::int64_t>("expert_tokens", &R::expert_tokens, -1));
  c.push_back(optional_integer<R, std::uint64_t>("padding_nonzero", &R::padding_nonzero, 0));
  c.push_back(optional_integer<R, std::uint64_t>("padding_nonfinite", &R::padding_nonfinite, 0));
  c.push_back(counts<R>("outlier_channels", &R::outlier_channels));
  add_source_columns(c);
  add_statistic_columns(c);
  return c;
}

std::vector<Column<GemmOutputRecord>> make_gemm_output_columns() {
  using R = GemmOutputRecord;
  std::vector<Column<R>> c = key_columns<R>();
  c.push_back(text<R>("layer", &R::layer));
  c.push_back(text<R>("accumulate", &R::accumulate));
  c.push_back(integer<R>("numel", &R::numel));
  for (auto [name, field] : {std::pair{"scale_x", &R::scale_x}, {"scale_w", &R::scale_w}, {"mse", &R::mse},
                             {"cosine", &R::cosine}, {"max_rel_error", &R::max_rel_error}}) {
    c.push_back(real<R>(name, field, Null::kNaN));
  }
  return c;
}

std::vector<Column<ScalarRecord>> make_scalar_columns() {
  using R = ScalarRecord;
  std::vector<Column<R>> c = key_columns<R>();
  c.push_back(text<R>("name", &R::name));
  c.push_back(real<R>("value", &R::value, Null::kNaN));
  return c;
}

}  // namespace

const std::vector<Column<HistoryRecord>>& record_columns() {
  static const std::vector<Column<HistoryRecord>> c = make_record_columns();
  return c;
}
const std::vector<Column<GemmOutputRecord>>& gemm_output_columns() {
  static const std::vector<Column<GemmOutputRecord>> c = make_gemm_output_columns();
  return c;
}
const std::vector<Column<ScalarRecord>>& scalar_columns() {
  static const std::vector<Column<ScalarRecord>> c = make_scalar_columns();
  return c;
}

}  // namespace fp8scope::history
