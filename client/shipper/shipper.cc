#include "fp8scope/shipper/shipper.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "fp8scope/shipper/cpu_list.h"
#include "fp8scope/wire/sampling_rule.h"
#include "fp8scope/wire/wire.h"

namespace fp8scope::shipper {
namespace {

constexpr auto kMaxBackoff = std::chrono::seconds(10);
constexpr auto kCounterEvery = std::chrono::seconds(1);
// Idle polling backs off from 1 ms to 16 ms: a quiet ring costs the training machine nothing.
constexpr auto kMinIdleSleep = std::chrono::milliseconds(1), kMaxIdleSleep = std::chrono::milliseconds(16);
constexpr std::size_t kMaxWaitingScalars = 100000;
constexpr double kConnectTimeoutSeconds = 2.0;
constexpr double kFinalAckSeconds = 10.0;

const char* first_env(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return nullptr;
}

Result<std::uint32_t> env_number(std::initializer_list<const char*> names, std::uint32_t fallback) {
  const char* v = first_env(names);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  if (*end != '\0' || n > 0xffffffffu) return Status::error(std::string(*names.begin()) + ": expected a number, got '" + v + "'");
  return static_cast<std::uint32_t>(n);
}

std::string process_name(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? std::string("job") : name;
}

bool parent_alive(pid_t parent) { return getppid() == parent; }

// A ring value as the wire's; UNSPECIFIED, which the daemon refuses, when no row has it (the ring
// is the hook's, and not trusted).
template <class Wire, class Row, std::size_t N>
Wire ring_to_wire(const Row (&rows)[N], std::uint32_t value) {
  const auto v = vocabulary::value_numbered(rows, value);
  return v ? wire::to_wire(*v) : Wire{};
}

shm::PolicyCopy policy_copy(const v1::Policy& p) {
  shm::PolicyCopy c;
  c.version = p.version() == 0 ? 1 : p.version();
  c.every_n_steps = p.every_n_steps();
  c.start_step = p.start_step();
  c.end_step = p.end_step();
  c.max_bytes_per_step = p.max_bytes_per_step();
  c.experts_per_call = p.experts_per_call();
  for (int op : p.operands()) {
    if (const std::optional<Operand> o = wire::from_wire(static_cast<v1::Operand>(op))) {
      c.operand_mask |= 1u << static_cast<std::uint32_t>(*o);
    }
  }
  std::snprintf(c.layer_regex, sizeof c.layer_regex, "%s", p.layer_regex().c_str());
  // The daemon checked each rule; one that still fails here is left out rather than widened.
  for (const v1::SamplingRule& w : p.rules()) {
    if (c.rule_count == kMaxSamplingRules) break;
    if (const std::optional<SamplingRule> r = wire::from_wire(w, nullptr)) c.rules[c.rule_count++] = *r;
  }
  return c;
}

}  // namespace

Result<ShipperConfig> config_from_environment() {
  ShipperConfig c;
  if (const char* e = first_env({"FP8SCOPE_ENDPOINT"})) c.connection.endpoint = e;
  if (const char* e = first_env({"FP8SCOPE_TLS_CA"})) c.connection.tls_ca = e;
  if (const char* e = first_env({"FP8SCOPE_TLS_CERT"})) c.connection.tls_cert = e;
  if (const char* e = first_env({"FP8SCOPE_TLS_KEY"})) c.connection.tls_key = e;
  if (const char* e = first_env({"FP8SCOPE_TOKEN"})) c.connection.token = e;
  if (const char* path = first_env({"FP8SCOPE_TOKEN_FILE"})) {
    std::ifstream in(path);
    if (!in) return Status::error(std::string("FP8SCOPE_TOKEN_FILE: cannot read ") + path);
    std::getline(in, c.connection.token);
  }
  Result<std::uint32_t> parent = env_number({"FP8SCOPE_PARENT_PID"}, 0);
  if (!parent.ok()) return parent.status();
  c.parent = parent.value() != 0 ? static_cast<pid_t>(parent.value()) : getppid();
  Result<std::uint32_t> rank = env_number({"FP8SCOPE_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, 0);
  Result<std::uint32_t> world = env_number({"FP8SCOPE_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, 1);
  if (!rank.ok()) return rank.status();
  if (!world.ok()) return world.status();
  const char* job = first_env({"FP8SCOPE_JOB"});
  const std::string job_name = job != nullptr ? job : process_name(c.parent);
  const char* run = first_env({"FP8SCOPE_RUN"});
  c.hello = make_hello(job_name, run != nullptr ? run : job_name + "-" + std::to_string(c.parent), rank.value(),
                       std::max(world.value(), rank.value() + 1), static_cast<std::uint32_t>(c.parent));
  if (const char* cpus = first_env({"FP8SCOPE_SHIPPER_CPUS"}); cpus != nullptr && *cpus != '\0') {
    Result<std::vector<int>> list = parse_cpu_list(cpus);
    if (!list.ok()) return Status::error("FP8SCOPE_SHIPPER_CPUS: " + list.message());
    c.cpus = std::move(list).value();
  }
  return c;
}

void add_cast(const shm::CastRecord& c, v1::CastPart& w) {
  w.set_source(ring_to_wire<v1::CastSource>(kCastSources, c.source - 1));
  w.set_recipe(ring_to_wire<v1::Recipe>(kRecipeKinds, c.recipe));
  w.set_input_dtype(ring_to_wire<v1::DType>(kDTypes, c.input_dtype));
  w.set_param_dtype(ring_to_wire<v1::DType>(kDTypes, c.param_dtype));
  if (c.activation != 0) w.set_activation(ring_to_wire<v1::Activation>(kActivations, c.activation - 1));
  w.set_rows(c.rows);
  w.set_cols(c.cols);
  w.set_columnwise((c.flags & shm::kCastColumnwise) != 0);
  w.set_transposed((c.flags & shm::kCastTransposed) != 0);
  w.set_zero_centered_gamma((c.flags & shm::kCastZeroCenteredGamma) != 0);
  w.set_stochastic_rounding((c.flags & shm::kCastStochastic) != 0);
  w.set_power_of_2_scales((c.flags & shm::kCastPowerOf2) != 0);
  w.set_two_dimensional((c.flags & shm::kCast2d) != 0);
  w.set_row_scaled((c.flags & shm::kCastRowScaled) != 0);
  w.set_four_over_six((c.flags & shm::kCastFourOverSix) != 0);
  w.set_unmodeled((c.flags & shm::kCastUnmodeled) != 0);
  w.set_epsilon(c.epsilon);
  w.set_activation_limit(c.limit);
  w.set_activation_alpha(c.alpha);
  w.set_activation_linear_offset(c.linear_offset);
  w.set_entry_point(std::string(c.entry_point, strnlen(c.entry_point, sizeof c.entry_point)));
  w.set_bytes(c.bytes);
}

Result<v1::TensorHeader> tensor_header(const shm::RecordHeader& r) {
  v1::TensorHeader h;
  h.set_step(r.step);
  h.set_layer(std::string(r.name, strnlen(r.name, sizeof r.name)));
  h.set_gemm(ring_to_wire<v1::Gemm>(kGemmRoles, r.gemm));
  h.set_operand(ring_to_wire<v1::Operand>(kOperands, r.operand));
  h.set_dtype(ring_to_wire<v1::DType>(kDTypes, r.dtype));
  std::uint64_t numel = 1;
  for (std::uint32_t i = 0; i < r.ndim; ++i) {
    if (r.shape[i] <= 0) return Status::error("non-positive dimension");
    h.add_shape(r.shape[i]);
    numel *= static_cast<std::uint64_t>(r.shape[i]);
  }
  h.set_leading_dimension(r.leading_dimension);
  h.set_scale_inv(r.scale_inv);
  h.set_scale_mode(ring_to_wire<v1::ScaleMode>(kScaleLayouts, r.scale_layout));
  h.set_source_call(std::string(r.source_call, strnlen(r.source_call, sizeof r.source_call)));
  h.set_payload_bytes(r.payload_bytes - r.tokens_bytes);  // the tokens travel in the header
  if (r.scale_layout != static_cast<std::uint32_t>(ScaleLayout::kTensorScalar)) h.set_scale_bytes(r.scale_bytes);
  h.set_k_is_outer(r.k_is_outer != 0);
  h.set_gemm_alpha(r.gemm_alpha);
  if (numel == 0 || r.scale_bytes + r.tokens_bytes > r.payload_bytes) {
    return Status::error("payload is not shape x element size");
  }
  if (r.expert >= 0) h.set_expert(static_cast<std::uint32_t>(r.expert));
  h.set_experts(r.experts);
  h.set_valid_rows(r.valid_rows);
  const std::byte* tokens = shm::RingReader::payload(&r) + (r.payload_bytes - r.tokens_bytes);
  for (std::uint64_t i = 0; i < r.tokens_bytes / 8; ++i) {
    std::uint64_t t;
    std::memcpy(&t, tokens + 8 * i, 8);
    h.add_expert_tokens(t);
  }
  if (r.cast.source != 0) {
    if (r.cast.bytes > r.payload_bytes - r.scale_bytes - r.tokens_bytes) return Status::error("cast part past the payload");
    add_cast(r.cast, *h.mutable_cast());
  }
  return h;
}

Shipper::Shipper(ShipperConfig config, shm::Header* segment)
    : config_(std::move(config)), segment_(segment), reader_(segment) {}

void Shipper::connect() {
  auto on_policy = [this](const v1::Policy& p) { shm::write_policy(segment_, policy_copy(p)); };
  Result<std::unique_ptr<SampleStream>> s =
      SampleStream::open(config_.connection, config_.hello, kConnectTimeoutSeconds, on_policy);
  if (!s.ok()) {
    if (!outage_reported_) {
      std::fprintf(stderr, "fp8scope-shipper: %s; samples are dropped and counted until it answers\n",
                   s.status().message().c_str());
      outage_reported_ = true;
    }
    next_connect_ = std::chrono::steady_clock::now() + backoff_;
    backoff_ = std::min<std::chrono::milliseconds>(backoff_ * 2, kMaxBackoff);
    return;
  }
  stream_ = std::move(s).value();
  backoff_ = std::chrono::milliseconds(250);
  if (outage_reported_) std::fprintf(stderr, "fp8scope-shipper: connected to fp8scoped at %s\n", config_.connection.endpoint.c_str());
  outage_reported_ = false;
  std::memset(reported_this_stream_, 0, sizeof reported_this_stream_);
  segment_->shipper_connected.store(1, std::memory_order_relaxed);
  share_ring();
  while (stream_ && !scalars_waiting_.empty()) {
    const v1::ScalarEvent& e = scalars_waiting_.front();
    if (!stream_->send_scalar(e.step(), e.name(), e.value()).ok()) {
      disconnect("the stream broke");
      break;
    }
    scalars_waiting_.pop_front();
  }
  report_counters();
}

// Samples then travel by reference into the ring, when the daemon is on this host and offers it:
// the daemon copies each out of the ring once instead of receiving it through the socket.
void Shipper::share_ring() {
  if (config_.ring_fd < 0 || stream_->welcome().shared_memory_socket().empty()) return;
  const Status shared = stream_->share_memory(config_.ring_fd, segment_, config_.ring_bytes);
  if (!shared.ok() && !share_refusal_reported_) {
    std::fprintf(stderr, "fp8scope-shipper: streaming samples instead of sharing memory with fp8scoped: %s\n",
                 shared.message().c_str());
    share_refusal_reported_ = true;
  }
}

void Shipper::release_held() {
  for (const auto& [id, record] : held_) reader_.release(record);
  held_.clear();
}

void Shipper::disconnect(const std::string& why) {
  if (!stream_) return;
  collect_acks();
  release_held();  // their fate is unknown, as for any sample in flight when a stream breaks
  for (std::uint32_t i = 0; i < kClientDropCount; ++i) reported_[i] += reported_this_stream_[i];
  std::memset(reported_this_stream_, 0, sizeof reported_this_stream_);
  stream_.reset();
  segment_->shipper_connected.store(0, std::memory_order_relaxed);
  std::fprintf(stderr, "fp8scope-shipper: lost fp8scoped at %s (%s); reconnecting\n", config_.connection.endpoint.c_str(),
               why.c_str());
  outage_reported_ = true;
  next_connect_ = std::chrono::steady_clock::now() + backoff_;
}

bool Shipper::handle(const shm::RecordHeader& r) {
  switch (r.kind) {
    case shm::RecordKind::kSample: {
      if (!stream_) {
        shm::count_drop(segment_, shm::DropReason::kDaemonUnreachable);
        return false;
      }
      Result<v1::TensorHeader> header = tensor_header(r);
      if (!header.ok()) {
        shm::count_drop(segment_, shm::DropReason::kUnsupportedLayout);
        return false;
      }
      if (!stream_->reads(header.value()) && wire::required_protocol(header.value()) == 4) {
        wire::strip_cast(header.value());  // a protocol 3 daemon gets the codes, as a GEMM sample
      }
      if (!stream_->reads(header.value()) && wire::required_protocol(header.value()) == 3) {
        wire::fold_expert_into_layer(header.value());  // a protocol 2 daemon keeps experts apart by name
      }
      if (!stream_->reads(header.value())) {  // FP4 or a scale tensor for a protocol 1 daemon
        shm::count_drop(segment_, shm::DropReason::kDaemonTooOld);
        return false;
      }
      const std::span<const std::uint8_t> payload(reinterpret_cast<const std::uint8_t*>(shm::RingReader::payload(&r)),
                                                  header.value().payload_bytes());
      const bool by_reference = stream_->shares(payload);
      Result<std::uint64_t> sent = stream_->send(std::move(header).value(), payload);
      if (!sent.ok()) {
        shm::count_drop(segment_, shm::DropReason::kDaemonUnreachable);
        disconnect("the stream broke");
        return false;
      }
      segment_->samples_sent.fetch_add(1, std::memory_order_relaxed);
      segment_->bytes_sent.fetch_add(r.payload_bytes, std::memory_order_relaxed);
      if (by_reference) held_[sent.value()] = &r;
      return by_reference;
    }
    case shm::RecordKind::kStep:
      if (stream_ && !stream_->send_step(r.step).ok()) disconnect("the stream broke");
      return false;
    case shm::RecordKind::kScalar: {
      const std::string name(r.name, strnlen(r.name, sizeof r.name));
      if (stream_ && stream_->send_scalar(r.step, name, r.value).ok()) return false;
      if (stream_) disconnect("the stream broke");
      if (scalars_waiting_.size() >= kMaxWaitingScalars) {
        scalars_waiting_.pop_front();
        ++scalars_lost_;
      }
      v1::ScalarEvent e;
      e.set_step(r.step);
      e.set_name(name);
      e.set_value(r.value);
      scalars_waiting_.push_back(std::move(e));
      return false;
    }
    case shm::RecordKind::kPadding: return false;
  }
  return false;
}

void Shipper::collect_acks() {
  if (!stream_) return;
  for (const auto& [id, ack] : stream_->take_acks()) {
    if (ack.outcome() != v1::SAMPLE_OUTCOME_ACCEPTED) shm::count_drop(segment_, shm::DropReason::kDaemonRefused);
    if (const auto held = held_.find(id); held != held_.end()) {  // copied out: the hook may reuse it
      reader_.release(held->second);
      held_.erase(held);
    }
  }
}

void Shipper::report_counters() {
  if (!stream_) return;
  v1::ClientCounters c;
  c.set_samples_sent(segment_->samples_sent.load(std::memory_order_relaxed));
  c.set_bytes_sent(segment_->bytes_sent.load(std::memory_order_relaxed));
  std::uint64_t now[kClientDropCount];
  for (std::uint32_t i = 0; i < kClientDropCount; ++i) {
    now[i] = segment_->dropped[i].load(std::memory_order_relaxed);
    // daemon_refused: the daemon counted those itself.
    if (kClientDrops[i].value != shm::DropReason::kDaemonRefused && now[i] > reported_[i]) (*c.mutable_dropped())[kClientDrops[i].name] = now[i] - reported_[i];
  }
  if (!stream_->send_counters(c).ok()) {
    disconnect("the stream broke");
    return;
  }
  for (std::uint32_t i = 0; i < kClientDropCount; ++i) reported_this_stream_[i] = now[i] > reported_[i] ? now[i] - reported_[i] : 0;
}

void Shipper::print_summary() const {
  std::ostringstream drops;
  std::uint64_t total = 0;
  for (std::uint32_t i = 0; i < kClientDropCount; ++i) {
    const std::uint64_t n = segment_->dropped[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    drops << (total == 0 ? "" : ", ") << kClientDrops[i].name << "=" << n;
    total += n;
  }
  if (total == 0 && scalars_lost_ == 0) return;
  std::fprintf(stderr, "fp8scope-shipper: job %s run %s: %llu samples sent, %llu dropped (%s)%s\n",
               config_.hello.job().c_str(), config_.hello.run().c_str(),
               static_cast<unsigned long long>(segment_->samples_sent.load()), static_cast<unsigned long long>(total),
               drops.str().c_str(),
               scalars_lost_ ? (", " + std::to_string(scalars_lost_) + " scalars lost").c_str() : "");
}

int Shipper::run() {
  auto next_counters = std::chrono::steady_clock::now() + kCounterEvery;
  auto idle_sleep = kMinIdleSleep;
  for (;;) {
    const bool parent_gone = !parent_alive(config_.parent);
    if (!stream_ && std::chrono::steady_clock::now() >= next_connect_) connect();
    bool drained = false, busy = false;
    for (int i = 0; i < 64; ++i) {
      const shm::RecordHeader* r = nullptr;
      const shm::RingReader::Next next = reader_.next(&r);
      if (next == shm::RingReader::Next::kEmpty) {
        drained = true;
        break;
      }
      if (next == shm::RingReader::Next::kCorrupt) {
        std::fprintf(stderr, "fp8scope-shipper: the shared ring held a malformed record; skipped what was queued\n");
        shm::count_drop(segment_, shm::DropReason::kRingFull);
        continue;
      }
      if (!handle(*r)) reader_.release(r);
      busy = true;
    }
    collect_acks();
    if (std::chrono::steady_clock::now() >= next_counters) {
      report_counters();
      next_counters = std::chrono::steady_clock::now() + kCounterEvery;
    }
    if (parent_gone && drained) break;
    idle_sleep = busy ? kMinIdleSleep : std::min(idle_sleep * 2, kMaxIdleSleep);
    if (drained) std::this_thread::sleep_for(idle_sleep);
  }
  if (stream_) {
    (void)stream_->wait_for_acks(kFinalAckSeconds);
    collect_acks();
    release_held();
    report_counters();
    if (stream_) (void)stream_->close();
  }
  print_summary();
  return 0;
}

}  // namespace fp8scope::shipper
