// `fp8scope tensors`: latest per tensor, worst first, bounded.
#include "tensor_table.h"

#include <catch2/catch.hpp>

using namespace fp8scope;
using namespace fp8scope::server;

namespace {
v1::TensorSummary summary(const std::string& layer, double underflow, double cosine, double time) {
  v1::TensorSummary s;
  s.mutable_key()->set_job("j");
  s.mutable_key()->set_layer(layer);
  s.set_time(time);
  v1::RecipeStats* r = s.add_recipes();
  r->set_recipe("tensor_current");
  (*r->mutable_statistics())["underflow_ratio"] = underflow;
  (*r->mutable_statistics())["cosine"] = cosine;
  return s;
}
}  // namespace

TEST_CASE("sorted worst first, limited to top, latest value per tensor", "[tensor_table]") {
  TensorTable t(100);
  t.update(summary("a", 0.10, 0.99, 1));
  t.update(summary("b", 0.30, 0.90, 2));
  t.update(summary("c", 0.20, 0.95, 3));
  t.update(summary("a", 0.50, 0.999, 4));  // replaces a's first sample
  auto by_underflow = t.list("underflow", 2, "");
  REQUIRE(by_underflow.ok());
  REQUIRE(by_underflow.value().size() == 2);
  CHECK(by_underflow.value()[0].key().layer() == "a");
  CHECK(by_underflow.value()[1].key().layer() == "b");
  auto by_cosine = t.list("cosine", 0, "tensor_current");
  CHECK(by_cosine.value()[0].key().layer() == "b");
  CHECK(!t.list("speed", 0, "").ok());
}

TEST_CASE("asked for a recipe, only the tensors that have it count toward top", "[tensor_table]") {
  TensorTable t(100);
  t.update(summary("bf16", 0.1, 0.99, 1));
  v1::TensorSummary fp8 = summary("fp8", 0.0, 1.0, 2);
  fp8.mutable_recipes(0)->set_recipe("observed");
  t.update(fp8);
  auto observed = t.list("", 1, "observed");
  REQUIRE(observed.ok());
  REQUIRE(observed.value().size() == 1);
  CHECK(observed.value()[0].key().layer() == "fp8");
  CHECK(t.list("", 0, "").value().size() == 2);
}

TEST_CASE("a full table evicts the least recently updated tensor", "[tensor_table]") {
  TensorTable t(2);
  t.update(summary("a", 0, 1, 1));
  t.update(summary("b", 0, 1, 2));
  t.update(summary("c", 0, 1, 3));
  CHECK(t.size() == 2);
  for (const auto& s : t.list("", 0, "").value()) CHECK(s.key().layer() != "a");
}
