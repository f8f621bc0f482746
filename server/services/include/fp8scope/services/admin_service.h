// The Admin service: status, tensors, policy, history. Small unary handlers; history streams in
// batches because it can be large.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "fp8scope/services/access.h"
#include "fp8scope/ingest/ack_journal.h"
#include "fp8scope/ingest/byte_budget.h"
#include "fp8scope/v1/fp8scope.grpc.pb.h"
#include "fp8scope/export/health_metrics.h"
#include "fp8scope/history/history_store.h"
#include "fp8scope/analysis/policy_store.h"
#include "fp8scope/export/tensor_series.h"
#include "fp8scope/export/tensor_table.h"

namespace fp8scope::server {

struct AdminDeps {
  PolicyStore* policy;
  TensorTable* tensors;
  history::HistoryStore* history;
  HealthMetrics* health;
  TensorSeries* series;
  ByteBudget* budget;
  const AckJournal* journal;
  const AccessCheck* access;
  std::string daemon_version;
  std::string backend;
  std::string data_dir;
};

class AdminService final : public v1::Admin::CallbackService {
 public:
  explicit AdminService(AdminDeps deps) : deps_(std::move(deps)) {}

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context, const v1::GetStatusRequest* request,
                                      v1::DaemonStatus* response) override;
  grpc::ServerUnaryReactor* ListTensors(grpc::CallbackServerContext* context, const v1::ListTensorsRequest* request,
                                        v1::ListTensorsResponse* response) override;
  grpc::ServerUnaryReactor* GetPolicy(grpc::CallbackServerContext* context, const v1::GetPolicyRequest* request,
                                      v1::Policy* response) override;
  grpc::ServerUnaryReactor* SetPolicy(grpc::CallbackServerContext* context, const v1::SetPolicyRequest* request,
                                      v1::Policy* response) override;
  grpc::ServerWriteReactor<v1::HistoryBatch>* QueryHistory(grpc::CallbackServerContext* context,
                                                           const v1::HistoryQuery* request) override;
  grpc::ServerUnaryReactor* CountHistory(grpc::CallbackServerContext* context, const v1::HistoryQuery* request,
                                         v1::HistoryCount* response) override;
  grpc::ServerWriteReactor<v1::ScalarBatch>* QueryScalars(grpc::CallbackServerContext* context,
                                                         const v1::ScalarQuery* request) override;
  grpc::ServerWriteReactor<v1::GemmOutputBatch>* QueryGemmOutputs(grpc::CallbackServerContext* context,
                                                                 const v1::GemmOutputQuery* request) override;

 private:
  AdminDeps deps_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::atomic<int> history_queries_{0};  // QueryHistory calls streaming now
};

}  // namespace fp8scope::server
