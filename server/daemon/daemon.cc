#include "fp8scope/daemon/daemon.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "fp8scope/services/access.h"
#include "fp8scope/ingest/ack_journal.h"
#include "fp8scope/services/admin_service.h"
#include "fp8scope/daemon/analysis_pipeline.h"
#include "fp8scope/ingest/byte_budget.h"
#include "fp8scope/daemon/data_dir.h"
#include "fp8scope/daemon/engine_choice.h"
#include "fp8scope/wire/wire.h"
#include "fp8scope/history/history_store.h"
#include "fp8scope/export/health_metrics.h"
#include "fp8scope/ingest/ingest_queue.h"
#include "fp8scope/services/ingest_service.h"
#include "fp8scope/export/metrics_table.h"
#include "fp8scope/analysis/policy_store.h"
#include "fp8scope/daemon/server_security.h"
#include "fp8scope/ingest/shared_regions.h"
#include "fp8scope/export/tensor_series.h"
#include "fp8scope/export/tensor_table.h"

namespace fp8scope::server {
namespace {

// /health: 200 with fp8scope_up 1 while the daemon serves (Kubernetes probes, compose health checks).
class HealthEndpoint final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily f;
    f.name = "fp8scope_up";
    f.help = find_metric("fp8scope_up")->help;
    f.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric m;
    m.gauge.value = 1;
    f.metric.push_back(m);
    return {f};
  }
};

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? name : "localhost";
}

// Of the samples the previous daemon accepted, those whose records never reached the history.
Result<std::vector<AckJournal::Leftover>> unstored_leftovers(const history::HistoryStore& history,
                                                             const std::vector<AckJournal::Leftover>& accepted) {
  std::vector<history::SampleTicket> tickets;
  for (const AckJournal::Leftover& l : accepted) tickets.push_back({l.boot, l.seq});
  Result<std::vector<history::SampleTicket>> unstored = history.unstored(tickets);
  if (!unstored.ok()) return unstored.status();
  std::set<std::pair<std::uint64_t, std::uint64_t>> lost;
  for (const history::SampleTicket& t : unstored.value()) lost.emplace(t.boot, t.seq);
  std::vector<AckJournal::Leftover> out;
  for (const AckJournal::Leftover& l : accepted) {
    if (lost.count({l.boot, l.seq})) out.push_back(l);
  }
  return out;
}

std::string host_port(const std::string& address, int port) {
  if (address.rfind("unix:", 0) == 0) return address;
  return address.substr(0, address.rfind(':')) + ":" + std::to_string(port);
}

Status write_ready_file(const std::string& path, const std::string& grpc, const std::string& metrics) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << nlohmann::json{{"grpc", grpc}, {"metrics", metrics}, {"pid", getpid()}}.dump() << "\n";
    if (!out) return Status::error("--ready-file " + path + ": cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::error("--ready-file " + path + ": " + ec.message());
  return Status();
}

// Whether the host gives shared memory huge pages when a mapping asks (the hook's rings do,
// shm/ring_memory.h): the setting's bracketed word is not "never" or "deny". Unknown (no file)
// counts as yes: nothing to say.
bool shared_memory_huge_pages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string text;
  if (!std::getline(in, text)) return true;
  return text.find("[never]") == std::string::npos && text.find("[deny]") == std::string::npos;
}

// The socket where clients on this host register shared memory (--shared-memory-socket): none
// when off; with auto, the data dir's, or none (said once) when it cannot be made there.
Result<std::unique_ptr<SharedRegions>> open_shared_regions(const DaemonConfig& c) {
  if (c.shared_memory_socket == "off") return std::unique_ptr<SharedRegions>();
  const bool automatic = c.shared_memory_socket == "auto";
  const std::string path = automatic
                               ? (std::filesystem::absolute(c.data_dir) / "shared-memory.sock").lexically_normal().string()
                               : std::filesystem::absolute(c.shared_memory_socket).lexically_normal().string();
  Result<std::unique_ptr<SharedRegions>> regions = SharedRegions::open(path);
  if (regions.ok()) {
    spdlog::info("clients on this host may share memory at {}", path);
    if (!shared_memory_huge_pages()) {
      spdlog::info("shared memory has 4 KiB pages only here (transparent_hugepage/shmem_enabled): samples copy at "
                   "about 0.6 of memcpy, about 0.9 with 'advise' (docs/operations.md)");
    }
    return regions;
  }
  if (!automatic) return Status::error("--shared-memory-socket: " + regions.message());
  spdlog::warn("{}; clients stream their samples instead (--shared-memory-socket PATH puts it elsewhere)",
               regions.message());
  return std::unique_ptr<SharedRegions>();
}

}  // namespace

