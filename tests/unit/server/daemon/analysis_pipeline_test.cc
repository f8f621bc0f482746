// The analysis workers end to end in-process: every queued sample is analyzed and published and
// its journal slot released once its records are stored; scalars reach the history beside them;
// an fprop X and W of one step get a GEMM check; a sample that cannot be analyzed is dropped and
// counted with its slot released; a drain past its deadline drops what is left, and counts it.
#include "fp8scope/daemon/analysis_pipeline.h"

#include <catch2/catch.hpp>
#include <prometheus/registry.h>

#include "fp8scope/kernels/cpu_engine.h"
#include "support/server_samples.h"
#include "support/temp_dir.h"

using namespace fp8scope;
using namespace fp8scope::server;
using fp8scope::testing::f32_sample;

namespace {

struct Rig {
  fp8scope::testing::TempDir dir;
  prometheus::Registry registry;
  IngestQueue queue{2};
  ByteBudget budget{64ull << 20};
  std::unique_ptr<StatsEngine> engine = make_cpu_engine(1);
  PolicyStore policy;
  TensorSeries series{registry, SeriesOptions{}};
  HealthMetrics health{registry, "test", "cpu", budget.capacity()};
  std::unique_ptr<AckJournal> journal = std::move(AckJournal::open(dir.file("accepted.journal"), 64)).value();
  std::unique_ptr<history::HistoryStore> history =
      std::move(history::HistoryStore::open(dir.file("history"), {"test"})).value();
  TensorTable tensors{100};
  AnalysisPipeline pipeline{PipelineDeps{&queue, &budget, engine.get(), &policy, &series, &health, history.get(),
                                         journal.get(), &tensors, nullptr, 100, OutlierChannelOptions{},
                                         MetricExport{{RecipeKind::kTensorCurrent}, false}}};

  Rig() {
    REQUIRE(journal->start_fresh().ok());
    history->on_stored_sample([this](const JournalTicket& t, bool) { journal->release(t); });
    SamplingPolicy p;
    p.recipes = {RecipeKind::kTensorCurrent, RecipeKind::kTensorDelayed};
    REQUIRE(policy.set(p).ok());
  }

  // As ingest hands a sample over: journaled and holding its bytes of the budget.
  void push(Sample s) {
    s.journal = journal->accept(s.client->job, s.client->rank);
    REQUIRE(s.journal);
    REQUIRE(budget.try_reserve(s.payload.size()));
    s.lease = BudgetLease(&budget, s.payload.size());
    s.completed = std::chrono::steady_clock::now();
    queue.push(std::move(s));
  }

  std::size_t records() {
    REQUIRE(history->flush().ok());
    std::size_t n = 0;
    REQUIRE(history->reader().query({}, [&](const history::HistoryRecord&) { return ++n, true; }).ok());
    return n;
  }
};

}  // namespace

TEST_CASE("queued samples and scalars are analyzed, published and their journal slots released", "[pipeline]") {
  Rig rig;
  rig.push(f32_sample("a", 1, Operand::kX, {1.0f, 2.0f}));
  rig.push(f32_sample("a", 1, Operand::kW, {0.5f, -0.25f}));  // with the X above: a GEMM check
  rig.push(f32_sample("b", 1, Operand::kDy, {1e-3f}, 4, 32, GemmRole::kWgrad));
  REQUIRE(rig.queue.push(ScalarMark{fp8scope::testing::client(), 1.0, 1, "loss", 3.5}));
  rig.pipeline.start();
  CHECK(rig.pipeline.drain(std::chrono::steady_clock::now() + std::chrono::seconds(60)) == 0);
  CHECK(rig.health.samples_analyzed() == 3);
  CHECK(rig.records() == 3 * 2);  // two recipes each
  CHECK(rig.journal->in_use() == 0);
  CHECK(rig.budget.used() == 0);
  std::size_t scalars = 0, checks = 0;
  REQUIRE(rig.history->reader().query_scalars("", "loss", [&](const history::ScalarRecord&) { return ++scalars, true; }).ok());
  REQUIRE(rig.history->reader().query_gemm_outputs("", [&](const history::GemmOutputRecord& g) {
    CHECK(g.layer == "a");
    return ++checks, true;
  }).ok());
  CHECK(scalars == 1);
  CHECK(checks == 1);
  CHECK(rig.tensors.size() == 3);
}

TEST_CASE("a sample that cannot be analyzed is dropped, counted, and its slot released", "[pipeline]") {
  Rig rig;
  Sample bad = fp8scope::testing::e4m3_sample("codes", 1, std::vector<std::uint8_t>(32, 0x38), 1.0f);
  bad.header.scale_layout = ScaleLayout::kVec32Ue8m0;  // block scales, and none in the payload
  rig.push(std::move(bad));
  rig.pipeline.start();
  rig.pipeline.drain(std::chrono::steady_clock::now() + std::chrono::seconds(60));
  CHECK(rig.health.dropped().at("analysis_error") == 1);
  CHECK(rig.health.samples_analyzed() == 0);
  CHECK(rig.records() == 0);
  CHECK(rig.journal->in_use() == 0);
}

TEST_CASE("a drain past its deadline drops what is still queued, and counts it", "[pipeline]") {
  Rig rig;
  constexpr std::uint64_t kSamples = 40;
  for (std::uint64_t step = 0; step < kSamples; ++step) {
    rig.push(f32_sample("l", step, Operand::kDy, {1.0f}, 64, 256, GemmRole::kWgrad));  // no GEMM pairing holds them
  }
  rig.pipeline.start();
  const std::uint64_t dropped = rig.pipeline.drain(std::chrono::steady_clock::now());
  CHECK(rig.health.samples_analyzed() + dropped == kSamples);
  if (dropped > 0) CHECK(rig.health.dropped().at("shutdown") == dropped);
  CHECK(rig.budget.used() == 0);
  // Their slots stay taken: the next start counts them as lost.
  REQUIRE(rig.history->flush().ok());
  CHECK(rig.journal->in_use() == dropped);
}
