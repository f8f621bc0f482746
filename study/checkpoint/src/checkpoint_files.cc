#include "fp8scope/checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "fp8scope/tensorfile/bounded_file.h"

namespace fp8scope::checkpoint {
namespace fs = std::filesystem;
namespace {

constexpr const char* kIndex = "model.safetensors.index.json";
// config.json and the index: a large model's index names every tensor (DeepSeek-V3's is 8.9 MB).
constexpr std::uint64_t kMaxJsonBytes = 64ull << 20;

// Whether the directory holds an entry by that name: a link that loops or dangles is one, so that
// reading it says what is wrong instead of passing it over.
bool present(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec;
}

// A shard's header, read with pread: its data is left on disk.
Result<tensorfile::SafetensorsHeader> read_header(const std::string& path) {
  // O_NONBLOCK: a FIFO among the shards is refused below, never waited on.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  Status s;
  std::vector<std::uint8_t> head(8);
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = Status::error(path + ": not a regular file");
  } else if (::pread(fd, head.data(), 8, 0) != 8) {
    s = Status::error(path + ": truncated: expected an 8-byte header size, the file has " + std::to_string(st.st_size) +
                      " bytes");
  }
  Result<tensorfile::SafetensorsHeader> header = s;
  if (s.ok()) {
    Result<std::uint64_t> length = tensorfile::safetensors_header_bytes(head, static_cast<std::uint64_t>(st.st_size));
    if (!length.ok()) {
      header = Status::error(path + ": " + length.message());
    } else {
      head.resize(length.value());
      if (::pread(fd, head.data() + 8, length.value() - 8, 8) != static_cast<ssize_t>(length.value() - 8)) {
        header = Status::error(path + ": cannot read its header");
      } else {
        header = tensorfile::parse_safetensors_header(head, static_cast<std::uint64_t>(st.st_size));
        if (!header.ok()) header = Status::error(path + ": " + header.message());
      }
    }
  }
  ::close(fd);
  return header;
}

// The index's weight_map: tensor name -> shard file name.
Result<std::map<std::string, std::string>> read_index(const std::string& path) {
  Result<std::string> text = tensorfile::read_bounded_file(path, kMaxJsonBytes);
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(text.value(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return Status::error(path + ": expected a JSON object with a weight_map object");
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : j["weight_map"].items()) {
    if (!shard.is_string()) return Status::error(path + ": weight_map entry '" + name + "' is not a file name");
    map[name] = shard.get<std::string>();
  }
  return map;
}

}  // namespace

MappedTensor::MappedTensor(MappedTensor&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)), map_bytes_(o.map_bytes_), bytes_(o.bytes_) {}

