// The client side of the Ingest stream: Hello, then tensor samples in chunks under the daemon's
// flow-control window, with every Ack and policy update delivered as it arrives. Used by
// `fp8scope push` and by the shipper. Synchronous to the caller, with one reader thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "fp8scope/daemon_client/daemon_channel.h"
#include "fp8scope/daemon_client/shared_region_client.h"
#include "fp8scope/kernels/status.h"
#include "fp8scope/v1/fp8scope.grpc.pb.h"

namespace fp8scope {

// The Hello a client sends first: protocol 1 (what every daemon reads), this host and fp8scope's
// version.
v1::Hello make_hello(const std::string& job, const std::string& run, std::uint32_t rank, std::uint32_t world_size,
                     std::uint32_t pid);

class SampleStream {
 public:
  using PolicyListener = std::function<void(const v1::Policy&)>;

  // Connects, sends hello, waits (up to connect_timeout) for the Welcome and the policy.
  static Result<std::unique_ptr<SampleStream>> open(const ConnectionOptions& options, const v1::Hello& hello,
                                                    double connect_timeout_seconds = 10.0,
                                                    PolicyListener on_policy = nullptr);
  ~SampleStream();

  const v1::Welcome& welcome() const { return welcome_; }
  v1::Policy policy() const;
  // Whether the daemon reads this sample's protocol (Welcome.protocol_version); send() refuses
  // what it does not, and the stream stays usable.
  bool reads(const v1::TensorHeader& header) const;

  // Shares memory with a daemon on this host (Welcome.shared_memory_socket): `bytes` at `base`,
  // the mapping of the sealed memfd `memfd` from its offset 0. From then on a sample whose payload
  // lies inside it travels as a reference the daemon copies out before it acknowledges the sample,
  // so the caller keeps those bytes unchanged until the sample's ack. Called once, before the
  // samples it should carry. An error says why not (no offer, another host, a refusal); samples
  // are then streamed as before.
  Status share_memory(int memfd, const void* base, std::size_t bytes);
  bool shares(std::span<const std::uint8_t> payload) const;

  // Sends one sample (chunks of at most welcome().max_chunk_bytes, or one reference into shared
  // memory), waiting while more than the window is unacknowledged. Returns its sample id; an error
  // if the stream broke.
  Result<std::uint64_t> send(v1::TensorHeader header, std::span<const std::uint8_t> payload);
  Status send_step(std::uint64_t step);
  Status send_scalar(std::uint64_t step, const std::string& name, double value);
  Status send_counters(const v1::ClientCounters& counters);

  // Waits until every sample sent so far is acknowledged (or the timeout passes); returns the
  // acks by sample id.
  Result<std::map<std::uint64_t, v1::Ack>> wait_for_acks(double timeout_seconds);

  // The acks received since the last call, without waiting (a long-lived sender's bookkeeping).
  std::map<std::uint64_t, v1::Ack> take_acks();

  // Half-closes and collects the final status.
  Status close();

 private:
  SampleStream() = default;
  Status write(const v1::ClientMessage& m);
  void read_loop();

  ConnectionOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Ingest::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> stream_;
  std::thread reader_;
  PolicyListener on_policy_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  v1::Welcome welcome_;
  bool have_welcome_ = false, have_policy_ = false, broken_ = false, closed_ = false;
  v1::Policy policy_;
  std::uint64_t next_id_ = 1;
  std::uint64_t inflight_bytes_ = 0;
  std::map<std::uint64_t, std::uint64_t> inflight_;  // sample id -> bytes
  std::map<std::uint64_t, v1::Ack> acks_;
  std::mutex write_mu_;
  std::optional<SharedRegionClient> shared_;
  const std::uint8_t* shared_base_ = nullptr;
  std::size_t shared_bytes_ = 0;
};

}  // namespace fp8scope
