// The daemon's promise for an ACCEPTED ack: a sample acknowledged as accepted is either stored
// (all its records committed to history) or, when the daemon dies first, counted as lost at the
// next start. Each accepted sample holds a slot in a small fixed-size file in the data dir from
// before its ack until its records are committed. The file is allocated at start and mapped
// shared: taking and freeing a slot is a store to the page cache, which needs no disk space, no
// system call, and survives the process being killed (not the machine losing power).
// The history writes a stored sample's id in the same transaction as its records, so a sample
// stored just before a kill is not counted lost (see HistoryStore::add(SampleTicket)).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fp8scope/history/records.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope::server {

// One accepted sample's place in the journal: which daemon start, which sample of it, which slot.
// The history stores its boot and seq with the sample's records.
using JournalTicket = history::SampleTicket;

class AckJournal {
 public:
  // 64 bytes a slot: 65,536 accepted samples can wait for their records at once (4 MiB).
  static constexpr std::uint32_t kDefaultSlots = 65536;

  // A sample the previous daemon accepted and had not stored when it stopped.
  struct Leftover {
    std::uint64_t boot = 0, seq = 0;
    std::uint32_t rank = 0;
    std::string job;
  };

  // Opens (or creates and allocates) the journal at `path`; what a previous daemon left there is
  // kept for leftovers() until start_fresh().
  static Result<std::unique_ptr<AckJournal>> open(const std::string& path, std::uint32_t slots = kDefaultSlots);
  ~AckJournal();
  AckJournal(const AckJournal&) = delete;
  AckJournal& operator=(const AckJournal&) = delete;

  const std::vector<Leftover>& leftovers() const { return leftovers_; }
  // Taken slots no daemon could have written (a damaged file): neither samples nor counted lost.
  std::uint64_t unreadable_slots() const { return unreadable_slots_; }
  // Clears what the previous daemon left (after the caller has counted it) for this start.
  Status start_fresh();

  // Takes a slot for a sample about to be acknowledged as accepted; nothing when every slot is
  // taken: the sample must then be dropped, not accepted.
  std::optional<JournalTicket> accept(const std::string& job, std::uint32_t rank);
  // The sample's records are stored, or it is accounted for elsewhere (a counted drop).
  void release(const JournalTicket& ticket);

  std::uint32_t in_use() const;
  std::uint64_t boot() const { return boot_; }
  const std::string& path() const { return path_; }

 private:
  AckJournal(std::string path, int fd, std::uint32_t slots, std::uint64_t boot);
  struct Slot;
  Slot* slot(std::uint32_t i) const;

  const std::string path_;
  const int fd_;
  const std::uint32_t slots_;
  const std::uint64_t boot_;
  void* map_ = nullptr;  // the whole file, once start_fresh() has allocated it
  std::size_t map_bytes_ = 0;
  std::vector<Leftover> leftovers_;
  std::uint64_t unreadable_slots_ = 0;
  mutable std::mutex mu_;
  std::vector<std::uint32_t> free_;  // free slots, taken from the back
  std::uint64_t next_seq_ = 1;
};

}  // namespace fp8scope::server
