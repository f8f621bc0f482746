// `fp8scope checkpoint` on a DeepSeek-V3 block-FP8 export with its BF16 reference (four weights of
// --fp8scope_rows x 4096 in two shards, page cache warm), against two baselines measured in the
// same run: BM_ReadFiles touches every byte of both checkpoints through mmap on one thread (the
// least a checker must do; the checker runs on one thread too), and BM_AnalyzeEngine runs the
// reference weights through the statistics engine as `fp8scope analyze --operand w` does, every
// recipe, on every core. Counters: "x_read" (time against the read) and "x_analyze" (time against
// the engine's on the same elements: <= 1 means the check runs at least at the analyze rate).
// BM_CheckAlone is the export without a reference (structure, statistics of the dequantized
// weights). Run with --benchmark_repetitions=N: the ratios then use the medians.
// BM_HeaderParse/N parses a safetensors header of N tensors (a large MoE shard holds tens of
// thousands): its tensors a second ("items_per_second") stay flat from 20,000 to 100,000 when the
// parse is linear.
//   checkpoint_bench [--fp8scope_rows=N] [google benchmark flags]
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fp8scope/checkpoint/checkpoint_check.h"
#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/float_cast.h"
#include "fp8scope/kernels/recipe_analysis.h"
#include "fp8scope/tensorfile/safetensors_header.h"
#include "median_reporter.h"

using namespace fp8scope;

