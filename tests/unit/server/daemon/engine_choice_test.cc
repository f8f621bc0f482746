// Backend choice: cpu is the CPU; cuda without a usable GPU is an error naming why; auto falls back.
// A failing primary engine hands the work to the fallback, and after repeated failures keeps it there.
#include "fp8scope/daemon/engine_choice.h"

#include <catch2/catch.hpp>

#include "fp8scope/kernels/cpu_engine.h"

using namespace fp8scope;
using namespace fp8scope::server;

namespace {

class FailingEngine final : public StatsEngine {
 public:
  int calls = 0;
  const char* name() const override { return "broken"; }
  Status analyze(const TensorView&, std::span<const QuantSpec>, TensorAnalysis*) override {
    ++calls;
    return Status::error("device lost");
  }
};

}  // namespace

TEST_CASE("backend cpu, and auto without a GPU, run on the CPU", "[engine_choice]") {
  DaemonConfig c;
  c.backend = "cpu";
  auto cpu = choose_engine(c);
  REQUIRE(cpu.ok());
  CHECK(cpu.value().backend == "cpu");
  CHECK(!cpu.value().gemm);
  c.backend = "auto";
  auto automatic = choose_engine(c);
  REQUIRE(automatic.ok());
  CHECK(automatic.value().engine != nullptr);
}

TEST_CASE("backend cuda without a usable GPU says why", "[engine_choice]") {
  DaemonConfig c;
  c.backend = "cuda";
  auto cuda = choose_engine(c);
  if (cuda.ok()) {
    WARN("a GPU is present here: " << cuda.value().backend);
    CHECK(cuda.value().backend.rfind("cuda:", 0) == 0);
  } else {
    CHECK(cuda.message().rfind("--backend cuda: ", 0) == 0);
  }
}

TEST_CASE("a failing primary engine falls back, and for good after repeated failures", "[engine_choice]") {
  auto failing = std::make_unique<FailingEngine>();
  FailingEngine* primary = failing.get();
  auto engine = with_fallback(std::move(failing), make_cpu_engine(1), 2);
  const float data[4] = {1, 2, 3, 4};
  QuantSpec spec;
  TensorAnalysis a;
  REQUIRE(engine->analyze(TensorView{data, DType::kF32, 1, 4, 1.0f}, {&spec, 1}, &a).ok());
  CHECK(a.moments.amax == 4.0f);
  CHECK(std::string(engine->name()) == "broken");
  REQUIRE(engine->analyze(TensorView{data, DType::kF32, 1, 4, 1.0f}, {&spec, 1}, &a).ok());
  CHECK(std::string(engine->name()) == "cpu");
  REQUIRE(engine->analyze(TensorView{data, DType::kF32, 1, 4, 1.0f}, {&spec, 1}, &a).ok());
  CHECK(primary->calls == 2);
}
