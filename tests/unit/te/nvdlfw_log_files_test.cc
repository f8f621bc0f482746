// The files TE debug log lines go to: laid out as nvdlfw_inspect lays them out, whole lines only
// whatever the disk does, bounded, and never led outside the log dir by a link or a job's name.
#include "fp8scope/te/nvdlfw_log_files.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "support/temp_dir.h"

namespace fp8scope::te {
namespace {

using testing::TempDir;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::unique_ptr<NvdlfwLogFiles> open_files(const std::string& dir, NvdlfwLogFilesOptions o = {}) {
  Result<std::unique_ptr<NvdlfwLogFiles>> files = NvdlfwLogFiles::open(dir, o);
  REQUIRE(files.ok());
  return std::move(files).value();
}

// Every file below `dir`, as paths relative to it.
std::set<std::string> tree(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    out.insert(std::filesystem::relative(e.path(), dir).string());
  }
  return out;
}

TEST_CASE("every legal job name escapes to a legal file name: a long escape keeps its head and a hash") {
  // 200 bytes (the longest label) that escape to 600: past NAME_MAX unless shortened.
  const std::string slashes(200, '/'), slashes_b = std::string(199, '/') + "x";
  const std::string e = escape_job(slashes);
  CHECK(e.size() <= te::kMaxEscapedJob);
  CHECK(e.rfind("%2F%2F", 0) == 0);
  CHECK(e.find("%~") == e.size() - 18);
  CHECK(escape_job(slashes) == e);  // the same name, the same file, across restarts
  CHECK(escape_job(slashes_b) != e);
  // Cut on a %XX boundary whatever the length of the plain head before it.
  for (std::size_t plain = 0; plain < 4; ++plain) {
    const std::string mixed = escape_job(std::string(plain, 'a') + std::string(150, '/'));
    const std::string head = mixed.substr(0, mixed.find("%~"));
    INFO(plain << ": " << head);
    CHECK((head.size() - plain) % 3 == 0);
  }
  CHECK(escape_job(std::string(200, 'a')) == std::string(200, 'a'));  // plain names stay as they are
}

TEST_CASE("a job's name escapes into one path component, and no two names share one") {
  CHECK(escape_job("pretrain-7b_v2.1") == "pretrain-7b_v2.1");
  CHECK(escape_job("../etc") == "%2E.%2Fetc");
  CHECK(escape_job(".") == "%2E");
  CHECK(escape_job("") == "%");
  CHECK(escape_job("a b%") == "a%20b%25");
  // Exhaustive over the names of up to four characters from the characters that matter.
  const std::string alphabet = "./%a-2 ";
  std::set<std::string> names{""}, escaped{escape_job("")};
  std::set<std::string> frontier{""};
  for (int length = 1; length <= 4; ++length) {
    std::set<std::string> next;
    for (const std::string& n : frontier) {
      for (char c : alphabet) next.insert(n + c);
    }
    for (const std::string& n : next) {
      const std::string e = escape_job(n);
      INFO(n << " -> " << e);
      CHECK(e.find('/') == std::string::npos);
      CHECK(e.front() != '.');
      CHECK(escaped.insert(e).second);
    }
    frontier = next;
  }
}

TEST_CASE("lines go where nvdlfw_inspect puts them, a tree a job with per_job, appended across opens") {
  TempDir dir;
  const std::string logs = dir.file("te");
  NvdlfwLogFilesOptions per_job;
  per_job.per_job = true;
  {
    auto files = open_files(logs, per_job);
    CHECK(files->append("job-a", 0, "one\n") == AppendOutcome::kWritten);
    CHECK(files->append("job-a", 3, "three\n") == AppendOutcome::kWritten);
    CHECK(files->append("../b", 0, "b\n") == AppendOutcome::kWritten);
    CHECK(files->bytes() == 4 + 6 + 2);
  }
  CHECK(tree(logs) == std::set<std::string>{
                          "job-a", "job-a/nvdlfw_inspect_statistics_logs",
                          "job-a/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log",
                          "job-a/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-3.log", "%2E.%2Fb",
                          "%2E.%2Fb/nvdlfw_inspect_statistics_logs",
                          "%2E.%2Fb/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"});
  auto again = open_files(logs, per_job);
  CHECK(again->append("job-a", 0, "two\n") == AppendOutcome::kWritten);
  CHECK(read(again->path_of("job-a", 0)) == "one\ntwo\n");  // a restarted daemon keeps what was there
  CHECK(again->bytes() == 8);  // what it has opened: job-a's rank 0 only

  // Without per_job (an export), one tree; truncate starts each file empty once, however often
  // it is closed to stay within max_open.
  NvdlfwLogFilesOptions exported;
  exported.truncate = true;
  exported.max_open = 1;
  std::filesystem::create_directories(dir.file("flat/nvdlfw_inspect_statistics_logs"));
  std::ofstream(dir.file("flat/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-1.log")) << "an older export\n";
  auto flat = open_files(dir.file("flat"), exported);
  for (int round = 0; round < 3; ++round) {
    for (std::uint32_t rank = 0; rank < 3; ++rank) {
      REQUIRE(flat->append("ignored", rank, std::to_string(round) + "\n") == AppendOutcome::kWritten);
    }
  }
  for (std::uint32_t rank = 0; rank < 3; ++rank) CHECK(read(flat->path_of("x", rank)) == "0\n1\n2\n");
  CHECK(flat->path_of("x", 1) == dir.file("flat") + "/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-1.log");
}

TEST_CASE("with rank_dirs each rank's tree is in rank_<rank>/, as BioNeMo's recipes lay them out") {
  TempDir dir;
  const std::string logs = dir.file("te");
  NvdlfwLogFilesOptions rank_dirs;
  rank_dirs.rank_dirs = true;
  {
    auto files = open_files(logs, rank_dirs);
    CHECK(files->append("", 0, "zero\n") == AppendOutcome::kWritten);
    CHECK(files->append("", 2, "two\n") == AppendOutcome::kWritten);
    CHECK(files->path_of("", 2) == logs + "/rank_2/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-2.log");
  }
  CHECK(tree(logs) == std::set<std::string>{"rank_0", "rank_0/nvdlfw_inspect_statistics_logs",
                                            "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log",
                                            "rank_2", "rank_2/nvdlfw_inspect_statistics_logs",
                                            "rank_2/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-2.log"});
  // Per job too, and a link in a rank's place is not followed.
  rank_dirs.per_job = true;
  std::filesystem::create_directories(logs + "/job/x");
  std::filesystem::create_directory_symlink(logs + "/job/x", logs + "/job/rank_1");
  auto files = open_files(logs, rank_dirs);
  CHECK(files->append("job", 0, "a\n") == AppendOutcome::kWritten);
  CHECK(read(logs + "/job/rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log") == "a\n");
  CHECK(files->append("job", 1, "b\n") == AppendOutcome::kFailed);
  CHECK(files->error().find("rank's directory") != std::string::npos);
  CHECK(std::filesystem::is_empty(logs + "/job/x"));
}

TEST_CASE("the files are bounded in bytes and in number") {
  TempDir dir;
  NvdlfwLogFilesOptions o;
  o.per_job = true;
  o.max_bytes = 10;
  o.max_files = 2;
  auto files = open_files(dir.path(), o);
  CHECK(files->append("a", 0, "1234\n") == AppendOutcome::kWritten);
  CHECK(files->append("a", 1, "1234\n") == AppendOutcome::kWritten);
  CHECK(files->append("a", 0, "5\n") == AppendOutcome::kSizeLimit);  // 12 > 10: nothing of it is written
  CHECK(files->append("a", 2, "x\n") == AppendOutcome::kTooManyFiles);
  CHECK(read(files->path_of("a", 0)) == "1234\n");
  CHECK(!std::filesystem::exists(files->path_of("a", 2)));
  CHECK(files->bytes() == 10);
  // logrotate's copytruncate empties a file under the writer: its bytes leave the count.
  std::filesystem::resize_file(files->path_of("a", 0), 0);
  CHECK(files->append("a", 0, "5\n") == AppendOutcome::kWritten);
  CHECK(read(files->path_of("a", 0)) == "5\n");
  CHECK(files->bytes() == 7);
  CHECK(files->append("a", 0, "678\n") == AppendOutcome::kSizeLimit);  // 11 > 10 again
  CHECK(files->append("a", 0, "67\n") == AppendOutcome::kWritten);
  // Bytes that were there count: a second writer on the same dir (a restarted daemon) starts with
  // the 5 of a/0's file once it opens it.
  auto reopened = open_files(dir.path(), o);
  CHECK(reopened->append("a", 0, "123456\n") == AppendOutcome::kSizeLimit);
  CHECK(reopened->bytes() == 5);
}

TEST_CASE("nothing is followed through a link, and only regular files are written") {
  TempDir dir, outside;
  const std::string logs = dir.file("logs");
  std::filesystem::create_directories(logs);
  NvdlfwLogFilesOptions o;
  o.per_job = true;
  std::filesystem::create_directory_symlink(outside.path(), logs + "/linked");
  std::filesystem::create_directories(logs + "/job/nvdlfw_inspect_statistics_logs");
  std::filesystem::create_symlink(outside.file("target.log"),
                                  logs + "/job/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log");
  REQUIRE(::mkfifo((logs + "/job/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-1.log").c_str(), 0600) == 0);
  auto files = open_files(logs, o);
  CHECK(files->append("linked", 0, "x\n") == AppendOutcome::kFailed);
  CHECK(files->error().find(logs + "/linked/nvdlfw_inspect_statistics_logs") == 0);
  CHECK(files->append("job", 0, "x\n") == AppendOutcome::kFailed);  // the file is a link
  // A FIFO: refused without waiting for a reader (none: ENXIO), and with one, as not a regular file.
  CHECK(files->append("job", 1, "x\n") == AppendOutcome::kFailed);
  CHECK(files->error().find("globalrank-1.log: cannot open") != std::string::npos);
  const int reader = ::open((logs + "/job/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-1.log").c_str(),
                            O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  CHECK(files->append("job", 1, "x\n") == AppendOutcome::kFailed);
  CHECK(files->error().find("globalrank-1.log: not a regular file") != std::string::npos);
  ::close(reader);
  CHECK(std::filesystem::is_empty(outside.path()));
  CHECK(files->append("job", 2, "x\n") == AppendOutcome::kWritten);  // the others are unaffected
  CHECK(files->bytes() == 2);
}

TEST_CASE("a write the disk cuts short leaves whole lines, and writing resumes when there is room") {
  TempDir dir;
  auto files = open_files(dir.path());
  REQUIRE(files->append("", 0, "first line\n") == AppendOutcome::kWritten);
  // A file size limit fails writes as a full disk does: part of the block, then an error.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit tight = saved;
  tight.rlim_cur = 16;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &tight) == 0);
  const AppendOutcome cut = files->append("", 0, "a longer second line\n");
  const std::string error = files->error();
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
  std::signal(SIGXFSZ, previous);
  CHECK(cut == AppendOutcome::kFailed);
  CHECK(error.find("write failed: File too large") != std::string::npos);
  CHECK(read(files->path_of("", 0)) == "first line\n");  // the 5 bytes that fit were taken back
  CHECK(files->bytes() == 11);
  CHECK(files->append("", 0, "third\n") == AppendOutcome::kWritten);
  CHECK(read(files->path_of("", 0)) == "first line\nthird\n");
}

TEST_CASE("a log dir that cannot be made is an error naming it") {
  TempDir dir;
  std::ofstream(dir.file("a-file")) << "x";
  Result<std::unique_ptr<NvdlfwLogFiles>> files = NvdlfwLogFiles::open(dir.file("a-file") + "/logs", {});
  REQUIRE(!files.ok());
  CHECK(files.status().message().find(dir.file("a-file") + "/logs: cannot create the directory") == 0);
}

}  // namespace
}  // namespace fp8scope::te
