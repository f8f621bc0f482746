// The sampling policy: versions increase, subscribers hear every change until they leave, and a
// policy that cannot be applied is refused with the reason.
#include "policy_store.h"

#include <catch2/catch.hpp>

using namespace fp8scope;
using namespace fp8scope::server;

TEST_CASE("set assigns the next version and notifies subscribers until they unsubscribe", "[policy]") {
  PolicyStore store;
  CHECK(store.get().version() == 1);
  CHECK(store.get().every_n_steps() == 10);
  std::vector<std::uint64_t> heard;
  const int id = store.subscribe([&](const v1::Policy& p) { heard.push_back(p.version()); });
  v1::Policy p;
  p.set_layer_regex("attn");
  p.set_version(77);  // ignored: the store numbers versions
  REQUIRE(store.set(p).ok());
  CHECK(store.get().version() == 2);
  CHECK(store.get().layer_regex() == "attn");
  store.unsubscribe(id);
  REQUIRE(store.set(p).ok());
  CHECK(heard == std::vector<std::uint64_t>{2});
}

TEST_CASE("policies that cannot be applied are refused", "[policy]") {
  PolicyStore store;
  v1::Policy bad;
  bad.set_layer_regex("([unclosed");
  CHECK(store.set(bad).message().find("layer_regex: not a layer pattern: missing ']' at offset 10") == 0);
  bad = v1::Policy();
  bad.add_operands(static_cast<v1::Operand>(9));
  CHECK(!store.set(bad).ok());
  bad = v1::Policy();
  bad.set_start_step(10);
  bad.set_end_step(5);
  CHECK(store.set(bad).message() == "end_step 5 must be above start_step 10");
  CHECK(store.get().version() == 1);  // nothing changed
}
