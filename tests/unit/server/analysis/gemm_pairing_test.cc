// Forward GEMM operands pair up by job, run, rank, layer and step, once.
#include "fp8scope/analysis/gemm_pairing.h"

#include <catch2/catch.hpp>

using namespace fp8scope;
using namespace fp8scope::server;

namespace {
Sample sample(const std::string& layer, std::uint64_t step, Operand op, GemmRole gemm = GemmRole::kFprop) {
  Sample s;
  auto c = std::make_shared<ClientInfo>();
  c->job = "j";
  c->run = "r";
  s.client = c;
  s.header.layer = layer;
  s.header.step = step;
  s.header.operand = op;
  s.header.gemm = gemm;
  s.header.rows = 2;
  s.header.cols = 4;
  s.payload.assign(32, op == Operand::kX ? 1 : 2);
  return s;
}
}  // namespace

TEST_CASE("X and W of the same step pair up once", "[gemm_pairing]") {
  GemmPairing p;
  CHECK(!p.offer(sample("l", 5, Operand::kX)));
  CHECK(!p.offer(sample("l", 6, Operand::kW)));  // another step
  auto pair = p.offer(sample("l", 5, Operand::kW));
  REQUIRE(pair);
  CHECK(pair->x[0] == 1);
  CHECK(pair->w[0] == 2);
  CHECK(pair->step == 5);
  CHECK(!p.offer(sample("l", 5, Operand::kW)));  // handed out already
  CHECK(!p.offer(sample("l", 7, Operand::kDy)));  // not an fprop operand
  CHECK(!p.offer(sample("l", 7, Operand::kX, GemmRole::kWgrad)));
}

TEST_CASE("waiting operands are bounded, oldest first out", "[gemm_pairing]") {
  GemmPairing p(2);
  CHECK(!p.offer(sample("a", 1, Operand::kX)));
  CHECK(!p.offer(sample("b", 1, Operand::kX)));
  CHECK(!p.offer(sample("c", 1, Operand::kX)));  // evicts a
  CHECK(!p.offer(sample("a", 1, Operand::kW)));
  CHECK(p.offer(sample("c", 1, Operand::kW)));
}

TEST_CASE("a waiting operand keeps its lease on the queue budget, and waiting bytes are bounded", "[gemm_pairing]") {
  ByteBudget budget(1 << 20);
  auto leased = [&](const std::string& layer, Operand op) {
    Sample s = sample(layer, 1, op);
    REQUIRE(budget.try_reserve(s.payload.size()));
    s.lease = BudgetLease(&budget, s.payload.size());
    return s;
  };
  GemmPairing p(16, 1 << 20, 64);  // two 32-byte operands wait at most
  CHECK(!p.offer(leased("a", Operand::kX)));
  CHECK(!p.offer(leased("b", Operand::kX)));
  CHECK(budget.used() == 64);  // held by the waiting operands, not copies beside the budget
  CHECK(!p.offer(leased("c", Operand::kX)));  // evicts a: its bytes go back
  CHECK(budget.used() == 64);
  CHECK(p.pending_bytes() == 64);
  {
    auto pair = p.offer(leased("b", Operand::kW));
    REQUIRE(pair);
    CHECK(budget.used() == 96);  // b's X and W until the check is done, and c's X waiting
    CHECK(p.pending_bytes() == 32);
  }
  CHECK(budget.used() == 32);  // c's X alone
  Sample dy = leased("c", Operand::kDy);
  CHECK(!p.offer(std::move(dy)));
  CHECK(dy.payload.size() == 32);  // not an fprop X or W: left with its owner
}
