// fp8scope: the command line. Parses flags, runs one subcommand, returns its exit code.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "fp8scope/cli/admin_commands.h"
#include "fp8scope/cli/advise_command.h"
#include "fp8scope/cli/analyze_command.h"
#include "fp8scope/cli/checkpoint_command.h"
#include "fp8scope/cli/command_suggestion.h"
#include "fp8scope/cli/compare_command.h"
#include "fp8scope/cli/log_command.h"
#include "fp8scope/cli/push_command.h"
#include "fp8scope/cli/report_command.h"
#include "fp8scope/cli/run_command.h"

int main(int argc, char** argv) {
  using namespace fp8scope::cli;
  CLI::App app{"fp8scope: which layers and tensors FP8 hurts, and what to do about it"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("fp8scope ") + FP8SCOPE_VERSION);
  AnalyzeOptions analyze;
  add_analyze_command(app, analyze);
  AdminOptions admin;
  const AdminCommands commands = add_admin_commands(app, admin);
  PushOptions push;
  add_push_command(app, push);
  RunOptions run;
  CLI::App* run_cmd = add_run_command(app, run);
  LogOptions log;
  add_log_command(app, log);
  CompareOptions compare;
  add_compare_command(app, compare);
  AdviseOptions advise;
  add_advise_command(app, advise);
  ReportCommandOptions report;
  add_report_command(app, report);
  CheckpointOptions checkpoint;
  add_checkpoint_command(app, checkpoint);
  // A word that is no command: name it and the one probably meant, not "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
    const std::string word = argv[1];
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      std::cerr << "fp8scope: unknown command '" << word << "'";
      if (const auto meant = closest_command(word, names)) std::cerr << "; did you mean '" << *meant << "'?";
      std::cerr << "\nCommands:";
      for (const std::string& n : names) std::cerr << " " << n;
      std::cerr << "\n(fp8scope --help, or fp8scope COMMAND --help)\n";
      return kUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsage;
  }
  if (app.got_subcommand("analyze")) return run_analyze(analyze, std::cout, std::cerr);
  if (app.got_subcommand("push")) return run_push(push, std::cout, std::cerr);
  if (run_cmd->parsed()) return run_run(run, std::cout, std::cerr);
  if (app.got_subcommand("log")) return run_log(log, std::cout, std::cerr);
  if (app.got_subcommand("compare")) return run_compare(compare, std::cout, std::cerr);
  if (app.got_subcommand("advise")) return run_advise(advise, std::cout, std::cerr);
  if (app.got_subcommand("report")) return run_report(report, std::cout, std::cerr);
  if (app.got_subcommand("checkpoint")) return run_checkpoint(checkpoint, std::cout, std::cerr);
  if (commands.status->parsed()) return run_status(admin, std::cout, std::cerr);
  if (commands.tensors->parsed()) return run_tensors(admin, std::cout, std::cerr);
  if (commands.policy_get->parsed()) return run_policy_get(admin, std::cout, std::cerr);
  if (commands.policy_set->parsed()) return run_policy_set(admin, std::cout, std::cerr);
  if (commands.history->parsed()) return run_history(admin, std::cout, std::cerr);
  return kUsage;
}
