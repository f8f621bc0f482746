#include "fp8scope/services/admin_service.h"

#include <spdlog/spdlog.h>

#include <deque>

#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/kernels/statistics_table.h"
#include "fp8scope/kernels/scale_layout.h"
#include "fp8scope/services/policy_wire.h"
#include "fp8scope/wire/history_rows.h"
#include "fp8scope/wire/wire.h"

namespace fp8scope::server {
namespace {

constexpr std::uint32_t kMaxHistoryRows = 100000;  // the proto's "0 = 100000", and the most a query returns
constexpr int kRowsPerBatch = 500;
// History queries streaming at once; more are refused (RESOURCE_EXHAUSTED) so that their pages
// stay inside the memory bound (docs/operations.md).
constexpr int kMaxHistoryQueries = 4;

grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* context, const grpc::Status& status) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// Sends prepared batches one after another, then finishes.
template <typename Batch>
class BatchWriter final : public grpc::ServerWriteReactor<Batch> {
 public:
  BatchWriter(std::deque<Batch> batches, grpc::Status status) : batches_(std::move(batches)), status_(std::move(status)) {
    next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    batches_.pop_front();
    next();
  }
  void OnDone() override { delete this; }

 private:
  void next() {
    if (batches_.empty() || !status_.ok()) {
      this->Finish(status_);
    } else {
      this->StartWrite(&batches_.front());
    }
  }
  std::deque<Batch> batches_;
  grpc::Status status_;
};

// The rows a read yields, in batches of kRowsPerBatch.
template <typename Batch>
struct Batches {
  std::deque<Batch> batches;
  auto* add() {
    if (batches.empty() || batches.back().rows_size() >= kRowsPerBatch) batches.emplace_back();
    return batches.back().add_rows();
  }
};

// Streams a history query a page (kRowsPerBatch rows) at a time, reading the next page only once
// the last one is written: one page in memory, however many rows the query returns.
class HistoryPageWriter final : public grpc::ServerWriteReactor<v1::HistoryBatch> {
 public:
  HistoryPageWriter(const history::HistoryReader& reader, history::HistoryFilter filter, std::atomic<int>& open)
      : reader_(reader), filter_(std::move(filter)), left_(filter_.limit), open_(open) {
    next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    } else if (last_) {
      Finish(grpc::Status::OK);
    } else {
      next();
    }
  }
  void OnDone() override {
    open_.fetch_sub(1);
    delete this;
  }

 private:
  void next() {
    batch_.Clear();
    history::HistoryFilter page = filter_;
    page.limit = std::min<std::uint32_t>(left_, kRowsPerBatch);
    const Status s = reader_.query(page, [&](const history::HistoryRecord& r) {
      wire::record_to_wire(r, *batch_.add_rows());
      filter_.after_id = r.id;
      return true;
    });
    if (!s.ok()) return Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, s.message()));
    const auto rows = static_cast<std::uint32_t>(batch_.rows_size());
    if (rows == 0) return Finish(grpc::Status::OK);
    left_ -= rows;
    last_ = rows < page.limit || left_ == 0;
    StartWrite(&batch_);
  }

  const history::HistoryReader& reader_;
  history::HistoryFilter filter_;  // after_id moves on with each page
  std::uint32_t left_;
  bool last_ = false;
  std::atomic<int>& open_;
  v1::HistoryBatch batch_;
};

Result<history::HistoryFilter> history_filter(const v1::HistoryQuery& q) {
  Result<history::HistoryFilter> read = wire::filter_from_wire(q);
  if (!read.ok()) return read.status();
  history::HistoryFilter f = std::move(read).value();
  if (std::string error; !LayerPattern::compile(f.layer_regex, &error)) {
    return Status::error("layer_regex: not a layer pattern: " + error);
  }
  f.limit = q.limit() == 0 || q.limit() > kMaxHistoryRows ? kMaxHistoryRows : q.limit();
  return f;
}

