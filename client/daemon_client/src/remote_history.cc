#include "fp8scope/daemon_client/remote_history.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "fp8scope/kernels/scale_layout.h"
#include "fp8scope/kernels/statistics_table.h"
#include "fp8scope/wire/history_rows.h"

namespace fp8scope {
namespace {

// A streaming read may take long (millions of rows); it is bounded by the daemon's page size and
// this deadline rather than by the short connect timeout.
constexpr double kStreamSeconds = 3600;

}  // namespace

Result<std::unique_ptr<RemoteHistoryReader>> RemoteHistoryReader::connect(const ConnectionOptions& options,
                                                                          double timeout_seconds) {
  Result<std::shared_ptr<grpc::Channel>> channel = open_channel(options);
  if (!channel.ok()) return channel.status();
  if (wait_for_connection(*channel.value(), timeout_seconds) != GRPC_CHANNEL_READY) {
    // The status call says why in words (refused, no such name, no answer).
    auto stub = v1::Admin::NewStub(channel.value());
    grpc::ClientContext context;
    authorize(context, options);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    v1::DaemonStatus status;
    const grpc::Status s = stub->GetStatus(&context, v1::GetStatusRequest(), &status);
    if (!s.ok()) return Status::error(describe_rpc_error(s, options));
  }
  return std::unique_ptr<RemoteHistoryReader>(
      new RemoteHistoryReader(options, timeout_seconds, v1::Admin::NewStub(channel.value())));
}

std::string RemoteHistoryReader::location() const { return "fp8scoped at " + options_.endpoint; }

std::unique_ptr<grpc::ClientContext> RemoteHistoryReader::context() const {
  auto context = std::make_unique<grpc::ClientContext>();
  authorize(*context, options_);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<std::int64_t>((timeout_seconds_ + kStreamSeconds) * 1000)));
  return context;
}

Status RemoteHistoryReader::error(const grpc::Status& status) const {
  return Status::error(describe_rpc_error(status, options_));
}

Status RemoteHistoryReader::query(const history::HistoryFilter& filter,
                                  const std::function<bool(const history::HistoryRecord&)>& each) const {
  v1::HistoryQuery q = wire::filter_to_wire(filter);
  std::uint64_t left = filter.limit == 0 ? std::numeric_limits<std::uint64_t>::max() : filter.limit;
  for (;;) {
    const std::uint32_t page = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, kPageRows));
    q.set_limit(page);
    auto ctx = context();
    auto reader = stub_->QueryHistory(ctx.get(), q);
    v1::HistoryBatch batch;
    std::uint32_t rows = 0;
    bool stopped = false;
    while (!stopped && reader->Read(&batch)) {
      for (const v1::HistoryRow& row : batch.rows()) {
        ++rows;
        q.set_after_id(row.id());
        const std::optional<history::HistoryRecord> record = wire::record_from_wire(row);
        if (record && !each(*record)) {
          stopped = true;
          break;
        }
      }
    }
    if (stopped) {
      ctx->TryCancel();
      reader->Finish();
      return Status();
    }
    if (const grpc::Status s = reader->Finish(); !s.ok()) return error(s);
    left -= rows;
    if (rows < page || left == 0) return Status();
  }
}

Result<std::uint64_t> RemoteHistoryReader::count(const history::HistoryFilter& filter) const {
  auto ctx = context();
  v1::HistoryCount n;
  if (const grpc::Status s = stub_->CountHistory(ctx.get(), wire::filter_to_wire(filter), &n); !s.ok()) return error(s);
  return n.records();
}

namespace {

// Every row of a server stream of batches, converted, to `each`; a stop cancels the call.
template <typename Batch, typename Convert, typename Each>
grpc::Status read_rows(grpc::ClientContext& ctx, grpc::ClientReader<Batch>& reader, Convert convert, const Each& each) {
  Batch batch;
  while (reader.Read(&batch)) {
    for (const auto& row : batch.rows()) {
      if (!each(convert(row))) {
        ctx.TryCancel();
        reader.Finish();
        return grpc::Status::OK;
      }
    }
  }
  return reader.Finish();
}

}  // namespace

Status RemoteHistoryReader::query_scalars(const std::string& run, const std::string& name,
                                          const std::function<bool(const history::ScalarRecord&)>& each) const {
  v1::ScalarQuery q;
  q.set_run(run);
  q.set_name(name);
  auto ctx = context();
  auto reader = stub_->QueryScalars(ctx.get(), q);
  const grpc::Status s = read_rows(
      *ctx, *reader,
      wire::scalar_from_wire,
      each);
  return s.ok() ? Status() : error(s);
}

Status RemoteHistoryReader::query_gemm_outputs(const std::string& run,
                                               const std::function<bool(const history::GemmOutputRecord&)>& each) const {
  v1::GemmOutputQuery q;
  q.set_run(run);
  auto ctx = context();
  auto reader = stub_->QueryGemmOutputs(ctx.get(), q);
  const grpc::Status s = read_rows(
      *ctx, *reader,
      wire::gemm_output_from_wire,
      each);
  return s.ok() ? Status() : error(s);
}

}  // namespace fp8scope
