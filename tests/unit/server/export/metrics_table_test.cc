// The metrics table follows Prometheus conventions and covers what the issue and DESIGN.md name.
#include "fp8scope/export/metrics_table.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

using namespace fp8scope::server;

TEST_CASE("every metric the design names is in the table, with its labels", "[metrics_table]") {
  for (const char* name :
       {"fp8scope_underflow_ratio", "fp8scope_underflow_nonzero_ratio", "fp8scope_overflow_ratio", "fp8scope_mse",
        "fp8scope_cosine_similarity", "fp8scope_sqnr_db", "fp8scope_amax", "fp8scope_amin", "fp8scope_scale",
        "fp8scope_scale_current", "fp8scope_nonfinite_ratio", "fp8scope_last_step", "fp8scope_samples_total",
        "fp8scope_samples_dropped_total", "fp8scope_received_bytes_total", "fp8scope_queue_bytes",
        "fp8scope_analysis_seconds", "fp8scope_clients", "fp8scope_series_suppressed_total"}) {
    INFO(name);
    CHECK(find_metric(name) != nullptr);
  }
  CHECK(find_metric("fp8scope_underflow_ratio")->labels == kRecipeLabels);
  CHECK(find_metric("fp8scope_amax")->labels == kTensorLabels);
  CHECK(find_metric("fp8scope_samples_dropped_total")->labels == std::vector<std::string>{"reason"});
}

TEST_CASE("names follow Prometheus conventions, labels stay bounded", "[metrics_table]") {
  const std::regex name("fp8scope_[a-z0-9_]+");
  const std::set<std::string> allowed = {"job",    "layer",   "gemm",    "operand",   "format",
                                         "recipe", "reason",  "version", "backend", "accumulate", "log2",
                                         "statistic",   // the expert family's: three statistics
                                         "source"};     // cast samples': cast, recompute or noop
  std::set<std::string> seen;
  for (const MetricDef& m : metric_definitions()) {
    INFO(m.name);
    CHECK(std::regex_match(m.name, name));
    CHECK(seen.insert(m.name).second);
    CHECK((m.kind == MetricKind::kCounter) == (m.name.size() > 6 && m.name.substr(m.name.size() - 6) == "_total"));
    if (m.unit == "ratio") CHECK(m.name.find("_ratio") != std::string::npos);
    for (const std::string& l : m.labels) CHECK(allowed.count(l) == 1);  // no step, pid or free text
  }
  const auto json = nlohmann::json::parse(metrics_table_json());
  CHECK(json.size() == metric_definitions().size());
}
