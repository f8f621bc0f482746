// `fp8scope analyze FILE`: what each FP8 and FP4 recipe would do to the tensors of a .npy or
// .safetensors file, without a daemon.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace fp8scope::cli {

struct AnalyzeOptions {
  std::string file;
  std::vector<std::string> tensors;
  std::vector<std::string> recipes;
  std::string format = "e4m3";
  std::string operand = "x";
  std::string gemm;                        // the GEMM that reads it; default: fprop for x and w, dgrad for dy
  std::optional<double> scale;
  std::optional<double> amax;              // NVFP4: the per-tensor amax the cast used
  std::optional<double> margin;
  std::string dtype;
  bool json = false;
  int threads = 0;
  // A job's own codes with their scales, instead of what-ifs.
  std::string scale_layout;               // a cuBLASLt scale mode by name (scale_layout.h)
  std::string scales;                     // a tensor of FILE, or a .npy/.safetensors file
  std::string scale_order = "cublas";     // cublas (as the GEMM reads them) or compact
  std::optional<double> scale_inv;        // scalar_32f: the scale_inv; block layouts: a per-tensor factor
  bool k_outer = false;
};

void add_analyze_command(CLI::App& app, AnalyzeOptions& options);

// 0 on success, 2 for bad input (one line on err naming the file and the problem).
int run_analyze(const AnalyzeOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fp8scope::cli
