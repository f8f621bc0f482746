// The sampling policy between the wire and the daemon: one conversion each way, for the Ingest
// stream (policies pushed to clients) and the Admin API (get and set).
#pragma once

#include "fp8scope/analysis/policy_store.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/v1/fp8scope.pb.h"

namespace fp8scope::server {

v1::Policy policy_to_wire(const SamplingPolicy& policy);
// A policy as a client sent it: operand or recipe numbers no vocabulary row has are refused.
Result<SamplingPolicy> policy_from_wire(const v1::Policy& policy);

}  // namespace fp8scope::server
