// The daemon's table of shared memory: a registered memfd is readable by range and only within
// its bounds, a client that leaves takes its region along, and the bounds per user hold.
#include "fp8scope/ingest/shared_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fp8scope/daemon_client/shared_region_client.h"

using namespace fp8scope;
using namespace fp8scope::server;

namespace {

int sealed_memfd(std::size_t bytes) {
  const int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(i);
  REQUIRE(write(fd, data.data(), bytes) == static_cast<ssize_t>(bytes));
  REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  return fd;
}

std::string socket_path() {
  return (std::filesystem::temp_directory_path() / ("fp8scope-regions-" + std::to_string(getpid()) + ".sock")).string();
}


template <class F>
bool within_seconds(double seconds, F f) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

}  // namespace

TEST_CASE("a registered memfd reads by range within its bounds, and leaves with its client", "[shared]") {
  auto regions = SharedRegions::open(socket_path()).value();
  const int fd = sealed_memfd(4096);
  auto client = SharedRegionClient::register_memfd(regions->path(), regions->instance_id(), fd);
  close(fd);
  REQUIRE(client.ok());
  CHECK(regions->regions() == 1);
  const std::string id = client.value().region_id();

  auto view = regions->view(id, 100, 16);
  REQUIRE(view.ok());
  CHECK(view.value().bytes == 16);
  std::uint8_t bytes[16] = {};
  REQUIRE(view.value().read(bytes).ok());
  CHECK(bytes[0] == 100);
  CHECK(regions->view(id, 0, 4096).ok());
  CHECK(regions->view(id, 4096, 0).ok());
  CHECK_THAT(regions->view(id, 4000, 97).message(), Catch::Contains("of a shared memory region of 4096 bytes"));
  CHECK_FALSE(regions->view(id, ~0ull, 2).ok());
  CHECK_FALSE(regions->view(std::string(16, 'z'), 0, 1).ok());

  {
    SharedRegionClient leaving = std::move(client).value();
  }
  CHECK(within_seconds(5, [&] { return regions->regions() == 0; }));
  CHECK_THAT(regions->view(id, 0, 1).message(), Catch::Contains("does not have"));
  // A view taken before keeps its bytes readable.
  std::uint8_t after[16] = {};
  REQUIRE(view.value().read(after).ok());
  CHECK(after[15] == 115);
}

TEST_CASE("regions per user and in all are bounded, and sizes beyond the limit are refused", "[shared]") {
  SharedRegionLimits limits;
  limits.max_regions_per_user = 2;
  limits.max_region_bytes = 8192;
  auto regions = SharedRegions::open(socket_path(), limits).value();
  std::vector<SharedRegionClient> kept;
  for (int i = 0; i < 2; ++i) {
    const int fd = sealed_memfd(4096);
    auto c = SharedRegionClient::register_memfd(regions->path(), regions->instance_id(), fd);
    close(fd);
    REQUIRE(c.ok());
    kept.push_back(std::move(c).value());
  }
  const int third = sealed_memfd(4096);
  auto refused = SharedRegionClient::register_memfd(regions->path(), regions->instance_id(), third);
  close(third);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.message(), Catch::Contains("2 per user"));

  kept.pop_back();
  const int large = sealed_memfd(16384);
  auto too_large = SharedRegionClient::register_memfd(regions->path(), regions->instance_id(), large);
  close(large);
  REQUIRE_FALSE(too_large.ok());
  CHECK_THAT(too_large.message(), Catch::Contains("expected a memfd of 1..8192 bytes, got 16384"));
}

namespace {

// Resident shared memory of this process, from /proc/self/status (kB).
long rss_shmem_kb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("RssShmem:", 0) == 0) return std::stol(line.substr(9));
  }
  return -1;
}

}  // namespace

TEST_CASE("bytes a client never wrote are refused, and bytes read never become resident in the daemon", "[shared]") {
  auto regions = SharedRegions::open(socket_path()).value();
  // 1 GiB, sealed, of which only 32 MiB in the middle were ever written: the rest is holes.
  constexpr std::uint64_t kRegion = 1ull << 30, kWritten = 32ull << 20, kAt = 256ull << 20;
  const int fd = memfd_create("sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, static_cast<off_t>(kRegion)) == 0);
  const std::vector<std::uint8_t> data(kWritten, 7);
  REQUIRE(pwrite(fd, data.data(), data.size(), static_cast<off_t>(kAt)) == static_cast<ssize_t>(data.size()));
  REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  auto client = SharedRegionClient::register_memfd(regions->path(), regions->instance_id(), fd);
  close(fd);
  REQUIRE(client.ok());
  const std::string id = client.value().region_id();
  const long before = rss_shmem_kb();
  for (std::uint64_t chunk = 0; chunk < 12; ++chunk) {  // 12 x 32 MiB of holes: each refused, none allocated
    const auto refused = regions->view(id, kAt + kWritten + chunk * kWritten, kWritten);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.message(), Catch::Contains("never written (a hole in its memfd)"));
  }
  CHECK_FALSE(regions->view(id, kAt - 4096, 8192).ok());  // straddling the written part's start
  auto written = regions->view(id, kAt, kWritten);
  REQUIRE(written.ok());
  std::vector<std::uint8_t> copy(kWritten);
  REQUIRE(written.value().read(copy.data()).ok());  // what the daemon's copy reads
  std::uint64_t sum = 0;
  for (const std::uint8_t b : copy) sum += b;
  CHECK(sum == 7 * kWritten);
  CHECK(rss_shmem_kb() - before < 1024);  // the client's pages, never mapped here
}
