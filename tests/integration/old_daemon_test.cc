// A job whose fp8scoped reads protocol 1 only (a fleet mid-upgrade): an in-process stand-in for
// such a daemon welcomes the shipper with protocol 1. The hook still captures every operand; what
// protocol 1 cannot carry (FP4 codes, block scale tensors) the shipper drops and counts as
// daemon_too_old, never sending the daemon a field it would misread, while per-tensor FP8 and BF16
// samples arrive as before.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <map>
#include <mutex>

#include "support/daemon_fixture.h"
#include "support/temp_dir.h"
#include "fp8scope/v1/fp8scope.grpc.pb.h"

using namespace fp8scope;
using namespace fp8scope::testing;

namespace {

constexpr int kLayers = 3, kSamplesPerStep = kLayers * 3 * 2, kSteps = 4;

// What a protocol 1 daemon says and does: Welcome 1, sample every step, accept every sample.
class ProtocolOneDaemon final : public v1::Ingest::Service {
 public:
  grpc::Status Stream(grpc::ServerContext*, grpc::ServerReaderWriter<v1::ServerMessage, v1::ClientMessage>* s) override {
    v1::ClientMessage m;
    while (s->Read(&m)) {
      v1::ServerMessage reply;
      switch (m.kind_case()) {
        case v1::ClientMessage::kHello:
          reply.mutable_welcome()->set_protocol_version(1);
          reply.mutable_welcome()->set_max_chunk_bytes(4 << 20);
          reply.mutable_welcome()->set_max_inflight_bytes(64 << 20);
          reply.mutable_welcome()->set_max_sample_bytes(64 << 20);
          s->Write(reply);
          reply.mutable_policy()->set_version(1);
          reply.mutable_policy()->set_every_n_steps(1);
          s->Write(reply);
          break;
        case v1::ClientMessage::kChunk: {
          std::lock_guard lock(mu_);
          if (m.chunk().has_header()) {
            const v1::TensorHeader& h = m.chunk().header();
            ++samples_[h.dtype()];
            protocol_two_fields_ += h.scale_bytes() != 0 || h.scale_mode() > v1::SCALE_MODE_TENSOR_SCALAR ||
                                    h.global_scale_inv() != 0 || h.gemm_alpha() != 0;
          }
          if (m.chunk().last()) {
            reply.mutable_ack()->set_sample_id(m.chunk().sample_id());
            reply.mutable_ack()->set_outcome(v1::SAMPLE_OUTCOME_ACCEPTED);
            s->Write(reply);
          }
          break;
        }
        case v1::ClientMessage::kCounters: {
          std::lock_guard lock(mu_);
          for (const auto& [reason, n] : m.counters().dropped()) dropped_[reason] = n;  // totals per process
          break;
        }
        default: break;
      }
    }
    return grpc::Status::OK;
  }

  std::map<int, int> samples() {
    std::lock_guard lock(mu_);
    return samples_;
  }
  std::uint64_t dropped(const std::string& reason) {
    std::lock_guard lock(mu_);
    return dropped_.count(reason) ? dropped_[reason] : 0;
  }
  int protocol_two_fields() {
    std::lock_guard lock(mu_);
    return protocol_two_fields_;
  }
  void reset() {
    std::lock_guard lock(mu_);
    samples_.clear();
    dropped_.clear();
  }

 private:
  std::mutex mu_;
  std::map<int, int> samples_;  // dtype -> samples
  std::map<std::string, std::uint64_t> dropped_;
  int protocol_two_fields_ = 0;
};

ProcessResult train_under_hook(const std::string& endpoint, const std::string& mode) {
  return run_process({FP8SCOPE_CLI, "run", "--endpoint", endpoint, "--every", "1", "--job", "old", "--run", mode, "--",
                      FP8SCOPE_TINY_TRAINER, "--steps", std::to_string(kSteps), "--mode", mode},
                     {"ASAN_OPTIONS=verify_asan_link_order=0"}, 120.0);
}

}  // namespace

TEST_CASE("a protocol 1 daemon gets per-tensor FP8 samples, and FP4 and block scales are dropped as daemon_too_old",
          "[hook][protocol]") {
  ProtocolOneDaemon service;
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(endpoint, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server);

  const int all = kSteps * kSamplesPerStep;
  REQUIRE(train_under_hook(endpoint, "fp8").exit_code == 0);
  CHECK(eventually([&] { return service.samples()[v1::DTYPE_E4M3] + service.samples()[v1::DTYPE_E5M2] == all; }));
  CHECK(service.dropped("daemon_too_old") == 0);

  for (const char* mode : {"mxfp8", "nvfp4"}) {
    INFO(mode);
    service.reset();
    REQUIRE(train_under_hook(endpoint, mode).exit_code == 0);
    CHECK(eventually([&] { return service.dropped("daemon_too_old") == static_cast<std::uint64_t>(all); }));
    CHECK(service.samples().empty());
  }
  CHECK(service.protocol_two_fields() == 0);
  server->Shutdown();
}
