#include "fp8scope/services/ingest_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>

#include "fp8scope/services/policy_wire.h"
#include "fp8scope/wire/wire.h"
#include "fp8scope/vocabulary/client_drop.h"
#include "fp8scope/ingest/sample_validation.h"

namespace fp8scope::server {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(IngestService& service, grpc::CallbackServerContext* context, bool accepting)
      : service_(service), deps_(service.deps_), peer_(context->peer()) {
    grpc::Status access = deps_.access->check(*context);
    if (!accepting) access = {grpc::StatusCode::UNAVAILABLE, "fp8scoped is shutting down"};
    if (!access.ok()) {
      Finish(access);
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or the stream broke)
      finish(grpc::Status::OK);
      return;
    }
    v1::ClientMessage message;
    if (!grpc::SerializationTraits<v1::ClientMessage>::Deserialize(&in_, &message).ok()) {
      spdlog::warn("client {} sent a message that is not a fp8scope.v1 ClientMessage (or has a string that is not "
                   "UTF-8); stream ended", peer_);
      finish({grpc::StatusCode::INVALID_ARGUMENT,
              "undecodable ClientMessage: not fp8scope.v1 protobuf, or a string field that is not UTF-8"});
      return;
    }
    const grpc::Status s = handle(message);
    if (!s.ok()) {
      finish(s);
      return;
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    out_.pop_front();
    if (!ok) {  // the stream broke: the pending read fails too and finishes it
      out_.clear();
      closed_ = true;
    }
    if (!out_.empty()) {
      StartWrite(&out_.front());
      return;
    }
    writing_ = false;
    if (finish_requested_ && !finish_called_) {
      finish_called_ = true;
      Finish(*finish_requested_);
    }
  }

  void OnDone() override {
    if (policy_subscription_ != 0) deps_.policy->unsubscribe(policy_subscription_);
    service_.untrack(this);
    bool abandoned = false;
    {
      std::lock_guard<std::mutex> lock(assembly_mu_);
      abandoned = assembler_ && assembler_->abandon();
    }
    if (abandoned) deps_.health->sample_dropped("client_gone_mid_sample");
    if (client_) {
      deps_.health->client_disconnected();
      spdlog::info("client {} (job {}, run {}, rank {}) disconnected", peer_, client_->job, client_->run, client_->rank);
    }
    delete this;
  }

  // Drops the sample being received if its last chunk came before `deadline`, and tells the client.
  void expire_stalled(std::chrono::steady_clock::time_point deadline) {
    std::optional<std::uint64_t> id;
    {
      std::lock_guard<std::mutex> lock(assembly_mu_);
      if (!assembler_ || last_chunk_ > deadline) return;
      id = assembler_->abandon();
    }
    if (!id) return;
    deps_.health->sample_dropped("stalled");
    spdlog::warn("client {} sample {}: no chunk for {:.0f} s; dropped as stalled and its memory freed", peer_, *id,
                 std::chrono::duration<double>(deps_.stall_timeout).count());
    v1::ServerMessage ack;
    ack.mutable_ack()->set_sample_id(*id);
    ack.mutable_ack()->set_outcome(v1::SAMPLE_OUTCOME_DROPPED);
    ack.mutable_ack()->set_reason("stalled");
    send(ack);
  }

 private:
  grpc::Status handle(const v1::ClientMessage& m) {
    if (!client_ && !m.has_hello()) {
      return {grpc::StatusCode::FAILED_PRECONDITION, "the first message of a stream must be Hello"};
    }
    switch (m.kind_case()) {
      case v1::ClientMessage::kHello: return on_hello(m.hello());
      case v1::ClientMessage::kChunk: on_chunk(m.chunk()); return grpc::Status::OK;
      case v1::ClientMessage::kStep: return on_scalar(m.step().step(), "step_started", now_seconds());
      case v1::ClientMessage::kScalar: {
        if (!valid_label(m.scalar().name())) {
          return scalar_refused("a name that is not 1.." + std::to_string(kMaxLabelBytes) + " printable ASCII characters");
        }
        return on_scalar(m.scalar().step(), m.scalar().name(), m.scalar().value());
      }
      case v1::ClientMessage::kCounters: on_counters(m.counters()); return grpc::Status::OK;
      case v1::ClientMessage::KIND_NOT_SET: break;
    }
    return {grpc::StatusCode::INVALID_ARGUMENT, "empty ClientMessage"};
  }

