#include "fp8scope/daemon_client/sample_stream.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "fp8scope/wire/wire.h"

namespace fp8scope {
namespace {

std::chrono::steady_clock::time_point after(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

v1::Hello make_hello(const std::string& job, const std::string& run, std::uint32_t rank, std::uint32_t world_size,
                     std::uint32_t pid) {
  v1::Hello hello;
  // Protocol 1, which every daemon reads: protocol 2 samples go only to a daemon whose Welcome
  // says it reads them (SampleStream::send).
  hello.set_protocol_version(wire::kOldestProtocolVersion);
  hello.set_job(job);
  hello.set_run(run);
  hello.set_rank(rank);
  hello.set_world_size(world_size);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  hello.set_host(host);
  hello.set_pid(pid);
  (*hello.mutable_library_versions())["fp8scope"] = FP8SCOPE_VERSION;
  return hello;
}

Result<std::unique_ptr<SampleStream>> SampleStream::open(const ConnectionOptions& options, const v1::Hello& hello,
                                                         double connect_timeout_seconds, PolicyListener on_policy) {
  std::unique_ptr<SampleStream> s(new SampleStream());
  s->options_ = options;
  s->on_policy_ = std::move(on_policy);
  Result<std::shared_ptr<grpc::Channel>> channel = open_channel(options);
  if (!channel.ok()) return channel.status();
  s->channel_ = channel.value();
  // A failed attempt fails here at once; the stream's first write then says why.
  const grpc_connectivity_state state = wait_for_connection(*s->channel_, connect_timeout_seconds);
  if (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE) {
    return Status::error(describe_rpc_error(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, ""), options));
  }
  s->stub_ = v1::Ingest::NewStub(s->channel_);
  authorize(s->context_, options);
  s->stream_ = s->stub_->Stream(&s->context_);
  v1::ClientMessage m;
  *m.mutable_hello() = hello;
  if (!s->stream_->Write(m)) {
    const grpc::Status st = s->stream_->Finish();
    return Status::error(describe_rpc_error(st, options));
  }
  s->reader_ = std::thread([p = s.get()] { p->read_loop(); });
  std::unique_lock<std::mutex> lock(s->mu_);
  const bool ready = s->changed_.wait_until(lock, after(connect_timeout_seconds),
                                            [&] { return (s->have_welcome_ && s->have_policy_) || s->broken_; });
  if (!ready || !s->have_welcome_) {
    lock.unlock();
    // A stream the daemon ended (a refused Hello) keeps the daemon's status: cancel only a wait
    // that timed out.
    if (!ready) s->context_.TryCancel();
    s->reader_.join();
    const grpc::Status st = s->stream_->Finish();
    return Status::error(st.ok() ? "fp8scoped at " + options.endpoint + " sent no Welcome" : describe_rpc_error(st, options));
  }
  return s;
}

SampleStream::~SampleStream() {
  if (reader_.joinable()) {
    context_.TryCancel();
    reader_.join();
  }
}

v1::Policy SampleStream::policy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_;
}

void SampleStream::read_loop() {
  v1::ServerMessage m;
  while (stream_->Read(&m)) {
    std::unique_lock<std::mutex> lock(mu_);
    if (m.has_welcome()) {
      welcome_ = m.welcome();
      have_welcome_ = true;
    } else if (m.has_policy()) {
      policy_ = m.policy();
      have_policy_ = true;
      if (on_policy_) {
        const v1::Policy p = policy_;
        lock.unlock();
        on_policy_(p);
        lock.lock();
      }
    } else if (m.has_ack()) {
      const auto it = inflight_.find(m.ack().sample_id());
      if (it != inflight_.end()) {
        inflight_bytes_ -= it->second;
        inflight_.erase(it);
      }
      acks_[m.ack().sample_id()] = m.ack();
    }
    changed_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  broken_ = true;
  changed_.notify_all();
}

Status SampleStream::write(const v1::ClientMessage& m) {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (!stream_->Write(m)) return Status::error("the stream to fp8scoped at " + options_.endpoint + " broke");
  return Status();
}

bool SampleStream::reads(const v1::TensorHeader& header) const {
  return wire::required_protocol(header) <= std::max(welcome_.protocol_version(), wire::kOldestProtocolVersion);
}

Status SampleStream::share_memory(int memfd, const void* base, std::size_t bytes) {
  if (welcome_.shared_memory_socket().empty()) {
    return Status::error("fp8scoped at " + options_.endpoint + " offers no shared memory");
  }
  Result<SharedRegionClient> region =
      SharedRegionClient::register_memfd(welcome_.shared_memory_socket(), welcome_.instance_id(), memfd);
  if (!region.ok()) return region.status();
  std::lock_guard<std::mutex> lock(write_mu_);  // the caller shares before it sends
  shared_ = std::move(region).value();
  shared_base_ = static_cast<const std::uint8_t*>(base);
  shared_bytes_ = bytes;
  return Status();
}

bool SampleStream::shares(std::span<const std::uint8_t> payload) const {
  if (!shared_ || payload.empty()) return false;
  const auto at = reinterpret_cast<std::uintptr_t>(payload.data()), base = reinterpret_cast<std::uintptr_t>(shared_base_);
  return at >= base && at - base <= shared_bytes_ && payload.size() <= shared_bytes_ - (at - base);
}

Result<std::uint64_t> SampleStream::send(v1::TensorHeader header, std::span<const std::uint8_t> payload) {
  if (!reads(header)) {
    return Status::error("fp8scoped at " + options_.endpoint + " reads protocol " +
                         std::to_string(welcome_.protocol_version()) + "; FP4 codes and scale tensors need protocol " +
                         std::to_string(wire::required_protocol(header)) + ": upgrade the daemon");
  }
  std::uint64_t id;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const std::uint64_t window = std::max<std::uint64_t>(welcome_.max_inflight_bytes(), 1);
    changed_.wait(lock, [&] { return broken_ || inflight_bytes_ == 0 || inflight_bytes_ + payload.size() <= window; });
    if (broken_) return Status::error("the stream to fp8scoped at " + options_.endpoint + " broke");
    id = next_id_++;
    inflight_[id] = payload.size();
    inflight_bytes_ += payload.size();
  }
  header.set_payload_bytes(payload.size());
  if (shares(payload)) {
    v1::ClientMessage m;
    v1::TensorChunk* c = m.mutable_chunk();
    c->set_sample_id(id);
    *c->mutable_header() = std::move(header);
    c->set_shared_region(shared_->region_id());
    c->set_shared_offset(static_cast<std::uint64_t>(payload.data() - shared_base_));
    c->set_shared_bytes(payload.size());
    c->set_last(true);
    if (Status s = write(m); !s.ok()) return s;
    return id;
  }
  const std::size_t chunk = std::max<std::uint64_t>(welcome_.max_chunk_bytes(), 1);
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(chunk, payload.size() - offset);
    v1::ClientMessage m;
    v1::TensorChunk* c = m.mutable_chunk();
    c->set_sample_id(id);
    if (offset == 0) *c->mutable_header() = header;
    c->set_offset(offset);
    c->set_data(payload.data() + offset, n);
    offset += n;
    c->set_last(offset == payload.size());
    if (Status s = write(m); !s.ok()) return s;
  } while (offset < payload.size());
  return id;
}

