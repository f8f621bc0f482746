// A training process that connects to fp8scoped, says Hello and then does nothing, so a test can
// stop it (SIGSTOP) and watch the daemon notice a peer that no longer answers.
//   idle_client ENDPOINT
#include <chrono>
#include <iostream>
#include <thread>

#include "fp8scope/daemon_client/sample_stream.h"
#include "fp8scope/wire/wire.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: idle_client ENDPOINT\n";
    return 2;
  }
  fp8scope::ConnectionOptions options;
  options.endpoint = argv[1];
  auto stream = fp8scope::SampleStream::open(options, fp8scope::make_hello("idle", "idle", 0, 1, 0));
  if (!stream.ok()) {
    std::cerr << stream.message() << "\n";
    return 1;
  }
  std::cout << "connected" << std::endl;
  std::this_thread::sleep_for(std::chrono::minutes(5));
  return 0;
}
