// The sampling policies: versions increase, subscribers hear every change that applies to their
// job until they leave, a job's own policy leaves every other job alone, and a policy that cannot
// be applied is refused with the reason.
#include "fp8scope/analysis/policy_store.h"

#include <catch2/catch.hpp>

using namespace fp8scope;
using namespace fp8scope::server;

namespace {
SamplingPolicy every(std::uint64_t n, const std::string& job = "") {
  SamplingPolicy p;
  p.every_n_steps = n;
  p.job = job;
  return p;
}
}  // namespace

TEST_CASE("set assigns the next version and notifies subscribers until they unsubscribe", "[policy]") {
  PolicyStore store;
  CHECK(store.get().version == 1);
  CHECK(store.get().every_n_steps == 10);
  std::vector<std::uint64_t> heard;
  const int id = store.subscribe("pretrain", [&](const SamplingPolicy& p) { heard.push_back(p.version); });
  SamplingPolicy p = every(10);
  p.layer_regex = "attn";
  p.version = 77;  // ignored: the store numbers versions
  REQUIRE(store.set(p).ok());
  CHECK(store.get().version == 2);
  CHECK(store.get().layer_regex == "attn");
  store.unsubscribe(id);
  REQUIRE(store.set(p).ok());
  CHECK(heard == std::vector<std::uint64_t>{2});
}

TEST_CASE("a job's own policy reaches that job's streams only, until it inherits the default again", "[policy]") {
  PolicyStore store;
  std::vector<std::uint64_t> a, b;
  store.subscribe("a", [&](const SamplingPolicy& p) { a.push_back(p.every_n_steps); });
  store.subscribe("b", [&](const SamplingPolicy& p) { b.push_back(p.every_n_steps); });

  REQUIRE(store.set(every(1, "a")).ok());  // `fp8scope run --job a --every 1`
  CHECK(store.get("a").every_n_steps == 1);
  CHECK(store.get("a").job == "a");
  CHECK(store.get("b").every_n_steps == 10);  // b follows the default, untouched
  CHECK(store.get("b").job.empty());
  CHECK(a == std::vector<std::uint64_t>{1});
  CHECK(b.empty());

  REQUIRE(store.set(every(5)).ok());  // the default changes: b hears it, a keeps its own
  CHECK(a == std::vector<std::uint64_t>{1});
  CHECK(b == std::vector<std::uint64_t>{5});

  const auto inherited = store.inherit("a");
  REQUIRE(inherited.ok());
  CHECK(inherited.value().every_n_steps == 5);
  CHECK(store.get("a").every_n_steps == 5);
  CHECK(a == std::vector<std::uint64_t>{1, 5});
  CHECK(store.get("a").version > 3);  // newer than anything a's streams have seen
}

TEST_CASE("policies that cannot be applied are refused", "[policy]") {
  PolicyStore store;
  SamplingPolicy bad = every(10);
  bad.layer_regex = "([unclosed";
  CHECK(store.set(bad).message().find("layer_regex: not a layer pattern: missing ']' at offset 10") == 0);
  bad = every(10);
  bad.start_step = 10;
  bad.end_step = 5;
  CHECK(store.set(bad).message() == "end_step 5 must be above start_step 10");
  CHECK(store.set(every(0)).message() == "every_n_steps: expected 1 or more (1 = every step)");
  CHECK(store.set(every(1, "bad\njob")).message().find("job: expected 1..200 printable ASCII") == 0);
  for (BlockRange range : {BlockRange{0, 1}, BlockRange{4, 3}, BlockRange{kMaxRangeBlockSize + 1, 1}}) {
    bad = every(10);
    bad.block_ranges = {range};
    CHECK(store.set(bad).message().find("block_ranges: expected a block_size of 1..4096 and dims 1 or 2") == 0);
  }
  bad = every(10);
  bad.te_logged = {{SamplingRule{}, "LogTensorStats", Operand::kX, {"cur_amax", "bad\nstat"}}};
  CHECK(store.set(bad).message().find("te_logged: expected stat names") == 0);
  bad.te_logged.assign(kMaxLoggedStats + 1, PolicyLoggedStats{SamplingRule{}, "LogTensorStats", Operand::kX, {}});
  CHECK(store.set(bad).message() == "te_logged: at most 64, got 65");
  bad = every(10);
  bad.block_ranges.assign(kMaxBlockRanges + 1, BlockRange{});
  CHECK(store.set(bad).message() == "block_ranges: at most 8, got 9");
  CHECK(!store.inherit("").ok());
  CHECK(store.get().version == 1);  // nothing changed
}

TEST_CASE("the jobs with a policy of their own are bounded", "[policy]") {
  PolicyStore store;
  for (std::size_t i = 0; i < PolicyStore::kMaxJobPolicies; ++i) REQUIRE(store.set(every(2, "job" + std::to_string(i))).ok());
  CHECK(store.set(every(2, "one-more")).message().find("have a policy of their own already") != std::string::npos);
  REQUIRE(store.set(every(3, "job7")).ok());  // changing an existing one is fine
  REQUIRE(store.inherit("job7").ok());
  CHECK(store.set(every(2, "one-more")).ok());
}
