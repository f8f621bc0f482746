// make_cuda_engine() and make_gpu_gemm_check(): load the CUDA plugin (cuda_plugin.h) and ask it.
// The plugin is searched in FP8SCOPE_CUDA_PLUGIN_DIR, beside the executable, in ../lib/fp8scope
// from it, and in the build tree it was built in.
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

#include "fp8scope/kernels/cuda_engine.h"
#include "fp8scope/kernels/cuda_plugin.h"
#include "fp8scope/kernels/gpu_gemm_check.h"

namespace fp8scope {
namespace {

std::string executable_dir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  std::string p(path, static_cast<std::size_t>(n));
  return p.substr(0, p.rfind('/'));
}

struct Plugin {
  void* handle = nullptr;
  std::string error;
};

const Plugin& plugin() {
  static const Plugin loaded = [] {
    Plugin p;
    // Without a driver there is no GPU to use: the plugin (and cuBLASLt with it, ~140 MB resident
    // once loaded) is not worth loading.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) {
      p.error = std::string("no CUDA driver (") + dlerror() + ")";
      return p;
    }
    dlclose(driver);
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("FP8SCOPE_CUDA_PLUGIN_DIR")) dirs.emplace_back(env);
    dirs.push_back(executable_dir());
    dirs.push_back(executable_dir() + "/../lib/fp8scope");
#if defined(FP8SCOPE_CUDA_PLUGIN_BUILD_DIR)
    dirs.emplace_back(FP8SCOPE_CUDA_PLUGIN_BUILD_DIR);
#endif
    for (const std::string& dir : dirs) {
      const std::string path = dir + "/" + kCudaPluginName;
      if (access(path.c_str(), R_OK) != 0) continue;
      p.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (p.handle != nullptr) return p;
      p.error = std::string("cannot load ") + path + ": " + dlerror();
      return p;
    }
    p.error = std::string("the CUDA plugin ") + kCudaPluginName +
              " was not found (this build has no CUDA parts, or set FP8SCOPE_CUDA_PLUGIN_DIR)";
    return p;
  }();
  return loaded;
}

template <class Fn>
Result<Fn> entry(const char* symbol) {
  const Plugin& p = plugin();
  if (p.handle == nullptr) return Status::error(p.error);
  void* fn = dlsym(p.handle, symbol);
  if (fn == nullptr) return Status::error(std::string("the CUDA plugin lacks ") + symbol);
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

bool cuda_engine_built() {
#if defined(FP8SCOPE_CUDA_PLUGIN_BUILD_DIR)
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<StatsEngine>> make_cuda_engine(const CudaEngineOptions& options) {
  auto create = entry<Fp8scopeCudaEngineCreate>(kCudaEngineCreateSymbol);
  if (!create.ok()) return create.status();
  char error[512] = "";
  StatsEngine* engine = create.value()(options.device, options.memory_budget_bytes, error, sizeof error);
  if (engine == nullptr) return Status::error(error);
  return std::unique_ptr<StatsEngine>(engine);
}

Result<std::unique_ptr<GpuGemmCheck>> make_gpu_gemm_check(int device) {
  auto create = entry<Fp8scopeCudaGemmCheckCreate>(kCudaGemmCheckCreateSymbol);
  if (!create.ok()) return create.status();
  char error[512] = "";
  GpuGemmCheck* check = create.value()(device, error, sizeof error);
  if (check == nullptr) return Status::error(error);
  return std::unique_ptr<GpuGemmCheck>(check);
}

}  // namespace fp8scope
