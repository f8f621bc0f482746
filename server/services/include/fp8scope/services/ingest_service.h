// The Ingest service: one reactor per training process's Stream, owning that stream's state
// (client identity, the sample being reassembled, outgoing messages). It answers Hello with a
// Welcome and the policy, pushes every later policy change, acknowledges each sample, and never
// blocks the stream on analysis: complete samples go to the ingest queue. The stream is served raw
// (bytes in, bytes out) so that a message that does not decode ends it with an error the client
// sees and a log line, instead of looking like the client's own end of stream.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_set>

#include "fp8scope/services/access.h"
#include "fp8scope/ingest/ack_journal.h"
#include "fp8scope/ingest/byte_budget.h"
#include "fp8scope/v1/fp8scope.grpc.pb.h"
#include "fp8scope/export/health_metrics.h"
#include "fp8scope/ingest/ingest_queue.h"
#include "fp8scope/analysis/policy_store.h"
#include "fp8scope/ingest/sample_assembler.h"
#include "fp8scope/ingest/shared_regions.h"

namespace fp8scope::server {

struct IngestDeps {
  PolicyStore* policy;
  ByteBudget* budget;
  IngestQueue* queue;
  HealthMetrics* health;
  AckJournal* journal;
  const AccessCheck* access;
  AssemblerLimits limits;
  std::uint64_t max_inflight_bytes;
  std::string daemon_version;
  std::chrono::steady_clock::duration stall_timeout;  // a partial sample without a new chunk this long is dropped
  const SharedRegions* shared_regions = nullptr;  // offered in the Welcome when set
};

class StreamReactor;

class IngestService final : public v1::Ingest::WithRawCallbackMethod_Stream<v1::Ingest::Service> {
 public:
  explicit IngestService(IngestDeps deps) : deps_(std::move(deps)) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Stream(grpc::CallbackServerContext* context) override;

  // Refuse new streams (shutdown has begun).
  void stop_accepting() { accepting_ = false; }
  // Drops every partial sample whose last chunk is older than the stall timeout, freeing its
  // memory (called periodically: a stream that stops sending has no callback to do it).
  void expire_stalled();

 private:
  friend class StreamReactor;
  void track(StreamReactor* stream);
  void untrack(StreamReactor* stream);

  IngestDeps deps_;
  std::atomic<bool> accepting_{true};
  std::mutex streams_mu_;
  std::unordered_set<StreamReactor*> streams_;  // the open streams that said Hello
};

}  // namespace fp8scope::server