MappedTensor& MappedTensor::operator=(MappedTensor&& o) noexcept {
  std::swap(map_, o.map_);
  std::swap(map_bytes_, o.map_bytes_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

MappedTensor::~MappedTensor() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

Result<CheckpointFiles> CheckpointFiles::open(const std::string& path) {
  CheckpointFiles c;
  c.path_ = path;
  std::error_code ec;
  std::optional<std::map<std::string, std::string>> index;  // tensor -> shard file name, when there is one
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (present(dir / "config.json")) {
      Result<std::string> config = tensorfile::read_bounded_file((dir / "config.json").string(), kMaxJsonBytes);
      if (!config.ok()) return config.status();
      c.config_text_ = std::move(config).value();
    }
    std::set<std::string> files;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") files.insert(e.path().filename().string());
    }
    if (present(dir / kIndex)) {
      Result<std::map<std::string, std::string>> m = read_index((dir / kIndex).string());
      if (!m.ok()) return m.status();
      index = std::move(m).value();
      std::set<std::string> named;
      for (const auto& [tensor, shard] : *index) named.insert(shard);
      for (const std::string& shard : named) {
        if (!files.count(shard)) {
          return Status::error((dir / kIndex).string() + ": names shard " + shard + " (for tensor '" +
                               std::find_if(index->begin(), index->end(), [&](const auto& kv) { return kv.second == shard; })->first +
                               "'), which is not in " + path);
        }
      }
      for (const std::string& f : files) {
        if (!named.count(f)) {
          c.problems_.push_back({"index", "shard " + f + " is not in the index: loaders read no tensor from it"});
        }
      }
      files = named;
    }
    if (files.empty()) return Status::error(path + ": no .safetensors file in this directory");
    for (const std::string& f : files) c.shards_.push_back((dir / f).string());
  } else if (fs::is_regular_file(path, ec)) {
    c.shards_.push_back(path);
  } else {
    return Status::error(path + ": no such checkpoint (expected a directory of .safetensors shards or a file)");
  }

  std::map<std::string, std::size_t> seen;  // tensor -> shard
  for (std::size_t i = 0; i < c.shards_.size(); ++i) {
    if (Status s = c.add_shard(i, index ? &*index : nullptr, seen); !s.ok()) return s;
  }
  if (index) {
    for (const auto& [tensor, shard] : *index) {
      if (!seen.count(tensor)) {
        c.problems_.push_back({"index", "the index names tensor '" + tensor + "' in " + shard + ", which lacks it"});
      }
    }
  }
  std::sort(c.tensors_.begin(), c.tensors_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return c;
}

Status CheckpointFiles::add_shard(std::size_t i, const std::map<std::string, std::string>* index,
                                  std::map<std::string, std::size_t>& seen) {
  Result<tensorfile::SafetensorsHeader> h = read_header(shards_[i]);
  if (!h.ok()) return h.status();
  const std::string file = fs::path(shards_[i]).filename().string();
  std::string repeated;
  for (const std::string& name : h.value().repeated_names) {
    problems_.push_back({"repeated_name", "tensor '" + name + "' is named twice in the header of " + file +
                         " (the format disallows it): loaders take its last entry, and so does this check"});
    repeated += (repeated.empty() ? "; named twice: '" : ", '") + name + "'";
  }
  if (Status s = tensorfile::check_data_covered(h.value()); !s.ok()) {
    return Status::error(shards_[i] + ": " + s.message() + repeated);
  }
  data_offsets_.push_back(h.value().data_offset);
  for (tensorfile::SafetensorsEntry& e : h.value().entries) {
    if (const auto it = seen.find(e.name); it != seen.end()) {
      return Status::error(shards_[i] + ": tensor '" + e.name + "' is in " + shards_[it->second] + " too");
    }
    seen[e.name] = i;
    if (index != nullptr) {
      const auto it = index->find(e.name);
      if (it == index->end()) {
        problems_.push_back({"index", "tensor '" + e.name + "' of " + file + " is not in the index"});
      } else if (it->second != file) {
        problems_.push_back({"index", "the index says tensor '" + e.name + "' is in " + it->second + "; it is in " + file});
      }
    }
    tensors_.push_back(CheckpointTensor{e.name, i, std::move(e)});
  }
  return Status();
}

const CheckpointTensor* CheckpointFiles::find(std::string_view name) const {
  const auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                                   [](const CheckpointTensor& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

std::uint64_t CheckpointFiles::tensor_bytes() const {
  std::uint64_t n = 0;
  for (const CheckpointTensor& t : tensors_) n += t.entry.bytes();
  return n;
}

Result<MappedTensor> CheckpointFiles::map(const CheckpointTensor& t) const {
  const std::string& path = shards_[t.shard];
  if (t.entry.bytes() == 0) return MappedTensor(nullptr, 0, {});
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  const std::uint64_t offset = data_offsets_[t.shard] + t.entry.begin;
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t start = offset / page * page;
  const std::size_t length = static_cast<std::size_t>(offset + t.entry.bytes() - start);
  void* p = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(start));
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return Status::error(path + ": tensor '" + t.name + "': cannot map: " + std::strerror(err));
  ::madvise(p, length, MADV_SEQUENTIAL);
  const auto* bytes = static_cast<const std::uint8_t*>(p) + (offset - start);
  return MappedTensor(p, length, {bytes, static_cast<std::size_t>(t.entry.bytes())});
}

}  // namespace fp8scope::checkpoint
