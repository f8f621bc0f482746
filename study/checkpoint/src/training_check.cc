#include "fp8scope/checkpoint/training_check.h"

#include <cmath>
#include <cstdio>

#include "fp8scope/checkpoint/quantized_weight.h"
#include "fp8scope/kernels/code_digest.h"

namespace fp8scope::checkpoint {
namespace {

// A training label's module: the NVTX path without the GEMM ordinal ("mlp.0#0" -> "mlp.0").
std::string module_of(const std::string& layer) {
  const std::size_t hash = layer.rfind('#');
  return hash == std::string::npos ? layer : layer.substr(0, hash);
}

// Training's key of the forward weight of `module`; the export's own name when training has none.
insight::TensorKey training_key(const insight::RunRecords& training, const std::string& module) {
  for (const auto& [key, records] : training.tensors) {
    if (key.operand == "w" && key.gemm == "fprop" && module_of(key.layer) == module) return key;
  }
  return insight::TensorKey{module, "fprop", "w"};
}

std::string hex(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

Result<ExportRun> export_as_run(const std::string& export_path, const insight::RunRecords& training) {
  Result<CheckpointFiles> files = CheckpointFiles::open(export_path);
  if (!files.ok()) return files.status();
  Result<Declaration> d = read_declaration(files.value());
  if (!d.ok()) return d.status();
  ExportRun out;
  out.records.run = "export";
  for (const QuantizedWeight& w : discover_weights(files.value(), d.value()).weights) {
    const bool per_tensor = w.decodable && w.experts == 1 && w.grid_rows == 1 && w.grid_cols == 1;
    if (!per_tensor || (w.codes_format != &kE4M3 && w.codes_format != &kE5M2)) {
      out.not_compared.push_back(w.module);
      continue;
    }
    Result<WeightDecoder> dec = WeightDecoder::open(files.value(), w);
    if (!dec.ok()) return dec.status();
    Result<MappedTensor> codes = files.value().map(*w.codes);
    if (!codes.ok()) return codes.status();
    insight::RecordPoint p;
    p.scale = 1.0 / static_cast<double>(dec.value().scales()[0]);
    p.scale_current = p.scale;
    p.scale_max = p.scale;
    p.statistics.fill(std::nan(""));
    p.codes_digest = hex(code_digest(codes.value().bytes()));
    insight::TensorRecords& t = out.records.tensors[training_key(training, w.module)];
    t.dtype = w.codes_format == &kE5M2 ? DType::kE5M2 : DType::kE4M3;
    t.recipes[insight::RecipeKey{Caster::job(), w.codes_format}].push_back(p);
    ++out.records.records;
  }
  return out;
}

}  // namespace fp8scope::checkpoint
