// fp8scope-shipper: started by libfp8scope_hook.so with the shared ring on fd FP8SCOPE_SHM_FD.
// Not meant to be run by hand; it says so and exits 2 without a ring.
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fp8scope/shipper/cpu_list.h"
#include "fp8scope/shipper/shipper.h"

int main() {
  using namespace fp8scope;
  // The training process's Ctrl-C reaches its whole process group; the shipper keeps draining and
  // leaves when its parent is gone.
  signal(SIGINT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  const char* fd_text = std::getenv(shm::kShmFdEnv);
  if (fd_text == nullptr) {
    std::fprintf(stderr, "fp8scope-shipper: started without %s; libfp8scope_hook.so starts this program\n", shm::kShmFdEnv);
    return 2;
  }
  const int fd = std::atoi(fd_text);
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    std::fprintf(stderr, "fp8scope-shipper: %s=%s is not an open shared ring\n", shm::kShmFdEnv, fd_text);
    return 2;
  }
  const std::size_t bytes = static_cast<std::size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED || !shm::valid(base, bytes)) {
    std::fprintf(stderr, "fp8scope-shipper: %s=%s does not hold a shared ring of this version\n", shm::kShmFdEnv, fd_text);
    return 2;
  }
  Result<shipper::ShipperConfig> config = shipper::config_from_environment();
  if (!config.ok()) {
    std::fprintf(stderr, "fp8scope-shipper: %s\n", config.message().c_str());
    return 2;
  }
  // Before any thread starts: they inherit the affinity.
  if (!config.value().cpus.empty()) {
    if (Status pinned = shipper::run_on_cpus(config.value().cpus); !pinned.ok()) {
      std::fprintf(stderr, "fp8scope-shipper: FP8SCOPE_SHIPPER_CPUS: %s\n", pinned.message().c_str());
      return 2;
    }
  }
  config.value().ring_fd = fd;
  config.value().ring_bytes = bytes;
  shipper::Shipper s(std::move(config).value(), static_cast<shm::Header*>(base));
  return s.run();
}