struct Daemon::Impl {
  DaemonConfig config;
  std::string backend;
  std::string grpc_address, metrics_address;
  AccessCheck access{""};
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<HealthEndpoint> health_endpoint = std::make_shared<HealthEndpoint>();
  std::unique_ptr<prometheus::Exposer> exposer;
  std::unique_ptr<ByteBudget> budget;
  std::unique_ptr<IngestQueue> queue;
  std::unique_ptr<StatsEngine> engine;
  std::unique_ptr<GpuGemmCheck> gemm;
  PolicyStore policy;
  std::unique_ptr<TensorSeries> series;
  std::unique_ptr<HealthMetrics> health;
  std::unique_ptr<DataDirLock> data_dir_lock;  // taken first, released last
  std::unique_ptr<AckJournal> journal;  // outlives the history, whose writer releases its slots
  std::unique_ptr<history::HistoryStore> history;
  std::unique_ptr<TeLogWriter> te_log;  // outlives the pipeline that feeds it
  std::unique_ptr<TensorTable> tensors;
  std::unique_ptr<AnalysisPipeline> pipeline;
  std::unique_ptr<SharedRegions> shared_regions;  // outlives the streams that read its regions
  std::unique_ptr<IngestService> ingest;
  std::unique_ptr<AdminService> admin;
  std::unique_ptr<grpc::Server> server;
  std::thread housekeeping;
  std::mutex mu;
  std::condition_variable stop_cv;
  bool stopping = false;

  Result<std::vector<AckJournal::Leftover>> open_stores();
  Status open_metrics();
  Status build_stages();
  Status settle_leftovers(const std::vector<AckJournal::Leftover>& lost);
  Status serve(const std::shared_ptr<grpc::ServerCredentials>& creds);

  void housekeep() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop_cv.wait_for(lock, std::chrono::seconds(1), [&] { return stopping; })) {
      series->expire();
      ingest->expire_stalled();
      health->set_series(series->series(), series->suppressed());
      health->set_records_stored(history->stored());
      const history::HistoryStore::WriteHealth writes = history->write_health();
      health->set_history_writes(writes.failed_writes, writes.lost, writes.pending, !writes.error.empty());
      health->set_queue_bytes(budget->used());
      health->set_unstored_samples(journal->in_use());
      if (te_log) health->set_te_log(te_log->counts());
    }
  }
};

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Daemon::~Daemon() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->housekeeping.joinable()) impl_->housekeeping.join();
  if (impl_->server) impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

std::string Daemon::grpc_address() const { return impl_->grpc_address; }
std::string Daemon::metrics_address() const { return impl_->metrics_address; }

// Opening: the data dir, the history and the journal, and what the previous daemon acknowledged
// and did not store (its journal's samples without records).
Result<std::vector<AckJournal::Leftover>> Daemon::Impl::open_stores() {
  const DaemonConfig& c = config;
  if (Status s = prepare_data_dir(c.data_dir); !s.ok()) return s;
  Result<std::unique_ptr<DataDirLock>> lock = DataDirLock::take(c.data_dir);
  if (!lock.ok()) return lock.status();
  data_dir_lock = std::move(lock).value();
  history::HistoryStoreOptions history_options;
  history_options.writer = host_name() + ":" + std::filesystem::absolute(c.data_dir).lexically_normal().string();
  history_options.retention_days = c.retention_days;
  Result<std::unique_ptr<history::HistoryStore>> opened =
      history::HistoryStore::open(c.history.empty() ? c.data_dir : c.history, history_options);
  if (!opened.ok()) return opened.status();
  history = std::move(opened).value();
  Result<std::unique_ptr<AckJournal>> j = AckJournal::open(c.data_dir + "/accepted.journal");
  if (!j.ok()) return j.status();
  journal = std::move(j).value();
  if (!c.te_log_dir.empty()) {
    TeLogLimits limits;
    limits.max_bytes = c.te_log_max_bytes;
    limits.rank_dirs = c.te_log_layout == "rank-dirs";
    Result<std::unique_ptr<TeLogWriter>> writer = TeLogWriter::open(c.te_log_dir, limits);
    if (!writer.ok()) return writer.status();
    te_log = std::move(writer).value();
    spdlog::info("writing TE debug-API statistics logs below {}", c.te_log_dir);
  }
  return unstored_leftovers(*history, journal->leftovers());
}