Status SampleStream::send_step(std::uint64_t step) {
  v1::ClientMessage m;
  m.mutable_step()->set_step(step);
  return write(m);
}

Status SampleStream::send_scalar(std::uint64_t step, const std::string& name, double value) {
  v1::ClientMessage m;
  m.mutable_scalar()->set_step(step);
  m.mutable_scalar()->set_name(name);
  m.mutable_scalar()->set_value(value);
  return write(m);
}

Status SampleStream::send_counters(const v1::ClientCounters& counters) {
  v1::ClientMessage m;
  *m.mutable_counters() = counters;
  return write(m);
}

Result<std::map<std::uint64_t, v1::Ack>> SampleStream::wait_for_acks(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_until(lock, after(timeout_seconds), [&] { return inflight_.empty() || broken_; });
  if (!inflight_.empty()) {
    return Status::error(std::to_string(inflight_.size()) + " samples were not acknowledged by fp8scoped at " +
                         options_.endpoint + (broken_ ? " (the stream broke)" : " in time"));
  }
  return acks_;
}

std::map<std::uint64_t, v1::Ack> SampleStream::take_acks() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::uint64_t, v1::Ack> taken;
  taken.swap(acks_);
  return taken;
}

Status SampleStream::close() {
  if (closed_) return Status();
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    stream_->WritesDone();
  }
  reader_.join();
  const grpc::Status st = stream_->Finish();
  if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED) return Status::error(describe_rpc_error(st, options_));
  return Status();
}

}  // namespace fp8scope
