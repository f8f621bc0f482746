#include "fp8scope/export/tensor_table.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

namespace fp8scope::server {
namespace {

struct SortRule {
  const char* name;
  const char* statistic;
  bool lower_is_worse;
};

constexpr SortRule kSorts[] = {{"underflow", "underflow_ratio", false},
                               {"overflow", "overflow_ratio", false},
                               {"mse", "mse", false},
                               {"cosine", "cosine", true}};

// The value a summary is sorted by; NaN when the recipe or statistic is missing.
double sort_value(const TensorSummary& s, const std::string& statistic, Caster caster) {
  for (const RecipeSummary& r : s.recipes) {
    if (r.caster == caster) return r.statistic(statistic);
  }
  return std::nan("");
}

}  // namespace

double RecipeSummary::statistic(std::string_view key) const {
  for (const auto& [st, value] : statistics) {
    if (key == st->key) return value;
  }
  return std::nan("");
}

void TensorTable::update(TensorSummary summary) {
  std::string key = summary.job + '\x1f' + summary.run + '\x1f' + std::to_string(summary.rank) + '\x1f' +
                    summary.layer + '\x1f' + (summary.expert ? std::to_string(*summary.expert) : "") + '\x1f' +
                    gemm_name(summary.gemm) + '\x1f' + operand_name(summary.operand);
  std::lock_guard<std::mutex> lock(mu_);
  entries_.get_or_insert(key, [] { return TensorSummary(); }) = std::move(summary);
}

Result<TensorTable::Listing> TensorTable::list(const std::string& sort, std::uint32_t top, std::optional<Caster> recipe_in,
                                               std::optional<std::uint32_t> expert) const {
  const SortRule* rule = nullptr;
  for (const SortRule& r : kSorts) {
    if (sort == r.name) rule = &r;
  }
  if (!sort.empty() && rule == nullptr) {
    return Status::error("sort: expected underflow, overflow, mse or cosine, got " + sort);
  }
  const Caster recipe = recipe_in.value_or(Caster::recipe(RecipeKind::kTensorCurrent));
  // Sorted as pointers under the lock, and only what is shown is copied: a listing of every tensor
  // of a large table used to copy them all.
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const TensorSummary*> out;
  out.reserve(entries_.size());
  entries_.for_each([&](const std::string&, const TensorSummary& s) { out.push_back(&s); });
  // Asked for a recipe: only the tensors that have it (FP8 tensors have the job's own only), so
  // --top counts what will be shown.
  if (expert) std::erase_if(out, [&](const TensorSummary* s) { return s->expert != expert; });
  if (recipe_in) {
    std::erase_if(out, [&](const TensorSummary* s) {
      return std::none_of(s->recipes.begin(), s->recipes.end(), [&](const RecipeSummary& r) { return r.caster == *recipe_in; });
    });
  }
  auto key = [](const TensorSummary* s) {
    return std::make_tuple(std::cref(s->job), std::cref(s->run), s->rank, std::cref(s->layer), s->expert, s->gemm,
                           s->operand);
  };
  std::sort(out.begin(), out.end(), [&](const auto* a, const auto* b) { return key(a) < key(b); });
  if (rule != nullptr) {
    // FP8 tensors have no what-if recipes: they sort by what was observed.
    auto value = [&](const TensorSummary* s) {
      double v = sort_value(*s, rule->statistic, recipe);
      if (std::isnan(v)) v = sort_value(*s, rule->statistic, Caster::job());
      return v;
    };
    std::stable_sort(out.begin(), out.end(), [&](const auto* a, const auto* b) {
      const double va = value(a), vb = value(b);
      if (std::isnan(vb)) return !std::isnan(va);
      if (std::isnan(va)) return false;
      return rule->lower_is_worse ? va < vb : va > vb;
    });
  }
  Listing listing;
  listing.total = out.size();
  const std::size_t shown = std::min<std::size_t>(top == 0 ? kMaxListed : std::min(top, kMaxListed), out.size());
  listing.tensors.reserve(shown);
  for (std::size_t i = 0; i < shown; ++i) listing.tensors.push_back(*out[i]);
  return listing;
}

std::size_t TensorTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace fp8scope::server
