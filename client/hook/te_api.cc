#include "fp8scope/hook/te_api.h"

#include <dlfcn.h>

namespace fp8scope::hook::te {
namespace {

// TE's Python package loads its library by path; its file name has no SONAME version
// (common/CMakeLists.txt:16, :335).
constexpr const char* kLibrary = "libtransformer_engine.so";

template <class F>
void resolve(F& target, const char* symbol) {
  target = reinterpret_cast<F>(real_entry(symbol));
}

}  // namespace

void* real_entry(const char* name) {
  if (void* f = dlsym(RTLD_NEXT, name)) return f;
  // RTLD_NOLOAD: only a library the application already loaded; the hook loads no TE.
  if (void* h = dlopen(kLibrary, RTLD_NOW | RTLD_NOLOAD)) {
    void* f = dlsym(h, name);
    dlclose(h);
    return f;
  }
  return nullptr;
}

const Api& api() {
  static const Api a = [] {
    Api r;
    resolve(r.tensor_data, "nvte_tensor_data");
    resolve(r.tensor_columnwise_data, "nvte_tensor_columnwise_data");
    resolve(r.tensor_type, "nvte_tensor_type");
    resolve(r.tensor_ndims, "nvte_tensor_ndims");
    resolve(r.tensor_size, "nvte_tensor_size");
    resolve(r.tensor_scaling_mode, "nvte_tensor_scaling_mode");
    resolve(r.tensor_scale, "nvte_tensor_scale");
    resolve(r.get_tensor_param, "nvte_get_tensor_param");
    resolve(r.get_tensor_param_v2, "nvte_get_tensor_param_v2");
    resolve(r.get_quantization_config_attribute, "nvte_get_quantization_config_attribute");
    return r;
  }();
  return a;
}

}  // namespace fp8scope::hook::te
