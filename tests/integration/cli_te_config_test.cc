// `--te-config` under hostile and broken input, through the real `fp8scope`: a FIFO, a device, a
// file far past any TE debug config's size, a billion laughs, a key given twice and a key that is
// not text are each refused at once with an error that names the file (and the line, where there
// is one), in every command that reads the option, with or without a daemon.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "support/process.h"
#include "support/temp_dir.h"

using namespace fp8scope::testing;

namespace {

// The commands that read --te-config, none of which may get as far as a daemon or a child here.
std::vector<std::vector<std::string>> commands_reading(const std::string& config) {
  return {{FP8SCOPE_CLI, "policy", "set", "--endpoint", "127.0.0.1:1", "--te-config", config},
          {FP8SCOPE_CLI, "run", "--endpoint", "127.0.0.1:1", "--te-config", config, "--", "true"}};
}

void refused_by_all(const std::string& config, const std::string& why) {
  for (const std::vector<std::string>& argv : commands_reading(config)) {
    INFO(argv[1] << " --te-config " << config);
    const ProcessResult r = run_process(argv, {}, 30.0);
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(config) && Catch::Contains(why));
  }
}

}  // namespace

TEST_CASE("fp8scope --te-config reads only regular files of a bounded size, and says why not", "[cli][te][hostile]") {
  TempDir dir;
  REQUIRE(::mkfifo(dir.file("fifo.yaml").c_str(), 0600) == 0);
  refused_by_all(dir.file("fifo.yaml"), "not a regular file (a FIFO)");
  refused_by_all("/dev/zero", "not a regular file (a character device)");
  // 60,000 sections, 4 MB: refused by its size before any of it is parsed.
  std::ofstream big(dir.file("big.yaml"));
  for (int i = 0; i < 60000; ++i) big << "s" << i << ":\n  enabled: True\n  layers:\n    layer_types: [qkv]\n";
  big.close();
  refused_by_all(dir.file("big.yaml"), "larger than 262144 bytes");
}

TEST_CASE("fp8scope --te-config refuses a billion laughs, a key given twice and a key that is not text", "[cli][te][hostile]") {
  TempDir dir;
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    const char prev = static_cast<char>(c - 1);
    laughs += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
              ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n";
  }
  refused_by_all(dir.write("laughs.yaml", laughs), "values (aliases expanded)");
  refused_by_all(dir.write("twice.yaml",
                           "s:\n  enabled: True\n  layers:\n    layer_types: [qkv]\n  transformer_engine:\n"
                           "    LogFp8TensorStats:\n      enabled: True\n      tensors: [activation]\n"
                           "      stats: [underflows%]\n      freq: 1\n      freq: 2\n"),
                 "twice.yaml:11: s.transformer_engine.LogFp8TensorStats.freq: given twice");
  refused_by_all(dir.write("key.yaml", "s:\n  enabled: True\n  \xff\xfe: 1\n"),
                 "key.yaml:3: s: a key must be printable ASCII");
  // Not UTF-8 (a lone continuation byte) in a value the policy would carry to the daemon.
  refused_by_all(dir.write("value.yaml", "s:\n  enabled: True\n  layers:\n    layer_types: [q\x80kv]\n"),
                 "value.yaml:4: s.layers.layer_types: not valid UTF-8");
}

TEST_CASE("fp8scope run with a TE config that asks for nothing fp8scope samples runs the job, and says so",
          "[cli][te]") {
  TempDir dir;
  // Only a feature that changes the run (TE's FakeQuant): nothing for fp8scope to observe.
  const std::string config =
      dir.write("only_fake_quant.yaml",
                "s:\n  enabled: true\n  layers: {layer_types: [fc1]}\n  transformer_engine:\n"
                "    FakeQuant: {enabled: true, gemms: [fprop], tensors: [activation], quant_format: FP8E4M3}\n");
  // The job's own exit status comes back, and it ran (its output file exists), without the hook.
  const std::string marker = dir.file("ran");
  const ProcessResult r = run_process({FP8SCOPE_CLI, "run", "--endpoint", "127.0.0.1:1", "--te-config", config, "--",
                                       "sh", "-c", "echo \"$LD_PRELOAD\" > " + marker + "; exit 3"},
                                      {}, 30.0);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, Catch::Contains("FakeQuant: changes the job's numerics: not applied") &&
                        Catch::Contains("asks for nothing fp8scope samples") &&
                        Catch::Contains("the command runs without the hook"));
  std::ifstream ran(marker);
  std::string preload;
  REQUIRE(ran.good());
  std::getline(ran, preload);
  CHECK(preload.find("fp8scope") == std::string::npos);
  // policy set has nothing to set: still refused.
  const ProcessResult set = run_process({FP8SCOPE_CLI, "policy", "set", "--endpoint", "127.0.0.1:1", "--te-config",
                                         config}, {}, 30.0);
  CHECK(set.exit_code == 2);
  CHECK_THAT(set.err, Catch::Contains("asks for nothing fp8scope samples"));
}