Status Daemon::Impl::open_metrics() {
  try {
    exposer = std::make_unique<prometheus::Exposer>(config.metrics);
  } catch (const std::exception& e) {
    return Status::error("--metrics " + config.metrics + ": cannot listen: " + e.what());
  }
  exposer->RegisterCollectable(registry, "/metrics");
  exposer->RegisterCollectable(health_endpoint, "/health");
  metrics_address = host_port(config.metrics, exposer->GetListeningPorts().front());
  return Status();
}

// Counts and says what the previous daemon lost, then starts the journal afresh.
Status Daemon::Impl::settle_leftovers(const std::vector<AckJournal::Leftover>& lost) {
  if (!lost.empty()) {
    std::map<std::string, std::uint64_t> by_job;
    for (const AckJournal::Leftover& l : lost) ++by_job[l.job];
    constexpr std::size_t kJobsNamed = 10;  // the log line stays short whatever the file held
    std::string jobs;
    std::size_t named = 0;
    for (const auto& [job, n] : by_job) {
      if (named++ == kJobsNamed) {
        jobs += ", and " + std::to_string(by_job.size() - kJobsNamed) + " more jobs";
        break;
      }
      jobs += (jobs.empty() ? "" : ", ") + job + ": " + std::to_string(n);
    }
    spdlog::warn("the previous fp8scoped stopped before storing {} samples it had acknowledged as accepted ({})",
                 lost.size(), jobs);
    health->acknowledged_lost_before_start(lost.size());
  }
  if (journal->unreadable_slots() != 0) {
    spdlog::warn("{}: {} taken slots no fp8scoped wrote (a damaged file) were not counted as lost samples",
                 journal->path(), journal->unreadable_slots());
  }
  if (Status s = journal->start_fresh(); !s.ok()) return s;
  if (Status s = history->forget_stored_samples(); !s.ok()) return s;
  // A sample whose records could not be written (the history's last attempt at shutdown failed)
  // keeps its slot: the next start finds it without records and counts it lost.
  history->on_stored_sample([j = journal.get(), h = health.get()](const JournalTicket& t, bool stored) {
    if (stored) {
      j->release(t);
    } else {
      h->acknowledged_lost(1);
    }
  });
  return Status();
}

// The stages a sample passes through, wired to each other.
Status Daemon::Impl::build_stages() {
  const DaemonConfig& c = config;
  budget = std::make_unique<ByteBudget>(c.queue_budget_bytes);
  queue = std::make_unique<IngestQueue>(c.analysis_workers);
  SeriesOptions series_options;
  series_options.max_series = c.max_series;
  series_options.ttl = std::chrono::duration<double>(c.series_ttl_seconds);
  series_options.per_rank = c.per_rank_metrics;
  series_options.per_expert = c.per_expert_metrics;
  series = std::make_unique<TensorSeries>(*registry, series_options);
  health = std::make_unique<HealthMetrics>(*registry, kDaemonVersion, backend, c.queue_budget_bytes);
  health->set_records_stored(history->stored());
  tensors = std::make_unique<TensorTable>(c.max_tensors);
  pipeline = std::make_unique<AnalysisPipeline>(
      PipelineDeps{queue.get(), budget.get(), engine.get(), &policy, series.get(), health.get(), history.get(),
                   journal.get(), tensors.get(), gemm.get(), c.max_tensors,
                   OutlierChannelOptions{c.outlier_channel_factor, static_cast<std::size_t>(c.outlier_channel_window)},
                   MetricExport{metric_recipe_kinds(c.metric_recipes).value(), c.log2_histogram_metrics},
                   te_log.get()});
  Result<std::unique_ptr<SharedRegions>> regions = open_shared_regions(c);
  if (!regions.ok()) return regions.status();
  shared_regions = std::move(regions).value();
  ingest = std::make_unique<IngestService>(IngestDeps{
      &policy, budget.get(), queue.get(), health.get(), journal.get(), &access,
      AssemblerLimits{c.max_sample_bytes, wire::kDaemonChunkBytes}, c.max_inflight_bytes, kDaemonVersion,
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(c.stall_timeout_seconds)),
      shared_regions.get()});
  admin = std::make_unique<AdminService>(AdminDeps{&policy, tensors.get(), history.get(), health.get(), series.get(),
                                                   budget.get(), journal.get(), &access, kDaemonVersion, backend,
                                                   c.data_dir});
  return Status();
}

