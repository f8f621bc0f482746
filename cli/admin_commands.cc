#include "fp8scope/cli/admin_commands.h"

#include "fp8scope/cli/number_checks.h"

#include <CLI/CLI.hpp>
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "fp8scope/history/record_csv.h"
#include "fp8scope/kernels/recipe.h"
#include "fp8scope/kernels/statistics_table.h"
#include "fp8scope/pattern/layer_pattern.h"
#include "fp8scope/te/nvdlfw_log.h"
#include "fp8scope/te/nvdlfw_log_files.h"
#include "fp8scope/vocabulary/printable_text.h"
#include "fp8scope/wire/wire.h"

namespace fp8scope::cli {
namespace {

// A wire value's name as the daemon's labels spell it; "unknown" for a value this CLI does not know.
template <class Wire>
const char* wire_name(Wire value) {
  if (const auto ours = wire::from_wire(value)) {
    if constexpr (std::is_same_v<Wire, v1::Gemm>) return gemm_name(*ours);
    else return operand_name(*ours);
  }
  return "unknown";
}

std::string to_json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

// Runs one admin call with the shared connection handling; `call` returns the gRPC status.
template <class Call>
int with_admin(const AdminOptions& o, std::ostream& err, Call call) {
  Result<ConnectionOptions> conn = resolve(o.connection);
  if (!conn.ok()) {
    err << "fp8scope: " << conn.message() << "\n";
    return kUsage;
  }
  Result<std::unique_ptr<v1::Admin::Stub>> stub = admin_stub(conn.value());
  if (!stub.ok()) {
    err << "fp8scope: " << stub.message() << "\n";
    return kUsage;
  }
  auto context = call_context(conn.value(), o.connection.timeout_seconds);
  const grpc::Status s = call(*stub.value(), *context);
  if (!s.ok()) {
    err << "fp8scope: " << describe_rpc_error(s, conn.value()) << "\n";
    return s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? kUsage : kUnreachable;
  }
  return 0;
}

std::string number(double v, const char* format = "%.4g") {
  if (std::isnan(v)) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

double stat(const v1::RecipeStats& r, const char* key) {
  auto it = r.statistics().find(key);
  return it == r.statistics().end() ? std::nan("") : it->second;
}

const v1::RecipeStats* recipe_of(const v1::TensorSummary& t, const std::string& recipe) {
  for (const auto& r : t.recipes()) {
    if (r.recipe() == recipe) return &r;
  }
  for (const auto& r : t.recipes()) {
    if (r.recipe() == "observed") return &r;  // FP8 data: what was observed
  }
  return nullptr;
}

void print_policy(std::ostream& out, const v1::Policy& p) {
  out << (p.job().empty() ? "the default policy (jobs without their own)" : "job " + p.job() + "'s own policy") << "\n";
  out << "version " << p.version() << "\n";
  if (p.rules_size() > 0) {
    out << "rules (a tensor is sampled when one selects it; module patterns, steps end exclusive)\n";
    for (const v1::SamplingRule& w : p.rules()) {
      std::string error;
      if (const std::optional<SamplingRule> r = wire::from_wire(w, &error)) {
        out << "  " << format_rules({*r}) << "    from " << w.source() << "\n";
      } else {
        out << "  (unreadable: " << error << ")\n";
      }
    }
  } else {
    out << "layer_regex " << (p.layer_regex().empty() ? "(every layer)" : p.layer_regex()) << "\n";
    out << "operands";
    if (p.operands().empty()) out << " x w dy";
    for (int op : p.operands()) out << " " << wire_name(static_cast<v1::Operand>(op));
    out << "\nevery_n_steps " << p.every_n_steps() << "\n";
    out << "start_step " << p.start_step() << "\nend_step " << (p.end_step() == 0 ? "(none)" : std::to_string(p.end_step()))
        << "\n";
  }
  out << "max_bytes_per_step " << (p.max_bytes_per_step() == 0 ? "(no limit)" : std::to_string(p.max_bytes_per_step())) << "\n";
  out << "experts_per_call " << (p.experts_per_call() == 0 ? "(all)" : std::to_string(p.experts_per_call())) << "\n";
  out << "recipes";
  if (p.recipes().empty()) {
    out << " (default:";
    for (RecipeKind k : kDefaultRecipeKinds) out << " " << recipe_name(k);
    out << ")";
  }
  for (int r : p.recipes()) {
    if (auto k = wire::from_wire(static_cast<v1::Recipe>(r))) out << " " << recipe_name(*k);
  }
  out << "\n";
  if (p.block_ranges_size() > 0) {
    out << "block dynamic ranges (TE's max_blockwise_dynamic_range):";
    for (const v1::BlockRange& b : p.block_ranges()) out << " block_size " << b.block_size() << " dims " << b.dims() << ";";
    out << "\n";
  }
}

std::vector<std::string> recipe_names_and_observed() {
  std::vector<std::string> names;
  for (RecipeKind k : kAllRecipeKinds) names.emplace_back(recipe_name(k));
  names.emplace_back("observed");
  return names;
}

}  // namespace

AdminCommands add_admin_commands(CLI::App& app, AdminOptions& o) {
  AdminCommands c;
  c.status = app.add_subcommand("status", "Daemon status: clients, samples, drops, queue, history");
  add_connection_flags(c.status, o.connection);
  c.status->add_flag("--json", o.json, "Print the status as JSON");

  c.tensors = app.add_subcommand("tensors", "Latest statistics of every tensor, worst first");
  add_connection_flags(c.tensors, o.connection);
  // Checked as the flags are read, so a typo is reported before any connection is tried.
  c.tensors->add_option("--sort", o.sort, "underflow, overflow, mse or cosine (worst first)")
      ->check(CLI::IsMember({"underflow", "overflow", "mse", "cosine"}));
  c.tensors->add_option("--top", o.top, "Show only the first N");
  c.tensors->add_option("--recipe", o.recipe, "Recipe whose statistics are shown and sorted (default tensor_current)")
      ->check(CLI::IsMember(recipe_names_and_observed()));
  c.tensors->add_option("--expert", o.expert, "Only this expert's tensors (mixture-of-experts layers)");
  c.tensors->add_flag("--json", o.json, "JSON Lines, one tensor per line");

  CLI::App* policy = app.add_subcommand("policy", "Show or change what training processes sample");
  policy->require_subcommand(1);
  c.policy_get = policy->add_subcommand("get", "Show the sampling policy (the default, or the one a job follows)");
  add_connection_flags(c.policy_get, o.connection);
  c.policy_get->add_option("--job", o.job, "The policy this job follows (its own, or the default)");
  c.policy_get->add_flag("--json", o.json, "Print the policy as JSON");
  c.policy_set = policy->add_subcommand(
      "set", "Change the default sampling policy, or one job's own (fields not given keep their value)");
  add_connection_flags(c.policy_set, o.connection);
  add_policy_flags(c.policy_set, o.policy);
  c.policy_set->add_option("--job", o.job, "Give this job a policy of its own; other jobs keep theirs");
  c.policy_set->add_flag("--inherit", o.inherit, "With --job: drop the job's own policy, it follows the default again");
  c.policy_set->add_flag("--json", o.json, "Print the new policy as JSON");

  c.history = app.add_subcommand("history", "Stored statistic records, oldest first");
  add_connection_flags(c.history, o.connection);
  c.history->add_option("--job", o.job, "Only this job");
  c.history->add_option("--run", o.run, "Only this run");
  c.history->add_option("--layer", o.layer, "Only layers matching this regex");
  c.history->add_option("--expert", o.expert, "Only this expert's records (mixture-of-experts layers)");
  c.history->add_option("--gemm", o.gemm, "fprop, dgrad, wgrad or unknown");
  c.history->add_option("--operand", o.operand, "x, w, dy or out");
  c.history->add_option("--recipe", o.recipe, "Recipe name, or observed")
      ->check(CLI::IsMember(recipe_names_and_observed()));
  c.history->add_option("--min-step", o.min_step, "First step")->check(step_number());
  c.history->add_option("--max-step", o.max_step, "Last step (0 = no bound)")->check(step_number());
  c.history->add_option("--limit", o.limit, "At most this many rows (default 100000)");
  c.history->add_flag("--csv", o.csv, "CSV with every statistic as a column (--format csv)");
  c.history->add_option("--format", o.format,
                        "table, csv, or nvdlfw: the statistics log lines Transformer Engine's debug API writes "
                        "(nvdlfw_inspect), with TE's names and units")
      ->check(CLI::IsMember({"table", "csv", "nvdlfw"}))
      ->excludes(c.history->get_option("--csv"));
  c.history->add_option("--te-log-dir", o.te_log_dir,
                        "With --format nvdlfw: write each rank's lines to DIR/nvdlfw_inspect_statistics_logs/"
                        "nvdlfw_inspect_globalrank-<rank>.log instead of stdout");
  c.history->add_option("--te-log-layout", o.te_log_layout,
                        "With --te-log-dir: nvdlfw (DIR/nvdlfw_inspect_statistics_logs/...), or rank-dirs "
                        "(DIR/rank_<rank>/nvdlfw_inspect_statistics_logs/..., one log_dir a rank, as BioNeMo's recipes "
                        "and their fp8_analysis heatmap have it)")
      ->check(CLI::IsMember({"nvdlfw", "rank-dirs"}));
  c.history->add_option("--te-config", o.te_config,
                        "With --format nvdlfw: only the lines this TE debug-API config logs, where its sections select "
                        "(the config the job ran with `fp8scope run --te-config`): the lines TE writes for that job");
  c.history->add_option("--history", o.history,
                        "Read this history instead of the daemon's: a SQLite file or data dir, or a PostgreSQL URL")
      ->excludes(c.history->get_option("--endpoint"));
  return c;
}

int run_status(const AdminOptions& o, std::ostream& out, std::ostream& err) {
  return with_admin(o, err, [&](v1::Admin::Stub& stub, grpc::ClientContext& ctx) {
    v1::DaemonStatus s;
    const grpc::Status st = stub.GetStatus(&ctx, v1::GetStatusRequest(), &s);
    if (!st.ok()) return st;
    if (o.json) {
      out << to_json(s) << "\n";
      return st;
    }
    out << "fp8scoped " << s.daemon_version() << " at " << o.connection.options.endpoint << ", up "
        << number(s.uptime_seconds(), "%.0f") << " s, backend " << s.backend() << "\n";
    out << "clients " << s.clients() << "\nsamples received " << s.samples_received() << ", analyzed "
        << s.samples_analyzed() << "\n";
    out << "dropped";
    if (s.samples_dropped().empty()) out << " 0";
    for (const auto& [reason, n] : s.samples_dropped()) out << " " << reason << "=" << n;
    out << "\nreceived " << s.received_bytes() << " bytes; queue " << s.queue_bytes() << " of "
        << s.queue_budget_bytes() << " bytes\n";
    out << "history " << s.records_stored() << " records in " << (s.history().empty() ? s.data_dir() : s.history());
    if (!s.history_error().empty()) {
      out << "; WRITES FAILING: " << s.history_error() << " (" << s.history_pending() << " records waiting, retried)";
    }
    if (s.history_records_lost() > 0) out << "; " << s.history_records_lost() << " records lost";
    out << "\naccepted samples: " << s.unstored_samples() << " waiting for their records";
    if (s.acknowledged_lost() > 0) out << "; LOST " << s.acknowledged_lost() << " (dropped unwritten)";
    if (s.acknowledged_lost_before_start() > 0) {
      out << "; LOST BEFORE THIS START " << s.acknowledged_lost_before_start()
          << " (the previous daemon stopped before storing them)";
    }
    out << "\nseries " << s.series()
        << " (suppressed " << s.series_suppressed() << ")\n";
    return st;
  });
}

int run_tensors(const AdminOptions& o, std::ostream& out, std::ostream& err) {
  return with_admin(o, err, [&](v1::Admin::Stub& stub, grpc::ClientContext& ctx) {
    v1::ListTensorsRequest req;
    req.set_sort(o.sort);
    req.set_top(o.top);
    req.set_recipe(o.recipe);
    if (o.expert) req.set_expert(*o.expert);
    v1::ListTensorsResponse resp;
    const grpc::Status st = stub.ListTensors(&ctx, req, &resp);
    if (!st.ok()) return st;
    // Each of a mixture-of-experts layer's experts is a tensor of its own; an older daemon does not
    // filter by expert, so the listing is filtered here too.
    const auto shown = [&](const v1::TensorSummary& t) { return !o.expert || (t.has_expert() && t.expert() == *o.expert); };
    if (o.json) {
      for (const auto& t : resp.tensors()) {
        if (shown(t)) out << to_json(t) << "\n";
      }
      return st;
    }
    const std::string recipe = o.recipe.empty() ? "tensor_current" : o.recipe;
    char line[1024];  // job and layer are up to 200 characters each
    // One daemon serves many jobs: every row names its own.
    // source: what the figures come from: the job's codes alone, a BF16 operand, or the input of
    // the job's own cast (cast; recompute for a fused one).
    std::snprintf(line, sizeof line, "%-16s %-28s %6s %-6s %-3s %4s %7s %-15s %-6s %-9s %11s %11s %10s %9s %10s %10s\n",
                  "job", "layer", "expert", "gemm", "op", "rank", "step", "recipe", "format", "source", "underflow",
                  "overflow", "mse", "cosine", "scale", "current");
    out << line;
    for (const auto& t : resp.tensors()) {
      const v1::RecipeStats* r = recipe_of(t, recipe);
      if (r == nullptr || !shown(t)) continue;
      const std::string expert = t.has_expert() ? std::to_string(t.expert()) : "-";
      std::snprintf(line, sizeof line,
                    "%-16s %-28s %6s %-6s %-3s %4u %7llu %-15s %-6s %-9s %11s %11s %10s %9s %10s %10s\n",
                    t.key().job().c_str(), t.key().layer().c_str(), expert.c_str(), wire_name(t.key().gemm()),
                    wire_name(t.key().operand()),
                    t.key().rank(), static_cast<unsigned long long>(t.step()), r->recipe().c_str(), r->format().c_str(),
                    r->source().empty() ? "-" : r->source().c_str(),
                    number(stat(*r, "underflow_ratio")).c_str(), number(stat(*r, "overflow_ratio")).c_str(),
                    number(stat(*r, "mse")).c_str(), number(stat(*r, "cosine"), "%.6f").c_str(),
                    number(r->scale()).c_str(), number(r->scale_current()).c_str());
      out << line;
    }
    // An older daemon sends no total (0).
    if (resp.total() > static_cast<std::uint64_t>(resp.tensors_size())) {
      out << resp.tensors_size() << " of " << resp.total()
          << " tensors shown (the daemon lists at most 1000): narrow with --sort and --top, or --recipe\n";
    }
    return st;
  });
}

int run_policy_get(const AdminOptions& o, std::ostream& out, std::ostream& err) {
  return with_admin(o, err, [&](v1::Admin::Stub& stub, grpc::ClientContext& ctx) {
    v1::Policy p;
    v1::GetPolicyRequest req;
    req.set_job(o.job);
    const grpc::Status st = stub.GetPolicy(&ctx, req, &p);
    if (st.ok()) o.json ? void(out << to_json(p) << "\n") : print_policy(out, p);
    return st;
  });
}

int run_policy_set(const AdminOptions& o, std::ostream& out, std::ostream& err) {
  for (const std::string& line : te_config_notes(o.policy)) err << "fp8scope policy set: --te-config: " << line << "\n";
  if (Result<v1::Policy> check = apply_policy_flags(o.policy, v1::Policy()); !check.ok()) {
    err << "fp8scope policy set: " << check.message() << "\n";
    return kUsage;
  }
  if (o.inherit && (o.job.empty() || o.policy.any())) {
    err << "fp8scope policy set: --inherit goes with --job and no other policy flag\n";
    return kUsage;
  }
  return with_admin(o, err, [&](v1::Admin::Stub& stub, grpc::ClientContext&) {
    v1::Policy result;
    const grpc::Status st = send_policy(stub, resolve(o.connection).value(), o.connection.timeout_seconds, o.policy,
                                        o.job, o.inherit, &result);
    if (st.ok()) o.json ? void(out << to_json(result) << "\n") : print_policy(out, result);
    return st;
  });
}

namespace {

// The reader `history` uses: --history's store, else the daemon's Admin API. An error line on err.
std::unique_ptr<history::HistoryReader> history_reader(const AdminOptions& o, std::ostream& err) {
  auto reader = open_history_source(o.history, o.connection);
  if (!reader.ok()) err << (o.history.empty() ? "fp8scope: " : "fp8scope history: ") << reader.message() << "\n";
  return reader.ok() ? std::move(reader).value() : nullptr;
}

bool csv_output(const AdminOptions& o) { return o.csv || o.format == "csv"; }

void print_history_header(const AdminOptions& o, std::ostream& out) {
  if (o.format == "nvdlfw") return;  // log lines have no header
  if (csv_output(o)) {
    out << history::record_csv_header();
  } else {
    char line[256];
    std::snprintf(line, sizeof line, "%7s %-10s %-28s %6s %-6s %-3s %4s %-15s %11s %11s %10s %9s\n", "step", "run",
                  "layer", "expert", "gemm", "op", "rank", "recipe", "underflow", "overflow", "mse", "cosine");
    out << line;
  }
}

void print_history_row(const AdminOptions& o, const history::HistoryRecord& r, std::ostream& out) {
  auto value = [&](const char* key) {
    const Statistic* s = find_statistic(key);
    const auto k = static_cast<std::size_t>(s - statistics().data());
    return s != nullptr && k < r.statistics.size() ? r.statistics[k] : std::nan("");
  };
  if (csv_output(o)) {
    out << history::record_csv_row(r);
  } else {
    // Names read from a store (which anything may have written) are printed escaped.
    char line[1024];
    const std::string expert = r.expert >= 0 ? std::to_string(r.expert) : "-";
    std::snprintf(line, sizeof line, "%7llu %-10s %-28s %6s %-6s %-3s %4u %-15s %11s %11s %10s %9s\n",
                  static_cast<unsigned long long>(r.step), printable(r.run).c_str(), printable(r.layer).c_str(),
                  expert.c_str(), gemm_name(r.gemm),
                  operand_name(r.operand), r.rank, r.caster.name(), number(value("underflow_ratio")).c_str(),
                  number(value("overflow_ratio")).c_str(),
                  r.relative_values ? "relative" : number(value("mse")).c_str(),  // CSV has the relative figure
                  number(value("cosine"), "%.6f").c_str());
    out << line;
  }
}

// The query history's flags ask for; nothing (with the reason on err) when a flag is malformed.
std::optional<history::HistoryFilter> history_filter(const AdminOptions& o, std::ostream& err) {
  history::HistoryFilter f;
  f.job = o.job;
  f.run = o.run;
  f.layer_regex = o.layer;
  if (std::string error; !LayerPattern::compile(f.layer_regex, &error)) {
    err << "fp8scope history: --layer: not a layer pattern: " << error << "\n";
    return std::nullopt;
  }
  if (!o.gemm.empty()) {
    f.gemm = gemm_from_name(o.gemm);
    if (!f.gemm) {
      err << "fp8scope history: --gemm: expected fprop, dgrad, wgrad or unknown, got " << o.gemm << "\n";
      return std::nullopt;
    }
  }
  if (!o.operand.empty()) {
    f.operand = operand_from_name(o.operand);
    if (!f.operand) {
      err << "fp8scope history: --operand: expected x, w, dy or out, got " << o.operand << "\n";
      return std::nullopt;
    }
  }
  if (!o.recipe.empty()) {
    f.caster = Caster::from_name(o.recipe);
    if (!f.caster) {
      err << "fp8scope history: --recipe: expected observed or one of " << recipe_name_list() << ", got " << o.recipe
          << "\n";
      return std::nullopt;
    }
  }
  if (o.expert) f.expert = *o.expert;
  f.min_step = o.min_step;
  f.max_step = o.max_step;
  f.limit = o.limit == 0 ? 100000 : o.limit;
  return f;
}

}  // namespace

int run_history(const AdminOptions& o, std::ostream& out, std::ostream& err) {
  const std::optional<history::HistoryFilter> filter = history_filter(o, err);
  if (!filter) return kUsage;
  const history::HistoryFilter& f = *filter;
  if ((!o.te_log_dir.empty() || !o.te_config.empty()) && o.format != "nvdlfw") {
    err << "fp8scope history: --te-log-dir and --te-config go with --format nvdlfw\n";
    return kUsage;
  }
  std::optional<te::NvdlfwLog> te_log;
  if (!o.te_config.empty()) {
    Result<te::TeConfig> config = te::read_te_config(o.te_config);
    if (!config.ok()) {
      err << "fp8scope history: --te-config " << config.status().message() << "\n";
      return kUsage;
    }
    te_log.emplace(config.value());
  } else {
    te_log.emplace();
  }
  std::unique_ptr<history::HistoryReader> reader = history_reader(o, err);
  if (!reader) return o.history.empty() ? kUnreachable : kUsage;
  std::unique_ptr<te::NvdlfwLogFiles> te_files;
  if (!o.te_log_dir.empty()) {
    te::NvdlfwLogFilesOptions files;
    files.truncate = true;  // an export: the files hold this answer alone
    files.rank_dirs = o.te_log_layout == "rank-dirs";
    files.max_files = std::numeric_limits<std::size_t>::max();
    Result<std::unique_ptr<te::NvdlfwLogFiles>> opened = te::NvdlfwLogFiles::open(o.te_log_dir, files);
    if (!opened.ok()) {
      err << "fp8scope history: --te-log-dir " << opened.status().message() << "\n";
      return kUsage;
    }
    te_files = std::move(opened).value();
  }
  bool te_failed = false;
  // The header comes with the first row (or the end of an empty answer), so a failed read prints
  // its one error line and nothing else.
  bool header = false;
  const Status s = reader->query(f, [&](const history::HistoryRecord& r) {
    if (o.expert && r.expert != static_cast<std::int64_t>(*o.expert)) return true;  // an older daemon sends every expert
    if (!header) print_history_header(o, out);
    header = true;
    if (o.format != "nvdlfw") {
      print_history_row(o, r, out);
      return true;
    }
    std::string block;  // a record's lines, all of its rank
    for (const te::NvdlfwLine& line : te_log->lines(r)) block += line.text + "\n";
    if (!te_files) {
      out << block;
    } else if (!block.empty() && te_files->append("", r.rank, block) != te::AppendOutcome::kWritten) {
      te_failed = true;
      return false;
    }
    return true;
  });
  if (te_failed) {
    err << "fp8scope history: --te-log-dir " << te_files->error() << "\n";
    return kUsage;
  }
  if (!s.ok()) {
    err << "fp8scope history: " << s.message() << "\n";
    return o.history.empty() ? kUnreachable : kUsage;
  }
  if (!header) print_history_header(o, out);
  return 0;
}

}  // namespace fp8scope::cli
