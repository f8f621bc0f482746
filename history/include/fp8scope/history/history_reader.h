// Reading the history, wherever it is: a SQLite file, a PostgreSQL database, or a daemon's Admin
// API (the CLI's remote reader). Every read streams: rows reach `each` as they are read, oldest
// first, and `each` returns false to stop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "fp8scope/history/records.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::history {

class HistoryReader {
 public:
  virtual ~HistoryReader() = default;

  virtual Status query(const HistoryFilter& filter, const std::function<bool(const HistoryRecord&)>& each) const = 0;
  // How many records match the filter (ignoring its limit): the total of a progress bar.
  virtual Result<std::uint64_t> count(const HistoryFilter& filter) const = 0;
  // A run's scalar `name` ("" = any run, any name), in step then rank order.
  virtual Status query_scalars(const std::string& run, const std::string& name,
                               const std::function<bool(const ScalarRecord&)>& each) const = 0;
  // A run's GEMM checks ("" = every run), in step order.
  virtual Status query_gemm_outputs(const std::string& run,
                                    const std::function<bool(const GemmOutputRecord&)>& each) const = 0;
  // Where the rows come from, for messages: a path, a URL without its password, an endpoint.
  virtual std::string location() const = 0;
};

}  // namespace fp8scope::history
