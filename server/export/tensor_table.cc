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
double sort_value(const v1::TensorSummary& s, const std::string& statistic, const std::string& recipe) {
  for (const v1::RecipeStats& r : s.recipes()) {
    if (r.recipe() != recipe) continue;
    auto it = r.statistics().find(statistic);
    return it == r.statistics().end() ? std::nan("") : it->second;
  }
  return std::nan("");
}

}  // namespace

void TensorTable::update(const v1::TensorSummary& summary) {
  const v1::TensorKey& k = summary.key();
  std::string key = k.job() + '\x1f' + k.run() + '\x1f' + std::to_string(k.rank()) + '\x1f' + k.layer() + '\x1f' +
                    std::to_string(k.gemm()) + '\x1f' + std::to_string(k.operand());
  std::lock_guard<std::mutex> lock(mu_);
  entries_.get_or_insert(key, [] { return v1::TensorSummary(); }) = summary;
}

Result<TensorTable::Listing> TensorTable::list(const std::string& sort, std::uint32_t top,
                                               const std::string& recipe_in) const {
  const SortRule* rule = nullptr;
  for (const SortRule& r : kSorts) {
    if (sort == r.name) rule = &r;
  }
  if (!sort.empty() && rule == nullptr) {
    return Status::error("sort: expected underflow, overflow, mse or cosine, got " + sort);
  }
  const std::string recipe = recipe_in.empty() ? "tensor_current" : recipe_in;
  // Sorted as pointers under the lock, and only what is shown is copied: a listing of every tensor
  // of a large table used to copy them all.
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const v1::TensorSummary*> out;
  out.reserve(entries_.size());
  entries_.for_each([&](const std::string&, const v1::TensorSummary& s) { out.push_back(&s); });
  // Asked for a recipe: only the tensors that have it (FP8 tensors have "observed" only), so
  // --top counts what will be shown.
  if (!recipe_in.empty()) {
    std::erase_if(out, [&](const v1::TensorSummary* s) {
      return std::none_of(s->recipes().begin(), s->recipes().end(),
                          [&](const v1::RecipeStats& r) { return r.recipe() == recipe_in; });
    });
  }
  auto key = [](const v1::TensorSummary* s) {
    const v1::TensorKey& k = s->key();
    return std::make_tuple(std::cref(k.job()), std::cref(k.run()), k.rank(), std::cref(k.layer()), static_cast<int>(k.gemm()),
                           static_cast<int>(k.operand()));
  };
  std::sort(out.begin(), out.end(), [&](const auto* a, const auto* b) { return key(a) < key(b); });
  if (rule != nullptr) {
    // FP8 tensors have no what-if recipes: they sort by what was observed.
    auto value = [&](const v1::TensorSummary* s) {
      double v = sort_value(*s, rule->statistic, recipe);
      if (std::isnan(v)) v = sort_value(*s, rule->statistic, "observed");
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