  // A step mark or scalar, queued for the history like a sample; dropped and counted when history
  // cannot keep it or the queue holds too many.
  grpc::Status on_scalar(std::uint64_t step, const std::string& name, double value) {
    if (step > kMaxStep) return scalar_refused("a step above " + std::to_string(kMaxStep));
    if (!deps_.queue->push(ScalarMark{client_, now_seconds(), step, name, value})) {
      deps_.health->sample_dropped("scalar_queue_full");
    }
    return grpc::Status::OK;
  }

  // A step mark or scalar history cannot keep: counted and dropped, the stream goes on (told once).
  grpc::Status scalar_refused(const std::string& why) {
    deps_.health->sample_dropped("bad_scalar");
    if (!scalar_refusal_logged_) spdlog::warn("client {} sent a step or scalar with {}; dropped", peer_, why);
    scalar_refusal_logged_ = true;
    return grpc::Status::OK;
  }

  grpc::Status on_hello(const v1::Hello& hello) {
    if (client_) return {grpc::StatusCode::FAILED_PRECONDITION, "Hello sent twice"};
    if (std::optional<Refusal> r = check_hello(hello)) {
      spdlog::warn("client {} refused: {}", peer_, r->message);
      return {grpc::StatusCode::FAILED_PRECONDITION, r->message};
    }
    auto info = std::make_shared<ClientInfo>();
    info->job = hello.job();
    info->run = hello.run();
    info->host = hello.host();
    info->peer = peer_;
    info->rank = hello.rank();
    info->world_size = hello.world_size();
    info->pid = hello.pid();
    client_ = info;
    {
      std::lock_guard<std::mutex> lock(assembly_mu_);
      assembler_.emplace(info, deps_.limits, deps_.budget);
      last_chunk_ = std::chrono::steady_clock::now();
    }
    service_.track(this);
    deps_.health->client_connected();
    spdlog::info("client {} connected: job {}, run {}, rank {}/{}, host {}, pid {}", peer_, info->job, info->run,
                 info->rank, info->world_size, info->host, info->pid);
    v1::ServerMessage welcome;
    v1::Welcome* w = welcome.mutable_welcome();
    w->set_protocol_version(wire::kProtocolVersion);
    w->set_daemon_version(deps_.daemon_version);
    w->set_max_chunk_bytes(deps_.limits.max_chunk_bytes);
    w->set_max_inflight_bytes(deps_.max_inflight_bytes);
    w->set_max_sample_bytes(deps_.limits.max_sample_bytes);
    if (deps_.shared_regions != nullptr) {
      w->set_shared_memory_socket(deps_.shared_regions->path());
      w->set_instance_id(deps_.shared_regions->instance_id());
    }
    send(welcome);
    // The current policy now, and every change later; the listener is removed in OnDone.
    policy_subscription_ = deps_.policy->subscribe(info->job, [this](const SamplingPolicy& p) {
      v1::ServerMessage m;
      *m.mutable_policy() = policy_to_wire(p);
      send(m);
    });
    v1::ServerMessage policy;
    *policy.mutable_policy() = policy_to_wire(deps_.policy->get(info->job));
    send(policy);
    return grpc::Status::OK;
  }

  // The bytes a chunk names in the client's shared memory, read from it into the sample.
  ChunkBytes shared_bytes(const v1::TensorChunk& chunk) const {
    ChunkBytes shared;
    shared.shared = true;
    const auto unreadable = [&](std::string message) {
      shared.unreadable = Refusal{"bad_region", "a chunk " + std::move(message)};
      return shared;
    };
    if (!chunk.data().empty()) return unreadable("carries bytes and names shared memory too");
    if (deps_.shared_regions == nullptr) return unreadable("names shared memory, and this daemon offers none");
    Result<SharedRegions::View> v =
        deps_.shared_regions->view(chunk.shared_region(), chunk.shared_offset(), chunk.shared_bytes());
    if (!v.ok()) return unreadable(v.message());
    shared.shared_size = v.value().bytes;
    shared.read_shared = [view = std::move(v).value()](std::uint8_t* into) { return view.read(into); };
    return shared;
  }

