// `fp8scope tensors`: latest per tensor, worst first, bounded.
#include "fp8scope/export/tensor_table.h"

#include <catch2/catch.hpp>

using namespace fp8scope;
using namespace fp8scope::server;

namespace {
TensorSummary summary(const std::string& layer, double underflow, double cosine, double time) {
  TensorSummary s;
  s.job = "j";
  s.layer = layer;
  s.time = time;
  RecipeSummary& r = s.recipes.emplace_back();
  r.caster = Caster::recipe(RecipeKind::kTensorCurrent);
  r.statistics = {{find_statistic("underflow_ratio"), underflow}, {find_statistic("cosine"), cosine}};
  return s;
}
}  // namespace

TEST_CASE("sorted worst first, limited to top, latest value per tensor", "[tensor_table]") {
  TensorTable t(100);
  t.update(summary("a", 0.10, 0.99, 1));
  t.update(summary("b", 0.30, 0.90, 2));
  t.update(summary("c", 0.20, 0.95, 3));
  t.update(summary("a", 0.50, 0.999, 4));  // replaces a's first sample
  auto by_underflow = t.list("underflow", 2, std::nullopt);
  REQUIRE(by_underflow.ok());
  REQUIRE(by_underflow.value().tensors.size() == 2);
  CHECK(by_underflow.value().tensors[0].layer == "a");
  CHECK(by_underflow.value().tensors[1].layer == "b");
  auto by_cosine = t.list("cosine", 0, Caster::recipe(RecipeKind::kTensorCurrent));
  CHECK(by_cosine.value().tensors[0].layer == "b");
  CHECK(!t.list("speed", 0, std::nullopt).ok());
}

TEST_CASE("asked for a recipe, only the tensors that have it count toward top", "[tensor_table]") {
  TensorTable t(100);
  t.update(summary("bf16", 0.1, 0.99, 1));
  TensorSummary fp8 = summary("fp8", 0.0, 1.0, 2);
  fp8.recipes[0].caster = Caster::job();
  t.update(fp8);
  auto observed = t.list("", 1, Caster::job());
  REQUIRE(observed.ok());
  REQUIRE(observed.value().tensors.size() == 1);
  CHECK(observed.value().tensors[0].layer == "fp8");
  CHECK(t.list("", 0, std::nullopt).value().tensors.size() == 2);
}

TEST_CASE("a full table evicts the least recently updated tensor", "[tensor_table]") {
  TensorTable t(2);
  t.update(summary("a", 0, 1, 1));
  t.update(summary("b", 0, 1, 2));
  t.update(summary("c", 0, 1, 3));
  CHECK(t.size() == 2);
  for (const auto& s : t.list("", 0, std::nullopt).value().tensors) CHECK(s.layer != "a");
  t.update(summary("b", 0, 1, 4));  // b is now the most recent: c goes next
  t.update(summary("d", 0, 1, 5));
  std::vector<std::string> left;
  for (const auto& s : t.list("", 0, std::nullopt).value().tensors) left.push_back(s.layer);
  CHECK(left == std::vector<std::string>{"b", "d"});
}

TEST_CASE("a listing is bounded, and says how many tensors there were", "[tensor_table]") {
  TensorTable t(5000);
  for (int i = 0; i < 3000; ++i) t.update(summary("layer" + std::to_string(i), 0.001 * (i % 97), 1, i));
  auto all = t.list("", 0, std::nullopt);
  REQUIRE(all.ok());
  CHECK(all.value().tensors.size() == TensorTable::kMaxListed);
  CHECK(all.value().total == 3000);
  CHECK(all.value().tensors[0].layer == "layer0");  // by key
  auto worst = t.list("underflow", 5, std::nullopt);
  REQUIRE(worst.value().tensors.size() == 5);
  CHECK(worst.value().tensors[0].recipes[0].statistic("underflow_ratio") == Approx(0.096));
}

TEST_CASE("each expert of a layer is a tensor of its own, and a listing can keep one expert", "[tensor_table]") {
  TensorTable t(100);
  for (std::uint32_t e = 0; e < 4; ++e) {
    TensorSummary s = summary("moe.experts", 0.01 * e, 0.99, e);
    s.expert = e;
    s.expert_tokens = 10 + e;
    t.update(s);
  }
  t.update(summary("moe.router", 0.5, 0.9, 9));
  CHECK(t.list("", 0, std::nullopt).value().tensors.size() == 5);
  const auto two = t.list("underflow", 1, std::nullopt, 2u);  // top counts the expert's tensors only
  REQUIRE(two.value().tensors.size() == 1);
  CHECK(two.value().tensors[0].expert == 2u);
  CHECK(two.value().tensors[0].expert_tokens == 12u);
  CHECK(t.list("", 0, std::nullopt, 7u).value().tensors.empty());
}
