// tiny_trainer --mode te: the MLP of the other modes (32 -> H -> H -> 16, ReLU) behind a LayerNorm,
// with every cast made by Transformer Engine's C API through a framework extension, as TE's PyTorch
// modules make them: the TE stand-in of tests/fixtures/te/ (te-2.20/ or te-2.3/), or on a GPU
// machine whatever directory holds a libtransformer_engine.so and the extension built against it.
// The library is loaded RTLD_GLOBAL and the extension after it, as TE's Python package loads them
// (common/__init__.py:383-385), so the extension's nvte_* calls go through the PLT.
//
// Layers are named "mlp.<l>" by a range around each GEMM, or with te_names as TE names them.
//
// Casts per recipe (TE's module paths, DESIGN.md "The casts"): delayed scaling fuses the norm
// (nvte_layernorm_fwd), the activation (nvte_relu) and its backward (nvte_quantize_dbias_drelu),
// casts W through nvte_quantize_noop and the last Dy through nvte_quantize_dbias; MXFP8 fuses the
// same; current scaling computes amax and scale first (nvte_compute_amax, nvte_compute_scale_from_
// amax); block scaling casts 1x128 (X, Dy) and 128x128 (W); NVFP4 casts W in 16x16 blocks, X and Dy
// with the Hadamard transform of their column-wise copies (nvte_quantize_with_hadamard_transform),
// Dy stochastically rounded. The GEMMs read the casts' own buffers: TN with transposed column-wise
// copies, MXFP8's backward NN and NT.
#pragma once

#include <cuda.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_gemms.h"
#include "host_tensors.h"

namespace fp8scope::trainer {

enum class TeRecipe { kDelayed, kCurrent, kMxfp8, kBlock, kNvfp4 };
std::optional<TeRecipe> te_recipe_from_name(const std::string& name);

struct TeModelOptions {
  TeRecipe recipe = TeRecipe::kDelayed;
  std::string library_dir;    // holds libtransformer_engine.so and libte_extension.so
  int uncovered_layer = -1;   // this layer's W is cast by the trainer itself, not by TE
  std::string dump_dir;       // at dump_step: each cast's high-precision tensor, scale and amax
  int dump_step = -1;
  // Name the layers as TE's modules under fp8scope.name_modules: layers 0 and 1 one LayerNormMLP,
  // "model.layers.1.layernorm_mlp" (its GEMMs fc1 and fc2, declared to the hook), layer 2 a Linear,
  // "model.output_layer"; no range of a GEMM's own, as LayerNormMLP pushes none.
  bool te_names = false;
};

// The step's host work: run now, or under capture recorded as a host node (StepGraph::host).
using HostWork = std::function<void(std::function<void()>)>;

class TeModel {
 public:
  // weights: [out, in] fp32 masters, layer by layer (LayerNorm's gamma and beta are fixed).
  TeModel(const TeModelOptions& options, Gemms& gemms, std::vector<Matrix> weights, std::mt19937_64& rng);
  ~TeModel();

  // One step (forward, loss against target, backward, weight update) as a program of host work,
  // TE's casts and GEMMs on persistent buffers: run now, or captured into a CUDA graph whose
  // replays run it. Its host work reads `step`, `x` and `target` when it runs (a replay's) and
  // leaves the loss in `loss`.
  void program(const HostWork& host, const int& step, const Matrix& x, const Matrix& target, float learning_rate,
               double& loss);

 private:
  struct Library;
  struct Quantized;
  struct Layer;

  // Which cast a tensor gets: a weight's, an activation's, a gradient's (the last layer's with its bias).
  enum class Role { kActivation, kWeight, kGradient, kLastGradient };
  // The cast into q of the tensor `values` gives when the host work runs (q's rows x cols, fp32,
  // as the framework holds it in BF16): the recipe's entry points for a tensor of this role.
  void cast(const HostWork& host, const int& step, const std::string& name, std::function<Matrix()> values,
            Quantized& q, Role role);
  // A TE call between host work that fills its input buffers (and delayed scaling's scale) and
  // host work that takes its amax into the history and dumps what it cast (`dumped` of `held`).
  void fused_cast(const HostWork& host, const int& step, const std::string& name, Quantized& q,
                  std::function<void()> fill, const std::function<void()>& call, std::function<Matrix()> dumped);
  // Delayed scaling around a cast: its scale from the history before, its amax into it after.
  static void before_delayed(Quantized& q);
  static void after_delayed(Quantized& q);
  // What a cast left for the dumps: its input in fp32, its scale and amax.
  void dump_cast(int step, const std::string& name, const Matrix& values, const Quantized& q);
  Matrix layernorm(const Matrix& x) const;
  // out[P, Q] of the GEMM out = b a^T as TE runs the recipe.
  // te_names: the module ranges around layer l's GEMMs of a pass, opened before its first and
  // closed after its last.
  void module_begin(int l, bool backward);
  void backward_layer(const HostWork& host, const int& step, int l, int M, float learning_rate);
  void module_end(int l, bool backward);
  void gemm(const HostWork& host, const std::string& range, const Quantized& a, bool a_columnwise, const Quantized& b,
            bool b_columnwise, DeviceBuffer& out, int P, int Q, int L);
  // A persistent device buffer by name, zeros when first used: a captured graph replays the
  // addresses it was captured with.
  DeviceBuffer& buffer(const std::string& name, std::size_t bytes);
  // BF16 bits of m into the buffer `name`.
  DeviceBuffer& put_bf16(const std::string& name, const Matrix& m);

  TeModelOptions o_;
  Gemms& gemms_;
  std::unique_ptr<Library> lib_;
  std::vector<std::unique_ptr<Layer>> layers_;
  Matrix gamma_, beta_;
  std::map<std::string, std::unique_ptr<DeviceBuffer>> buffers_;
  // Between the host work of a step: the activation flowing forward, the gradient flowing back,
  // and what each cast's host work held for its dump.
  Matrix a_, dy_;
  std::map<std::string, Matrix> held_;
};

}  // namespace fp8scope::trainer
