// libFuzzer target for what the daemon does with untrusted input before analysis: parsing wire
// messages, validating Hello and tensor headers, reassembling chunks under a byte budget, and
// decoding the payload as the declared dtype in the statistics engine. Half the inputs are raw
// bytes parsed as ClientMessages; the other half are message sequences built from the input, so
// the fuzzer gets past the protobuf parser into the validation logic.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <memory>

#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/recipe_analysis.h"
#include "fp8scope/wire/wire.h"
#include "fp8scope/ingest/sample_assembler.h"
#include "fp8scope/ingest/sample_validation.h"

using namespace fp8scope;
using namespace fp8scope::server;

namespace {

StatsEngine& engine() {
  static const std::unique_ptr<StatsEngine> e = make_cpu_engine(1);
  return *e;
}

void analyze(const Sample& s) {
  std::vector<RecipePlan> plans;
  for (RecipeKind k : kAllRecipeKinds) {
    RecipePlan p;
    p.recipe = default_recipe(k);
    plans.push_back(p);
  }
  const TensorView view{s.payload.data(), s.header.dtype, s.header.rows, s.header.cols, s.header.scale_inv > 0 ? s.header.scale_inv : 1.0f};
  (void)analyze_recipes(engine(), view, plans);
}

void feed(SampleAssembler& assembler, const v1::ClientMessage& m) {
  if (m.has_hello()) (void)check_hello(m.hello());
  if (!m.has_chunk()) return;
  for (AssemblerEvent& e : assembler.add(m.chunk())) {
    if (e.kind == AssemblerEvent::Kind::kComplete) analyze(*e.sample);
  }
}

v1::ClientMessage built(FuzzedDataProvider& in, std::uint64_t& next_id) {
  v1::ClientMessage m;
  if (in.ConsumeIntegralInRange(0, 7) == 0) {
    v1::Hello* h = m.mutable_hello();
    h->set_protocol_version(in.ConsumeIntegralInRange<std::uint32_t>(0, 2));
    h->set_job(in.ConsumeRandomLengthString(40));
    h->set_run(in.ConsumeRandomLengthString(40));
    h->set_rank(in.ConsumeIntegral<std::uint32_t>());
    h->set_world_size(in.ConsumeIntegral<std::uint32_t>());
    return m;
  }
  v1::TensorChunk* c = m.mutable_chunk();
  if (in.ConsumeBool()) ++next_id;
  c->set_sample_id(in.ConsumeBool() ? next_id : in.ConsumeIntegral<std::uint64_t>());
  if (in.ConsumeBool()) {
    v1::TensorHeader* h = c->mutable_header();
    h->set_dtype(static_cast<v1::DType>(in.ConsumeIntegralInRange(0, 7)));
    h->set_gemm(static_cast<v1::Gemm>(in.ConsumeIntegralInRange(0, 5)));
    h->set_operand(static_cast<v1::Operand>(in.ConsumeIntegralInRange(0, 4)));
    h->set_layer(in.ConsumeRandomLengthString(24));
    const int rank = in.ConsumeIntegralInRange(0, 9);
    std::uint64_t numel = 1;
    for (int d = 0; d < rank; ++d) {
      const auto dim = in.ConsumeIntegralInRange<std::int64_t>(-2, 300);
      h->add_shape(dim);
      numel *= dim > 0 ? static_cast<std::uint64_t>(dim) : 1;
    }
    const std::uint64_t element = in.ConsumeIntegralInRange(1, 8);
    h->set_payload_bytes(in.ConsumeBool() ? numel * element : in.ConsumeIntegral<std::uint32_t>());
    h->set_scale_inv(in.ConsumeFloatingPoint<float>());
  }
  c->set_offset(in.ConsumeIntegralInRange<std::uint64_t>(0, 1 << 16));
  c->set_data(in.ConsumeBytesAsString(in.ConsumeIntegralInRange<std::size_t>(0, 1 << 16)));
  c->set_last(in.ConsumeBool());
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ByteBudget budget(1 << 20);
  SampleAssembler assembler(std::make_shared<ClientInfo>(), AssemblerLimits{1 << 20, 1 << 16}, &budget);
  if (size > 0 && data[0] % 2 == 0) {
    // Raw bytes: length-prefixed ClientMessages, as a broken or hostile client might send them.
    std::size_t pos = 1;
    while (pos + 2 <= size) {
      const std::size_t len = std::min<std::size_t>(data[pos] | (data[pos + 1] << 8), size - pos - 2);
      v1::ClientMessage m;
      if (m.ParseFromArray(data + pos + 2, static_cast<int>(len))) feed(assembler, m);
      pos += 2 + len;
    }
  } else {
    FuzzedDataProvider in(data, size);
    std::uint64_t next_id = 0;
    while (in.remaining_bytes() > 0) feed(assembler, built(in, next_id));
  }
  assembler.abandon();
  if (budget.used() != 0) __builtin_trap();  // every reservation must come back
  return 0;
}