namespace {

constexpr int kWeights = 4;
constexpr std::int64_t kCols = 4096, kBlock = 128;
std::int64_t g_rows = 4096;
double g_read_seconds = 0, g_analyze_seconds = 0;

struct Tensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

void write_safetensors(const std::string& path, const std::vector<Tensor>& tensors) {
  std::string header = "{";
  std::size_t offset = 0;
  for (const Tensor& t : tensors) {
    std::string shape;
    for (std::int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" +
              shape + "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  for (const Tensor& t : tensors) out << t.bytes;
}

float bf16_value(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// BF16 weights like trained ones (normal, a few larger rows), and DeepSeek's cast of them: per
// 128x128 block s = amax / 448, q = e4m3(x / s), s stored as weight_scale_inv.
struct Checkpoints {
  std::string dir, exported, reference;
  std::vector<std::string> files;
  std::vector<std::vector<std::uint16_t>> weights;

  Checkpoints() {
    dir = (std::filesystem::temp_directory_path() / ("fp8scope-checkpoint-bench-" + std::to_string(getpid()))).string();
    exported = dir + "/export", reference = dir + "/reference";
    std::filesystem::create_directories(exported);
    std::filesystem::create_directories(reference);
    std::vector<Tensor> ex[2], ref[2];
    std::uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int l = 0; l < kWeights; ++l) {
      std::vector<std::uint16_t> w(static_cast<std::size_t>(g_rows * kCols));
      for (std::size_t i = 0; i < w.size(); ++i) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const double u1 = (static_cast<double>(s >> 11) + 0.5) * 0x1p-53;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const double u2 = (static_cast<double>(s >> 11) + 0.5) * 0x1p-53;
        const float f = static_cast<float>(0.02 * std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2) *
                                           (i / kCols % 97 == 3 ? 8.0 : 1.0));
        std::uint32_t bits;
        std::memcpy(&bits, &f, 4);
        w[i] = static_cast<std::uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
      }
      const std::int64_t gr = (g_rows + kBlock - 1) / kBlock, gc = kCols / kBlock;
      std::vector<float> scale(static_cast<std::size_t>(gr * gc), 0.0f);
      for (std::int64_t r = 0; r < g_rows; ++r) {
        for (std::int64_t c = 0; c < kCols; ++c) {
          float& m = scale[static_cast<std::size_t>(r / kBlock * gc + c / kBlock)];
          m = std::max(m, std::fabs(bf16_value(w[static_cast<std::size_t>(r * kCols + c)])));
        }
      }
      for (float& m : scale) m /= 448.0f;
      std::string codes(w.size(), '\0');
      for (std::int64_t r = 0; r < g_rows; ++r) {
        for (std::int64_t c = 0; c < kCols; ++c) {
          const std::size_t i = static_cast<std::size_t>(r * kCols + c);
          const float x = bf16_value(w[i]) / scale[static_cast<std::size_t>(r / kBlock * gc + c / kBlock)];
          codes[i] = static_cast<char>(encode<kE4M3>(x, Saturation::kSatFinite).code);
        }
      }
      const std::string module = "model.layers." + std::to_string(l) + ".mlp.down_proj";
      ex[l % 2].push_back({module + ".weight", "F8_E4M3", {g_rows, kCols}, std::move(codes)});
      ex[l % 2].push_back({module + ".weight_scale_inv", "F32", {gr, gc},
                           std::string(reinterpret_cast<const char*>(scale.data()), scale.size() * 4)});
      ref[l % 2].push_back({module + ".weight", "BF16", {g_rows, kCols},
                            std::string(reinterpret_cast<const char*>(w.data()), w.size() * 2)});
      weights.push_back(std::move(w));
    }
    for (int shard = 0; shard < 2; ++shard) {
      const std::string name = "/model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
      write_safetensors(exported + name, ex[shard]);
      write_safetensors(reference + name, ref[shard]);
      files.push_back(exported + name);
      files.push_back(reference + name);
    }
    std::ofstream(exported + "/config.json")
        << R"({"quantization_config":{"quant_method":"fp8","fmt":"e4m3","weight_block_size":[128,128]}})";
  }
  ~Checkpoints() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const Checkpoints& checkpoints() {
  static const Checkpoints c;
  return c;
}

std::int64_t elements() { return kWeights * g_rows * kCols; }

void BM_ReadFiles(benchmark::State& state) {
  const Checkpoints& c = checkpoints();
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    bytes = 0;
    for (const std::string& path : c.files) {
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st {};
      fstat(fd, &st);
      const std::size_t n = static_cast<std::size_t>(st.st_size);
      void* p = mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
      close(fd);
      if (p == MAP_FAILED) {
        state.SkipWithError("mmap failed");
        return;
      }
      const auto* words = static_cast<const std::uint64_t*>(p);
      std::uint64_t sum = 0;
      for (std::size_t i = 0; i < n / 8; ++i) sum += words[i];
      benchmark::DoNotOptimize(sum);
      munmap(p, n);
      bytes += n;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["elements"] = static_cast<double>(elements());
}

void BM_AnalyzeEngine(benchmark::State& state) {
  const Checkpoints& c = checkpoints();
  auto engine = make_cpu_engine();
  std::vector<RecipePlan> plans;
  for (RecipeKind kind : kAllRecipeKinds) {
    RecipePlan p;
    p.recipe = default_recipe(kind);
    p.format = p.recipe.format_for(Operand::kW);
    p.operand = Operand::kW;
    plans.push_back(p);
  }
  for (auto _ : state) {
    for (const std::vector<std::uint16_t>& w : c.weights) {
      const TensorView t{w.data(), DType::kBF16, g_rows, kCols, 1.0f};
      Result<TensorReport> r = analyze_recipes(*engine, t, plans);
      if (!r.ok()) state.SkipWithError(r.message().c_str());
      benchmark::DoNotOptimize(r);
    }
  }
  state.SetItemsProcessed(state.iterations() * elements());
}

void check(benchmark::State& state, bool with_reference) {
  const Checkpoints& c = checkpoints();
  for (auto _ : state) {
    Result<checkpoint::CheckpointReport> r = checkpoint::check_checkpoint(c.exported, with_reference ? c.reference : "");
    if (!r.ok() || r.value().errors != 0) {
      state.SkipWithError(r.ok() ? r.value().verdict().c_str() : r.message().c_str());
      return;
    }
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations() * elements());
}
void BM_CheckAgainstReference(benchmark::State& state) { check(state, true); }
void BM_CheckAlone(benchmark::State& state) { check(state, false); }

void BM_HeaderParse(benchmark::State& state) {
  const auto tensors = static_cast<std::uint64_t>(state.range(0));
  std::string header = "{";
  for (std::uint64_t i = 0; i < tensors; ++i) {
    header += (i ? "," : "") + std::string("\"model.layers.") + std::to_string(i) + ".mlp.weight\":{\"dtype\":\"F32\","
              "\"shape\":[1],\"data_offsets\":[" + std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
  }
  header += "}";
  std::vector<std::uint8_t> head(8 + header.size());
  for (int i = 0; i < 8; ++i) head[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>((header.size() >> (8 * i)) & 0xFF);
  std::memcpy(head.data() + 8, header.data(), header.size());
  const std::uint64_t file_size = head.size() + 4 * tensors;
  for (auto _ : state) {
    Result<tensorfile::SafetensorsHeader> h = tensorfile::parse_safetensors_header(head, file_size);
    if (!h.ok() || h.value().entries.size() != tensors) return state.SkipWithError("the header did not parse");
    benchmark::DoNotOptimize(h);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(tensors));
}

// "x_read" against the read, "x_analyze" against the engine, for every run after them.
void ratios(const std::string& name, double seconds, benchmark::UserCounters& counters) {
  if (name.rfind("BM_HeaderParse", 0) == 0) return;
  if (name.rfind("BM_ReadFiles", 0) == 0) {
    g_read_seconds = seconds;
    return;
  }
  if (g_read_seconds > 0) counters["x_read"] = seconds / g_read_seconds;
  if (name.rfind("BM_AnalyzeEngine", 0) == 0) {
    g_analyze_seconds = seconds;
  } else if (g_analyze_seconds > 0) {
    counters["x_analyze"] = seconds / g_analyze_seconds;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--fp8scope_rows=", 0) == 0) {
      g_rows = std::atoll(a.c_str() + 16);
      if (g_rows <= 0) {
        std::fprintf(stderr, "checkpoint_bench: --fp8scope_rows: expected a positive number, got %s\n", a.c_str() + 16);
        return 2;
      }
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  // In the order the ratios need: the baselines first.
  benchmark::RegisterBenchmark("BM_ReadFiles", BM_ReadFiles)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_AnalyzeEngine", BM_AnalyzeEngine)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_CheckAgainstReference", BM_CheckAgainstReference)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_CheckAlone", BM_CheckAlone)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_HeaderParse", BM_HeaderParse)->Arg(20000)->Arg(100000)->UseRealTime()->Unit(benchmark::kMillisecond);
  bench::MedianReporter reporter(ratios);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