// The gRPC server with the limits every stream lives under.
Status Daemon::Impl::serve(const std::shared_ptr<grpc::ServerCredentials>& creds) {
  const DaemonConfig& c = config;
  grpc::ServerBuilder builder;
  // gRPC binds with SO_REUSEPORT by default: a second daemon (or anyone on the host) on the same
  // port would start and take half the connections. A port in use must be a start-up error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int port = 0;
  builder.AddListeningPort(c.listen, creds, &port);
  builder.RegisterService(ingest.get());
  builder.RegisterService(admin.get());
  // One chunk plus its header; anything larger is refused by gRPC itself.
  builder.SetMaxReceiveMessageSize(static_cast<int>(wire::kDaemonChunkBytes + (64 << 10)));
  // A fixed flow-control window per stream: gRPC's bandwidth probing grows it to several MiB per
  // stream, memory outside any budget; a 1 MiB window is as fast on loopback (ingest_bench).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, static_cast<int>(wire::kDaemonChunkBytes));
  // A peer that stops answering pings (a stopped or vanished process, a dead link) is disconnected
  // within the stall timeout: a ping after half of it without traffic, and half of it for the answer.
  const int keepalive_ms = static_cast<int>(c.stall_timeout_seconds * 500);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // an idle stream is pinged too
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  server = builder.BuildAndStart();
  if (!server || (c.listen.rfind("unix:", 0) != 0 && port == 0)) {
    return Status::error("--listen " + c.listen +
                         ": cannot listen: the address is in use (another fp8scoped?) or not valid on this host");
  }
  grpc_address = host_port(c.listen, port);
  return Status();
}

Result<std::unique_ptr<Daemon>> Daemon::start(const DaemonConfig& c) {
  if (Status s = validate(c); !s.ok()) return s;
  auto d = std::make_unique<Impl>();
  d->config = c;
  if (!c.token_file.empty()) {
    Result<std::string> token = read_token_file(c.token_file);
    if (!token.ok()) return token.status();
    d->access = AccessCheck(token.value());
  }
  Result<std::shared_ptr<grpc::ServerCredentials>> creds = server_credentials(c);
  if (!creds.ok()) return creds.status();
  Result<EngineChoice> engine = choose_engine(c);
  if (!engine.ok()) return engine.status();
  d->backend = engine.value().backend;
  d->engine = std::move(engine.value().engine);
  d->gemm = std::move(engine.value().gemm);
  Result<std::vector<AckJournal::Leftover>> lost = d->open_stores();
  if (!lost.ok()) return lost.status();
  if (Status s = d->open_metrics(); !s.ok()) return s;
  if (Status s = d->build_stages(); !s.ok()) return s;
  if (Status s = d->settle_leftovers(lost.value()); !s.ok()) return s;
  if (Status s = d->serve(creds.value()); !s.ok()) return s;
  d->pipeline->start();
  d->housekeeping = std::thread([impl = d.get()] { impl->housekeep(); });
  if (!c.ready_file.empty()) {
    if (Status s = write_ready_file(c.ready_file, d->grpc_address, d->metrics_address); !s.ok()) return s;
  }
  spdlog::info("fp8scoped {} serving gRPC on {}, metrics on http://{}/metrics, backend {}, history {}", kDaemonVersion,
               d->grpc_address, d->metrics_address, d->backend, d->history->location());
  return std::unique_ptr<Daemon>(new Daemon(std::move(d)));
}

int Daemon::run_until(ShutdownSignal& signal) {
  const int sig = signal.wait();
  Impl& d = *impl_;
  spdlog::info("signal {}: stopping; draining the queue for up to {} s", sig, d.config.drain_seconds);
  const auto drain_deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(d.config.drain_seconds));
  d.ingest->stop_accepting();
  // Streams are long-lived: give them a moment to finish their current sample, then cancel them.
  d.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  const std::uint64_t dropped = d.pipeline->drain(drain_deadline);
  const Status flushed = d.history->flush();
  if (dropped > 0) spdlog::warn("drain deadline passed: {} queued samples were dropped", dropped);
  if (const std::uint32_t unstored = d.journal->in_use(); unstored > 0) {
    spdlog::warn("{} samples acknowledged as accepted were not stored; the next start counts them as lost", unstored);
  }
  if (!flushed.ok()) {
    spdlog::error("history flush failed: {}", flushed.message());
    return 1;
  }
  if (const std::uint64_t lost = d.history->write_health().lost; lost > 0) {
    spdlog::warn("history: {} records were lost while writes failed during this run", lost);
  }
  spdlog::info("stopped: {} samples analyzed, {} records in {}", d.health->samples_analyzed(), d.history->stored(),
               d.history->location());
  return 0;
}

}  // namespace fp8scope::server
