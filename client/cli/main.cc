// fp8scope: the command line. Parses flags, runs one subcommand, returns its exit code.
#include <CLI/CLI.hpp>
#include <iostream>

#include "analyze_command.h"

int main(int argc, char** argv) {
  CLI::App app{"fp8scope: FP8 numerics for training jobs (https://example.invalid/fp8scope)"};
  app.require_subcommand(1);
  fp8scope::cli::AnalyzeOptions analyze;
  fp8scope::cli::add_analyze_command(app, analyze);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;  // usage errors are bad input
  }
  if (app.got_subcommand("analyze")) return fp8scope::cli::run_analyze(analyze, std::cout, std::cerr);
  return 2;
}
