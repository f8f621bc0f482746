// Series out of the daemon's history (its --data-dir, opened read-only): a run's scalar per step,
// and which runs have one.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "fp8scope/kernels/status.h"
#include "fp8scope/history/history_reader.h"
#include "fp8scope/insight/loss_signals.h"

namespace fp8scope::insight {

// The run's scalar `name` in step order; with several ranks, the lowest rank's value.
Result<std::vector<ScalarPoint>> scalar_series(const history::HistoryReader& history, const std::string& run,
                                               const std::string& name);

// The runs that have the scalar `name`.
Result<std::set<std::string>> runs_with_scalar(const history::HistoryReader& history, const std::string& name);

}  // namespace fp8scope::insight
