// The history read through a daemon's Admin API (QueryHistory, CountHistory, QueryScalars,
// QueryGemmOutputs): compare, advise and report from any machine that can reach the daemon, with
// nothing mounted. Records come in pages (after_id), so a run of any size streams.
#pragma once

#include <memory>

#include "fp8scope/daemon_client/daemon_channel.h"
#include "fp8scope/history/history_reader.h"
#include "fp8scope/v1/fp8scope.grpc.pb.h"

namespace fp8scope {

class RemoteHistoryReader final : public history::HistoryReader {
 public:
  // Connects first (at most timeout_seconds), so an unreachable daemon is one error up front; each
  // call then has timeout_seconds to start answering and as long as its rows keep coming.
  static Result<std::unique_ptr<RemoteHistoryReader>> connect(const ConnectionOptions& options, double timeout_seconds);

  Status query(const history::HistoryFilter& filter,
               const std::function<bool(const history::HistoryRecord&)>& each) const override;
  Result<std::uint64_t> count(const history::HistoryFilter& filter) const override;
  Status query_scalars(const std::string& run, const std::string& name,
                       const std::function<bool(const history::ScalarRecord&)>& each) const override;
  Status query_gemm_outputs(const std::string& run,
                            const std::function<bool(const history::GemmOutputRecord&)>& each) const override;
  std::string location() const override;

  static constexpr std::uint32_t kPageRows = 20000;

 private:
  RemoteHistoryReader(ConnectionOptions options, double timeout_seconds, std::unique_ptr<v1::Admin::Stub> stub)
      : options_(std::move(options)), timeout_seconds_(timeout_seconds), stub_(std::move(stub)) {}
  std::unique_ptr<grpc::ClientContext> context() const;
  Status error(const grpc::Status& status) const;

  ConnectionOptions options_;
  double timeout_seconds_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

}  // namespace fp8scope