grpc::Status to_grpc(const Status& s) {
  return s.ok() ? grpc::Status::OK : grpc::Status(grpc::StatusCode::UNAVAILABLE, s.message());
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::GetStatus(grpc::CallbackServerContext* context, const v1::GetStatusRequest*,
                                                  v1::DaemonStatus* r) {
  if (grpc::Status a = deps_.access->check(*context); !a.ok()) return finish(context, a);
  r->set_daemon_version(deps_.daemon_version);
  r->set_uptime_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  r->set_backend(deps_.backend);
  r->set_clients(static_cast<std::uint32_t>(deps_.health->clients()));
  r->set_samples_received(deps_.health->samples_received());
  r->set_samples_analyzed(deps_.health->samples_analyzed());
  for (const auto& [reason, n] : deps_.health->dropped()) (*r->mutable_samples_dropped())[reason] = n;
  r->set_received_bytes(deps_.health->received_bytes());
  r->set_queue_bytes(deps_.budget->used());
  r->set_queue_budget_bytes(deps_.budget->capacity());
  r->set_records_stored(deps_.history->stored());
  const history::HistoryStore::WriteHealth writes = deps_.history->write_health();
  r->set_history_error(writes.error);
  r->set_history_pending(writes.pending);
  r->set_history_records_lost(writes.lost);
  r->set_acknowledged_lost_before_start(deps_.health->acknowledged_lost_before_start());
  r->set_acknowledged_lost(deps_.health->acknowledged_lost());
  r->set_unstored_samples(deps_.journal->in_use());
  r->set_data_dir(deps_.data_dir);
  r->set_history(deps_.history->location());
  r->set_series(deps_.series->series());
  r->set_series_suppressed(deps_.series->suppressed());
  return finish(context, grpc::Status::OK);
}

namespace {

void tensor_to_wire(const TensorSummary& t, v1::TensorSummary& w) {
  v1::TensorKey* key = w.mutable_key();
  key->set_job(t.job);
  key->set_run(t.run);
  key->set_rank(t.rank);
  key->set_layer(t.layer);
  key->set_gemm(wire::to_wire(t.gemm));
  key->set_operand(wire::to_wire(t.operand));
  w.set_step(t.step);
  w.set_dtype(wire::to_wire(t.dtype));
  w.mutable_shape()->Add(t.shape.begin(), t.shape.end());
  w.set_time(t.time);
  if (t.expert) w.set_expert(*t.expert);
  if (t.expert_tokens) w.set_expert_tokens(*t.expert_tokens);
  for (const RecipeSummary& r : t.recipes) {
    v1::RecipeStats* rs = w.add_recipes();
    rs->set_recipe(r.caster.name());
    rs->set_format(format_name(r.format));
    rs->set_scale(r.scale);
    rs->set_scale_max(r.scale_max);
    rs->set_scale_current(r.scale_current);
    if (r.scale_layout != ScaleLayout::kNone) rs->set_scale_mode(wire::to_wire(r.scale_layout));
    rs->set_source(data_source_name(r.source));
    for (const auto& [st, value] : r.statistics) (*rs->mutable_statistics())[st->key] = value;
  }
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::ListTensors(grpc::CallbackServerContext* context,
                                                    const v1::ListTensorsRequest* request,
                                                    v1::ListTensorsResponse* response) {
  if (grpc::Status a = deps_.access->check(*context); !a.ok()) return finish(context, a);
  const std::optional<Caster> recipe = Caster::from_name(request->recipe());
  if (!request->recipe().empty() && !recipe) {
    return finish(context, {grpc::StatusCode::INVALID_ARGUMENT, "recipe: expected observed or one of " +
                                                                    recipe_name_list() + ", got '" + request->recipe() + "'"});
  }
  auto listed = deps_.tensors->list(request->sort(), request->top(), recipe,
                                    request->has_expert() ? std::optional<std::uint32_t>(request->expert()) : std::nullopt);
  if (!listed.ok()) return finish(context, {grpc::StatusCode::INVALID_ARGUMENT, listed.message()});
  for (const TensorSummary& t : listed.value().tensors) tensor_to_wire(t, *response->add_tensors());
  response->set_total(listed.value().total);
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::GetPolicy(grpc::CallbackServerContext* context,
                                                  const v1::GetPolicyRequest* request, v1::Policy* response) {
  if (grpc::Status a = deps_.access->check(*context); !a.ok()) return finish(context, a);
  *response = policy_to_wire(deps_.policy->get(request->job()));
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* AdminService::SetPolicy(grpc::CallbackServerContext* context,
                                                  const v1::SetPolicyRequest* request, v1::Policy* response) {
  if (grpc::Status a = deps_.access->check(*context); !a.ok()) return finish(context, a);
  Result<SamplingPolicy> asked = policy_from_wire(request->policy());
  if (!asked.ok()) return finish(context, {grpc::StatusCode::INVALID_ARGUMENT, asked.message()});
  Result<SamplingPolicy> set =
      request->inherit() ? deps_.policy->inherit(asked.value().job) : deps_.policy->set(std::move(asked).value());
  if (!set.ok()) return finish(context, {grpc::StatusCode::INVALID_ARGUMENT, set.message()});
  *response = policy_to_wire(set.value());
  if (request->inherit()) {
    spdlog::info("job {} follows the default policy again (set by {})", request->policy().job(), context->peer());
  } else {
    spdlog::info("policy version {} {} set by {}: {}", response->version(),
                 response->job().empty() ? "(the default)" : "for job " + response->job(), context->peer(),
                 response->ShortDebugString());
  }
  return finish(context, grpc::Status::OK);
}

grpc::ServerWriteReactor<v1::HistoryBatch>* AdminService::QueryHistory(grpc::CallbackServerContext* context,
                                                                       const v1::HistoryQuery* q) {
  using Writer = BatchWriter<v1::HistoryBatch>;
  if (grpc::Status a = deps_.access->check(*context); !a.ok()) return new Writer({}, a);
  Result<history::HistoryFilter> f = history_filter(*q);
  if (!f.ok()) return new Writer({}, {grpc::StatusCode::INVALID_ARGUMENT, f.message()});
  if (history_queries_.fetch_add(1) >= kMaxHistoryQueries) {
    history_queries_.fetch_sub(1);
    return new Writer({}, {grpc::StatusCode::RESOURCE_EXHAUSTED,
                           std::to_string(kMaxHistoryQueries) + " history queries are running; retry when one is done"});
  }
  return new HistoryPageWriter(deps_.history->reader(), std::move(f).value(), history_queries_);
}

grpc::ServerUnaryReactor* AdminService::CountHistory(grpc::CallbackServerContext* context, const v1::HistoryQuery* q,
                                                     v1::HistoryCount* response) {
  if (grpc::Status a = deps_.access->check(*context); !a.ok()) return finish(context, a);
  Result<history::HistoryFilter> f = history_filter(*q);
  if (!f.ok()) return finish(context, {grpc::StatusCode::INVALID_ARGUMENT, f.message()});
  Result<std::uint64_t> n = deps_.history->reader().count(f.value());
  if (!n.ok()) return finish(context, to_grpc(n.status()));
  response->set_records(n.value());
  return finish(context, grpc::Status::OK);
}

grpc::ServerWriteReactor<v1::ScalarBatch>* AdminService::QueryScalars(grpc::CallbackServerContext* context,
                                                                     const v1::ScalarQuery* q) {
  using Writer = BatchWriter<v1::ScalarBatch>;
  if (grpc::Status a = deps_.access->check(*context); !a.ok()) return new Writer({}, a);
  Batches<v1::ScalarBatch> out;
  const Status s = deps_.history->reader().query_scalars(q->run(), q->name(), [&](const history::ScalarRecord& r) {
    wire::scalar_to_wire(r, *out.add());
    return true;
  });
  return new Writer(std::move(out.batches), to_grpc(s));
}

grpc::ServerWriteReactor<v1::GemmOutputBatch>* AdminService::QueryGemmOutputs(grpc::CallbackServerContext* context,
                                                                             const v1::GemmOutputQuery* q) {
  using Writer = BatchWriter<v1::GemmOutputBatch>;
  if (grpc::Status a = deps_.access->check(*context); !a.ok()) return new Writer({}, a);
  Batches<v1::GemmOutputBatch> out;
  const Status s = deps_.history->reader().query_gemm_outputs(q->run(), [&](const history::GemmOutputRecord& r) {
    wire::gemm_output_to_wire(r, *out.add());
    return true;
  });
  return new Writer(std::move(out.batches), to_grpc(s));
}

}  // namespace fp8scope::server
