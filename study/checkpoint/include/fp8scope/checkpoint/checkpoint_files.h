// A Hugging Face checkpoint as it is shipped: a directory with config.json, one or many
// .safetensors shards and model.safetensors.index.json (or a single .safetensors file). Opening it
// reads only the shards' headers; each tensor is then mapped on its own, in place, and unmapped
// when its MappedTensor goes, so a 70B export is checked in memory bounded by a tensor or two.
// What loaders would trip on (a shard the index names that is missing, a tensor in two shards, a
// truncated shard, a header past its file) is an error naming the file and the tensor; what they
// tolerate silently (an index entry naming the wrong shard, a shard no index lists) is a problem
// the check reports.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fp8scope/kernels/status.h"
#include "fp8scope/tensorfile/safetensors_header.h"

namespace fp8scope::checkpoint {

// What the files show that loaders pass over: a finding's code ("index": shards, index and
// headers disagree; "repeated_name": a header names a tensor twice) and its message.
struct FileProblem {
  const char* code;
  std::string message;
};

struct CheckpointTensor {
  std::string name;
  std::size_t shard = 0;  // into CheckpointFiles::shards()
  tensorfile::SafetensorsEntry entry;
};

// One tensor's bytes, mapped read-only for as long as this lives.
class MappedTensor {
 public:
  MappedTensor() = default;  // no bytes
  MappedTensor(MappedTensor&& o) noexcept;
  MappedTensor& operator=(MappedTensor&& o) noexcept;
  ~MappedTensor();
  std::span<const std::uint8_t> bytes() const { return bytes_; }

 private:
  friend class CheckpointFiles;
  MappedTensor(void* map, std::size_t map_bytes, std::span<const std::uint8_t> bytes)
      : map_(map), map_bytes_(map_bytes), bytes_(bytes) {}
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  std::span<const std::uint8_t> bytes_;
};

class CheckpointFiles {
 public:
  // A directory (config.json beside the shards; model.safetensors.index.json when sharded) or
  // one .safetensors file.
  static Result<CheckpointFiles> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::string& config_text() const { return config_text_; }  // config.json, "" when there is none
  const std::vector<std::string>& shards() const { return shards_; }  // paths
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }  // sorted by name
  const CheckpointTensor* find(std::string_view name) const;
  // What loaders tolerate but a verifier reports: index entries naming the wrong shard, shards the
  // index does not list, tensors the index does not name.
  const std::vector<FileProblem>& problems() const { return problems_; }
  std::uint64_t tensor_bytes() const;

  Result<MappedTensor> map(const CheckpointTensor& tensor) const;

 private:
  // Shard i's header read: its tensors (`seen`: every tensor so far, by shard) checked against the
  // index (null: none) and the other shards.
  Status add_shard(std::size_t i, const std::map<std::string, std::string>* index, std::map<std::string, std::size_t>& seen);

  std::string path_, config_text_;
  std::vector<std::string> shards_;
  std::vector<std::uint64_t> data_offsets_;  // per shard: where its data region starts
  std::vector<CheckpointTensor> tensors_;
  std::vector<FileProblem> problems_;
};

}  // namespace fp8scope::checkpoint
