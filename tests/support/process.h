// Running the project's real binaries from tests: start with arguments and environment, capture
// stdout and stderr, wait with a deadline (a hung child is killed, never waited on forever).
#pragma once

#include <string>
#include <vector>

namespace fp8scope::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal or the deadline
  int signal = 0;
  bool timed_out = false;
  std::string out, err;
  long max_rss_kb = 0;  // the child's peak resident memory
};

// Runs argv[0] with argv, extra "KEY=VALUE" entries added to this process's environment, and
// stdin from /dev/null; kills it after timeout_seconds.
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                          double timeout_seconds = 60.0);

// The environment entries `extra` plus what a child with the hook preloaded needs in a sanitizer
// build: ASan checks that its runtime comes first in the library list, which LD_PRELOAD defeats.
std::vector<std::string> preload_env(std::vector<std::string> extra = {});

// The lines of a text file (none when it cannot be read).
std::vector<std::string> lines_of(const std::string& path);

// A child left running (a daemon under test): stopped with SIGTERM then SIGKILL when destroyed.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  int pid() const { return pid_; }
  bool running();
  // Sends sig and waits up to timeout_seconds; returns the exit status (or -signal), or -1000 on timeout.
  int stop(int sig, double timeout_seconds);
  // Waits up to timeout_seconds for the child to exit by itself; the same return values.
  int wait(double timeout_seconds);

 private:
  int pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

}  // namespace fp8scope::testing
