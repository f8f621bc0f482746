#include "fp8scope/ingest/ack_journal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstring>
#include <random>

namespace fp8scope::server {

// The file: a 64-byte header (magic, version, slot count), then 64-byte slots. A slot with seq 0
// is free; a taken one names the daemon start (boot), the sample (seq), its rank and job. seq is
// stored last when a slot is taken and first when it is freed, so a kill between leaves no half
// entry that counts.
struct AckJournal::Slot {
  std::uint64_t boot;
  std::atomic<std::uint64_t> seq;
  std::uint32_t rank;
  std::uint8_t job_len;
  char job[64 - 8 - 8 - 4 - 1];  // longer jobs are cut
};

namespace {

constexpr char kMagic[8] = {'F', 'P', '8', 'S', 'A', 'C', 'K', 'J'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kSlotBytes = 64;
constexpr std::size_t kHeaderBytes = 64;
// No journal has more slots than this (64 MiB): a larger file is not one, and is not read.
constexpr std::uint64_t kMaxSlots = 1u << 20;
constexpr std::size_t kJobBytes = kSlotBytes - 21;

std::uint64_t new_boot_id() {
  std::random_device random;
  const auto now = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const std::uint64_t id = (std::uint64_t{random()} << 32 | random()) ^ now;
  return id == 0 ? 1 : id;
}

std::string os_error(const std::string& path, const std::string& what) {
  return path + ": cannot " + what + ": " + std::strerror(errno);
}

// A slot as read back from the file of a daemon that is gone; nothing when it is not one a daemon
// wrote (a boot of 0, a job name past the slot or not printable): garbage, not a lost sample.
std::optional<AckJournal::Leftover> decode_slot(const char* raw) {
  AckJournal::Leftover l;
  std::uint8_t job_len = 0;
  std::memcpy(&l.boot, raw, 8);
  std::memcpy(&l.seq, raw + 8, 8);
  std::memcpy(&l.rank, raw + 16, 4);
  std::memcpy(&job_len, raw + 20, 1);
  if (l.boot == 0 || job_len > kJobBytes) return std::nullopt;
  l.job.assign(raw + 21, job_len);
  const bool printable = std::all_of(l.job.begin(), l.job.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (!printable) return std::nullopt;
  return l;
}

}  // namespace

static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && std::atomic<std::uint64_t>::is_always_lock_free);

Result<std::unique_ptr<AckJournal>> AckJournal::open(const std::string& path, std::uint32_t slots) {
  static_assert(sizeof(Slot) == kSlotBytes, "a slot is 64 bytes on disk");
  static_assert(offsetof(Slot, seq) == 8 && offsetof(Slot, job) == 21, "decode_slot's offsets");
  // A link is not followed: it could point the daemon's writes anywhere it may write.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 && errno == ELOOP) {
    return Status::error(path + ": a symbolic link; the journal of accepted samples must be a regular file in the "
                                "data dir (move the link away to start)");
  }
  if (fd < 0) return Status::error(os_error(path, "open the journal of accepted samples"));
  std::unique_ptr<AckJournal> journal(new AckJournal(path, fd, slots, new_boot_id()));
  struct stat st{};
  if (fstat(fd, &st) != 0) return Status::error(os_error(path, "stat"));
  const std::uint64_t largest = kHeaderBytes + kMaxSlots * kSlotBytes;
  if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > largest) {
    return Status::error(path + ": not a journal of accepted samples (" +
                         (S_ISREG(st.st_mode) ? std::to_string(st.st_size) + " bytes, more than any journal's " +
                                                    std::to_string(largest)
                                              : std::string("not a regular file")) +
                         "); move it away to start");
  }
  if (static_cast<std::size_t>(st.st_size) >= kHeaderBytes) {
    std::vector<char> file(static_cast<std::size_t>(st.st_size));
    if (pread(fd, file.data(), file.size(), 0) != static_cast<ssize_t>(file.size())) {
      return Status::error(os_error(path, "read"));
    }
    std::uint32_t version = 0;
    std::memcpy(&version, file.data() + 8, sizeof version);
    if (std::memcmp(file.data(), kMagic, sizeof kMagic) != 0 || version != kVersion) {
      return Status::error(path + ": not a journal of accepted samples this daemon knows (version " +
                           std::to_string(version) + "); move it away to start");
    }
    // A file cut short (a crash while it was being allocated) holds the slots it has.
    for (std::size_t at = kHeaderBytes; at + kSlotBytes <= file.size(); at += kSlotBytes) {
      std::uint64_t seq = 0;
      std::memcpy(&seq, file.data() + at + 8, 8);
      if (seq == 0) continue;  // free
      std::optional<AckJournal::Leftover> l = decode_slot(file.data() + at);
      if (l) {
        journal->leftovers_.push_back(std::move(*l));
      } else {
        ++journal->unreadable_slots_;
      }
    }
  }
  if (journal->leftovers_.empty() && journal->unreadable_slots_ == 0) {
    if (Status s = journal->start_fresh(); !s.ok()) return s;
  }
  return journal;
}

AckJournal::AckJournal(std::string path, int fd, std::uint32_t slots, std::uint64_t boot)
    : path_(std::move(path)), fd_(fd), slots_(slots), boot_(boot) {}

AckJournal::~AckJournal() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
  ::close(fd_);
}

AckJournal::Slot* AckJournal::slot(std::uint32_t i) const {
  return reinterpret_cast<Slot*>(static_cast<char*>(map_) + kHeaderBytes + std::size_t{i} * kSlotBytes);
}

Status AckJournal::start_fresh() {
  std::lock_guard<std::mutex> lock(mu_);
  if (map_ != nullptr) return Status();
  // Allocated in full now, so that taking a slot later never needs a block the disk may not have.
  map_bytes_ = kHeaderBytes + std::size_t{slots_} * kSlotBytes;
  if (ftruncate(fd_, 0) != 0) return Status::error(os_error(path_, "truncate"));
  if (const int rc = posix_fallocate(fd_, 0, static_cast<off_t>(map_bytes_)); rc != 0) {
    errno = rc;
    return Status::error(os_error(path_, "allocate " + std::to_string(map_bytes_) + " bytes"));
  }
  char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof kMagic);
  std::memcpy(header + 8, &kVersion, sizeof kVersion);
  std::memcpy(header + 12, &slots_, sizeof slots_);
  if (pwrite(fd_, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
    return Status::error(os_error(path_, "write"));
  }
  void* map = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) return Status::error(os_error(path_, "map"));
  map_ = map;
  leftovers_.clear();
  unreadable_slots_ = 0;
  free_.resize(slots_);
  for (std::uint32_t i = 0; i < slots_; ++i) free_[i] = slots_ - 1 - i;  // slot 0 is taken first
  return Status();
}

std::optional<JournalTicket> AckJournal::accept(const std::string& job, std::uint32_t rank) {
  JournalTicket t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::nullopt;
    t = {boot_, next_seq_++, free_.back()};
    free_.pop_back();
  }
  Slot* s = slot(t.slot);
  s->boot = t.boot;
  s->rank = rank;
  s->job_len = static_cast<std::uint8_t>(std::min(job.size(), sizeof s->job));
  std::memcpy(s->job, job.data(), s->job_len);
  s->seq.store(t.seq, std::memory_order_release);
  return t;
}

void AckJournal::release(const JournalTicket& t) {
  slot(t.slot)->seq.store(0, std::memory_order_release);
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(t.slot);
}

std::uint32_t AckJournal::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_ == nullptr ? 0 : slots_ - static_cast<std::uint32_t>(free_.size());
}

}  // namespace fp8scope::server
