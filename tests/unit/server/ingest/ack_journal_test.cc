// The journal of accepted samples: what a daemon leaves taken when it dies is read back by the
// next, a fresh start frees everything, a full journal refuses instead of forgetting, and a file
// that is not a journal is an error, not a silent reset.
#include "fp8scope/ingest/ack_journal.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <set>

#include "support/temp_dir.h"

using namespace fp8scope::server;

TEST_CASE("slots a daemon did not release are what the next start finds", "[ack_journal]") {
  fp8scope::testing::TempDir dir;
  const std::string path = dir.file("accepted.journal");
  std::uint64_t boot = 0;
  std::set<std::uint64_t> kept;
  {
    auto journal = AckJournal::open(path, 64);
    REQUIRE(journal.ok());
    CHECK(journal.value()->leftovers().empty());
    boot = journal.value()->boot();
    for (int i = 0; i < 10; ++i) {
      const std::optional<JournalTicket> t = journal.value()->accept(i < 5 ? "pretrain" : "sft", 3);
      REQUIRE(t);
      CHECK(t->boot == boot);
      if (i % 2 == 0) {
        journal.value()->release(*t);
      } else {
        kept.insert(t->seq);
      }
    }
    CHECK(journal.value()->in_use() == 5);
  }  // gone without releasing the rest, as a killed daemon is

  auto again = AckJournal::open(path, 64);
  REQUIRE(again.ok());
  CHECK(again.value()->boot() != boot);
  std::set<std::uint64_t> found;
  std::map<std::string, int> jobs;
  for (const AckJournal::Leftover& l : again.value()->leftovers()) {
    CHECK(l.boot == boot);
    CHECK(l.rank == 3);
    found.insert(l.seq);
    ++jobs[l.job];
  }
  CHECK(found == kept);
  CHECK(jobs == std::map<std::string, int>{{"pretrain", 2}, {"sft", 3}});
  CHECK(again.value()->in_use() == 0);
  CHECK_FALSE(again.value()->accept("x", 0));  // nothing is accepted before the leftovers are counted

  REQUIRE(again.value()->start_fresh().ok());
  CHECK(again.value()->leftovers().empty());
  REQUIRE(again.value()->accept("x", 0));
  auto third = AckJournal::open(path + ".other", 64);
  REQUIRE(third.ok());
  CHECK(third.value()->leftovers().empty());
}

TEST_CASE("a full journal refuses the next sample and takes one again once a slot is freed", "[ack_journal]") {
  fp8scope::testing::TempDir dir;
  auto journal = AckJournal::open(dir.file("accepted.journal"), 4);
  REQUIRE(journal.ok());
  std::vector<JournalTicket> taken;
  for (int i = 0; i < 4; ++i) taken.push_back(journal.value()->accept("job", 0).value());
  CHECK_FALSE(journal.value()->accept("job", 0));
  journal.value()->release(taken[2]);
  const std::optional<JournalTicket> again = journal.value()->accept("job", 0);
  REQUIRE(again);
  CHECK(again->slot == taken[2].slot);
  CHECK(again->seq > taken[3].seq);  // ids are not reused within a start
}

TEST_CASE("a long job name is cut to the slot, and a file that is not a journal is refused", "[ack_journal]") {
  fp8scope::testing::TempDir dir;
  const std::string path = dir.file("accepted.journal");
  {
    auto journal = AckJournal::open(path, 8);
    REQUIRE(journal.ok());
    REQUIRE(journal.value()->accept(std::string(200, 'j'), 1));
  }
  auto again = AckJournal::open(path, 8);
  REQUIRE(again.ok());
  REQUIRE(again.value()->leftovers().size() == 1);
  CHECK(again.value()->leftovers()[0].job == std::string(43, 'j'));

  const std::string foreign = dir.file("foreign");
  std::ofstream(foreign) << std::string(128, 'x');
  auto refused = AckJournal::open(foreign, 8);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("not a journal of accepted samples") != std::string::npos);
}

// Issue 26, 5-7: the journal's file as an attacker or a damaged disk leaves it.
TEST_CASE("a journal that is a symbolic link is refused, and nothing is written where it points", "[ack_journal]") {
  fp8scope::testing::TempDir dir;
  const std::string outside = dir.file("outside"), path = dir.file("accepted.journal");
  std::ofstream(outside) << "keep me";
  REQUIRE(symlink(outside.c_str(), path.c_str()) == 0);
  auto refused = AckJournal::open(path, 8);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("a symbolic link") != std::string::npos);
  std::ifstream in(outside);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "keep me");
  // Dangling: no file appears at the target.
  const std::string nowhere = dir.file("nowhere"), dangling = dir.file("dangling.journal");
  REQUIRE(symlink(nowhere.c_str(), dangling.c_str()) == 0);
  CHECK_FALSE(AckJournal::open(dangling, 8).ok());
  CHECK_FALSE(std::ifstream(nowhere).good());
}

TEST_CASE("a journal larger than any journal is refused before it is read", "[ack_journal]") {
  fp8scope::testing::TempDir dir;
  const std::string path = dir.file("accepted.journal");
  { REQUIRE(AckJournal::open(path, 8).ok()); }
  REQUIRE(truncate(path.c_str(), 1ll << 40) == 0);  // sparse: 1 TiB of holes after a valid header
  auto refused = AckJournal::open(path, 8);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("more than any journal's") != std::string::npos);
}

TEST_CASE("slots no daemon wrote are counted unreadable, not lost, and do not reach the log as bytes", "[ack_journal]") {
  fp8scope::testing::TempDir dir;
  const std::string path = dir.file("accepted.journal");
  {
    auto journal = AckJournal::open(path, 64);
    REQUIRE(journal.ok());
    REQUIRE(journal.value()->accept("real-job", 3));
  }
  {
    // Overwrite slots 1..63 with bytes no daemon writes: a non-zero seq, control bytes in the name.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    for (int s = 1; s < 64; ++s) {
      char raw[64];
      for (int i = 0; i < 64; ++i) raw[i] = static_cast<char>((s * 131 + i * 17) | 1);
      raw[20] = 30;  // a job name of 30 bytes, most of them not printable
      f.seekp(64 + 64 * s);
      f.write(raw, sizeof raw);
    }
  }
  auto reopened = AckJournal::open(path, 64);
  REQUIRE(reopened.ok());
  REQUIRE(reopened.value()->leftovers().size() == 1);
  CHECK(reopened.value()->leftovers()[0].job == "real-job");
  CHECK(reopened.value()->unreadable_slots() == 63);
  REQUIRE(reopened.value()->start_fresh().ok());
  CHECK(reopened.value()->unreadable_slots() == 0);
}
