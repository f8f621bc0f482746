// The client's end of a shared-memory registration (shared_region_protocol.h): hands a sealed
// memfd to the daemon's shared-memory socket and keeps the connection, and with it the region,
// open for as long as this object lives.
#pragma once

#include <string>

#include "fp8scope/wire/shared_region_protocol.h"
#include "fp8scope/kernels/status.h"

namespace fp8scope {

class SharedRegionClient {
 public:
  // Registers `memfd` on `socket_path`; the daemon must answer with `instance_id` (its Welcome's),
  // else the socket belongs to another daemon.
  static Result<SharedRegionClient> register_memfd(const std::string& socket_path, const std::string& instance_id,
                                                   int memfd);
  SharedRegionClient(SharedRegionClient&& other) noexcept;
  SharedRegionClient& operator=(SharedRegionClient&& other) noexcept;
  SharedRegionClient(const SharedRegionClient&) = delete;
  SharedRegionClient& operator=(const SharedRegionClient&) = delete;
  ~SharedRegionClient();

  const std::string& region_id() const { return region_id_; }

 private:
  SharedRegionClient(int socket, std::string region_id) : socket_(socket), region_id_(std::move(region_id)) {}
  int socket_ = -1;
  std::string region_id_;
};

}  // namespace fp8scope