  void on_chunk(const v1::TensorChunk& chunk) {
    const ChunkBytes bytes = chunk.shared_region().empty() ? carried_bytes(chunk) : shared_bytes(chunk);
    deps_.health->bytes_received(bytes.size());
    if (bytes.shared) deps_.health->shared_memory_bytes(bytes.size());
    std::vector<AssemblerEvent> events;
    {
      std::lock_guard<std::mutex> lock(assembly_mu_);
      events = assembler_->add(chunk, bytes);
      last_chunk_ = std::chrono::steady_clock::now();
    }
    for (AssemblerEvent& e : events) {
      v1::ServerMessage ack;
      ack.mutable_ack()->set_sample_id(e.sample_id);
      if (e.kind == AssemblerEvent::Kind::kComplete) {
        // Journaled before the ack: from here the sample is stored or, after a crash, counted lost.
        e.sample->journal = deps_.journal->accept(client_->job, client_->rank);
        if (!e.sample->journal) {
          e.kind = AssemblerEvent::Kind::kDropped;
          e.refusal.reason = "journal_full";
          e.sample.reset();
        }
      }
      if (e.kind == AssemblerEvent::Kind::kComplete) {
        deps_.health->sample_received();
        deps_.queue->push(std::move(*e.sample));
        deps_.health->set_queue_bytes(deps_.budget->used());
        ack.mutable_ack()->set_outcome(v1::SAMPLE_OUTCOME_ACCEPTED);
      } else {
        deps_.health->sample_dropped(e.refusal.reason);
        const bool dropped = e.kind == AssemblerEvent::Kind::kDropped;
        ack.mutable_ack()->set_outcome(dropped ? v1::SAMPLE_OUTCOME_DROPPED : v1::SAMPLE_OUTCOME_REJECTED);
        ack.mutable_ack()->set_reason(e.refusal.reason);
        if (!dropped) spdlog::warn("client {} sample {} rejected: {}", peer_, e.sample_id, e.refusal.message);
      }
      send(ack);
    }
  }

  // The client reports cumulative counts; the metrics get the increase since its last report.
  // Reasons are a closed set (vocabulary/client_drop.h); an unknown one (a newer client's) counts as "other",
  // remembered for the first few so its running total is not counted twice, and counted once
  // beyond that, so neither metric series nor this stream's memory grow with what a client invents.
  void on_counters(const v1::ClientCounters& c) {
    std::uint64_t other = 0;
    for (const auto& [reason, total] : c.dropped()) {
      if (const ClientDropTerm* known = vocabulary::row_named(kClientDrops, reason)) {
        std::uint64_t& seen = client_dropped_[known->name];
        if (total > seen) deps_.health->sample_dropped("client_" + reason, total - seen);
        seen = std::max(seen, total);
        continue;
      }
      const auto it = other_dropped_.find(reason);
      if (it == other_dropped_.end()) {
        if (other_dropped_.size() < kMaxOtherReasons) other_dropped_.emplace(reason, total);
        other += total;
      } else if (total > it->second) {
        other += total - it->second;
        it->second = total;
      }
    }
    if (other > 0) deps_.health->sample_dropped("client_other", other);
  }

  void send(const v1::ServerMessage& m) {
    grpc::ByteBuffer bytes;
    bool own_buffer = false;
    if (!grpc::SerializationTraits<v1::ServerMessage>::Serialize(m, &bytes, &own_buffer).ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    out_.push_back(std::move(bytes));
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
  }

  // Finishes once: after the queued writes when one is in flight.
  void finish(const grpc::Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finish_called_ || finish_requested_) return;
    closed_ = true;
    if (writing_) {
      finish_requested_ = s;
    } else {
      finish_called_ = true;
      Finish(s);
    }
  }

  IngestService& service_;
  const IngestDeps& deps_;
  const std::string peer_;
  grpc::ByteBuffer in_;
  std::shared_ptr<const ClientInfo> client_;
  std::mutex assembly_mu_;  // the assembler is also reached by expire_stalled()
  std::optional<SampleAssembler> assembler_;
  std::chrono::steady_clock::time_point last_chunk_;
  static constexpr std::size_t kMaxOtherReasons = 16;
  std::map<std::string_view, std::uint64_t> client_dropped_;
  std::map<std::string, std::uint64_t> other_dropped_;  // the first unknown reasons and their totals
  bool scalar_refusal_logged_ = false;
  int policy_subscription_ = 0;
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> out_;
  bool writing_ = false;
  bool closed_ = false;  // no more sends
  bool finish_called_ = false;
  std::optional<grpc::Status> finish_requested_;
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* IngestService::Stream(
    grpc::CallbackServerContext* context) {
  return new StreamReactor(*this, context, accepting_.load());
}

void IngestService::track(StreamReactor* stream) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.insert(stream);
}

void IngestService::untrack(StreamReactor* stream) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.erase(stream);
}

void IngestService::expire_stalled() {
  const auto deadline = std::chrono::steady_clock::now() - deps_.stall_timeout;
  // Under the lock a stream cannot finish its OnDone (it untracks itself first).
  std::lock_guard<std::mutex> lock(streams_mu_);
  for (StreamReactor* s : streams_) s->expire_stalled(deadline);
}

}  // namespace fp8scope::server
