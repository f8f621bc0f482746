#include "fp8scope/cli/analyze_command.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>

#include "fp8scope/cli/analysis_output.h"
#include "fp8scope/cli/scale_source.h"
#include "fp8scope/kernels/cpu_engine.h"
#include "fp8scope/kernels/observed_analysis.h"
#include "fp8scope/kernels/recipe_analysis.h"
#include "fp8scope/te/te_names.h"
#include "fp8scope/tensorfile/tensor_file.h"

namespace fp8scope::cli {
namespace {

constexpr int kBadInput = 2;

Result<std::vector<RecipePlan>> plans_from(const AnalyzeOptions& o) {
  const std::optional<CastFormat> format = format_from_name(o.format);
  if (!format || *format == CastFormat::kE2M1) return Status::error("--format: expected e4m3 or e5m2, got " + o.format);
  const std::optional<Operand> operand = operand_from_name(o.operand);
  if (!operand || *operand == Operand::kOut) return Status::error("--operand: expected x, w or dy, got " + o.operand);
  // A GEMM that reads one of the operand's copies; by default the row-wise copy's.
  const te::TensorName& copies = te::tensor_of(*operand);
  const std::optional<GemmRole> gemm = o.gemm.empty() ? copies.rowwise_gemm : gemm_from_name(o.gemm);
  if (!gemm || (*gemm != copies.rowwise_gemm && *gemm != copies.columnwise_gemm)) {
    return Status::error("--gemm: expected a GEMM that reads " + o.operand + " (fprop, dgrad or wgrad), got " + o.gemm);
  }
  if (o.scale && !(std::isfinite(*o.scale) && *o.scale > 0.0)) {
    return Status::error("--scale: expected a finite number > 0, got " + std::to_string(*o.scale));
  }
  if (o.amax && !(std::isfinite(*o.amax) && *o.amax >= 0.0)) {
    return Status::error("--amax: expected a finite number >= 0, got " + std::to_string(*o.amax));
  }
  std::vector<RecipeKind> kinds(std::begin(kDefaultRecipeKinds), std::end(kDefaultRecipeKinds));
  if (!o.recipes.empty()) {
    kinds.clear();
    for (const std::string& name : o.recipes) {
      const std::optional<RecipeKind> kind = recipe_kind_from_name(name);
      if (!kind) return Status::error("--recipe: expected one of " + recipe_name_list() + ", got " + name);
      kinds.push_back(*kind);
    }
  }
  std::vector<RecipePlan> plans;
  for (RecipeKind kind : kinds) {
    RecipePlan p;
    p.recipe = default_recipe(kind);
    if (!p.recipe.fp4()) p.recipe.forward_format = p.recipe.backward_format = *format;  // FP4 recipes cast to E2M1
    p.format = p.recipe.format_for(*operand);
    p.operand = *operand;
    p.gemm = *gemm;
    if (o.margin) p.recipe.margin = static_cast<float>(*o.margin);
    if (o.scale && p.recipe.per_tensor()) p.scale = static_cast<float>(*o.scale);
    if (Status s = validate(p.recipe); !s.ok()) return Status::error("--margin: " + s.message());
    if (o.amax && p.recipe.transforms_read(p.operand, p.gemm)) {
      return Status::error("--amax: " + std::string(recipe_name(kind)) + " transforms the tensor first; give the amax of "
                           "its transform with --recipe nvfp4 on the transformed tensor");
    }
    if (o.amax && p.recipe.fp4() && p.recipe.kind != RecipeKind::kMxfp4) {
      // NVFP4's per-tensor scale from the amax the cast used, not the tensor's own.
      Result<QuantSpec> spec = quant_spec_for(p.recipe, p.format, p.operand, std::nullopt);
      if (!spec.ok()) return spec.status();
      p.given = spec.value();
      p.given->tensor_amax = static_cast<float>(*o.amax);
    }
    plans.push_back(p);
  }
  return plans;
}

Result<std::vector<const FileTensor*>> select(const TensorFile& file, const std::vector<std::string>& names) {
  std::vector<const FileTensor*> chosen;
  if (names.empty()) {
    for (const FileTensor& t : file.tensors()) chosen.push_back(&t);
  }
  for (const std::string& name : names) {
    const FileTensor* t = file.find(name);
    if (t == nullptr) {
      std::string known;
      for (const FileTensor& k : file.tensors()) known += (known.empty() ? "" : ", ") + k.name;
      return Status::error(file.path() + ": no tensor named '" + name + "' (the file has: " + known + ")");
    }
    chosen.push_back(t);
  }
  for (const FileTensor* t : chosen) {
    if (t->dtype && t->numel() == 0) {
      return Status::error(file.path() + ": tensor '" + t->name + "' is empty (shape " + shape_text(t->shape) + ")");
    }
  }
  return chosen;
}

std::string layout_list() {
  std::string names;
  for (const ScaleLayoutTerm& l : scale_layouts()) names += std::string(names.empty() ? "" : ", ") + l.name;
  return names;
}

// FILE's tensors as a job's own codes read with the scales of --scales.
int run_observed(const AnalyzeOptions& o, const TensorFile& file, const std::vector<const FileTensor*>& chosen,
                 std::ostream& out, std::ostream& err) {
  const ScaleLayoutTerm* layout = scale_layout_from_name(o.scale_layout);
  if (layout == nullptr) {
    err << "fp8scope analyze: --scale-layout: expected one of " << layout_list() << ", got " << o.scale_layout << "\n";
    return kBadInput;
  }
  const bool per_tensor = layout->value == ScaleLayout::kTensorScalar;
  if (o.scale_order != "cublas" && o.scale_order != "compact") {
    err << "fp8scope analyze: --scale-order: expected cublas or compact, got " << o.scale_order << "\n";
    return kBadInput;
  }
  if (o.scale_inv && !(std::isfinite(*o.scale_inv) && *o.scale_inv > 0.0)) {
    err << "fp8scope analyze: --scale-inv: expected a finite number > 0, got " << *o.scale_inv << "\n";
    return kBadInput;
  }
  if (per_tensor == !o.scales.empty()) {
    err << "fp8scope analyze: " << (per_tensor ? "--scale-layout scalar_32f takes --scale-inv, not --scales"
                                               : "--scale-layout " + o.scale_layout + " needs --scales")
        << "\n";
    return kBadInput;
  }
  ScaleSource source;
  if (!per_tensor) {
    Result<ScaleSource> s = read_scale_source(o.scales, file);
    if (!s.ok()) {
      err << "fp8scope analyze: " << s.message() << "\n";
      return kBadInput;
    }
    source = std::move(s).value();
  }
  if (!o.json) out << o.file << "\n";
  for (const FileTensor* t : chosen) {
    if (!t->dtype || !dtype_is_codes(*t->dtype)) {
      err << "fp8scope analyze: " << o.file << ": tensor '" << t->name << "': --scale-layout reads codes (e4m3, e5m2 "
          << "or e2m1; --dtype names raw .npy bytes), got " << (t->dtype ? dtype_name(*t->dtype) : t->file_dtype) << "\n";
      return kBadInput;
    }
    const TensorView v = t->view();
    ObservedTensor observed;
    observed.codes = v.data;
    observed.dtype = v.dtype;
    observed.shape = {v.rows, v.cols, o.k_outer};
    observed.layout = layout->value;
    observed.scales = source.bytes;
    observed.compact_scales = o.scale_order == "compact";
    observed.scale_inv = static_cast<float>(o.scale_inv.value_or(1.0));
    const bool relative = layout->relative_values(o.scale_inv.has_value());
    const auto start = std::chrono::steady_clock::now();
    Result<ObservedAnalysis> a = analyze_observed(observed);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!a.ok()) {
      err << "fp8scope analyze: " << o.file << ": tensor '" << t->name << "': " << a.message() << "\n";
      return kBadInput;
    }
    if (o.json) {
      out << observed_json(o.file, *t, a.value(), *layout, relative, seconds).dump() << "\n";
    } else {
      print_observed(out, *t, a.value(), *layout, relative);
    }
  }
  return 0;
}

}  // namespace

void add_analyze_command(CLI::App& app, AnalyzeOptions& o) {
  CLI::App* cmd = app.add_subcommand("analyze", "What each FP8 recipe does to the tensors of a .npy or .safetensors file");
  cmd->add_option("FILE", o.file, ".npy or .safetensors file")->required();
  cmd->add_option("--tensor", o.tensors, "Analyze only this tensor (repeatable); default: every tensor");
  cmd->add_option("--recipe", o.recipes, "Recipe to evaluate (repeatable): " + recipe_name_list() +
                                          "; default: all but " + off_by_default_recipe_list());
  cmd->add_option("--format", o.format, "FP8 format to quantize to: e4m3 or e5m2 (the FP4 recipes cast to e2m1)")
      ->capture_default_str();
  cmd->add_option("--gemm", o.gemm,
                  "The GEMM that reads it: fprop, dgrad or wgrad (nvfp4_te casts the copy that GEMM reads); default: "
                  "fprop for x and w, dgrad for dy");
  cmd->add_option("--operand", o.operand, "The tensor's role: x, w or dy (NVFP4 gives weights 16x16 blocks)")
      ->capture_default_str();
  cmd->add_option("--scale", o.scale,
                  "Scale for the per-tensor recipes (e.g. a delayed scale from an earlier step); default: "
                  "current scaling, and delayed scaling at its steady state");
  cmd->add_option("--amax", o.amax,
                  "NVFP4 recipes: the per-tensor amax the cast used (one all-reduced across ranks, or a column-wise "
                  "copy's after its Hadamard transform); default: the tensor's own");
  cmd->add_option("--margin", o.margin, "Delayed scaling margin: scale = fmax * 2^-margin / amax (default 0)");
  cmd->add_option("--dtype", o.dtype,
                  "Element type of .npy files NumPy cannot name: bf16 for '<V2'/'<u2', e4m3 or e5m2 for '|V1'/'|u1', "
                  "e2m1 for '|u1' bytes of two FP4 codes each");
  cmd->add_option("--scale-layout", o.scale_layout,
                  "Read the tensors as a job's own codes with scales in this cuBLASLt layout: " + layout_list());
  cmd->add_option("--scales", o.scales, "The scale tensor: a tensor of FILE, or a .npy/.safetensors file (its first tensor)");
  cmd->add_option("--scale-order", o.scale_order,
                  "cublas (the tiled layout the GEMM reads) or compact (one row per M/N block, one column per K block)")
      ->capture_default_str();
  cmd->add_option("--scale-inv", o.scale_inv,
                  "scalar_32f: the codes' scale_inv; block layouts: a per-tensor factor the block scales multiply "
                  "(NVFP4's), default 1");
  cmd->add_flag("--k-outer", o.k_outer, "Block scales run along the first dimension, not the last (a non-TN operand)");
  cmd->add_flag("--json", o.json, "JSON Lines: one object per tensor and recipe");
  cmd->add_option("--threads", o.threads, "CPU threads (default: all)");
}

int run_analyze(const AnalyzeOptions& o, std::ostream& out, std::ostream& err) {
  Result<std::vector<RecipePlan>> plans = plans_from(o);
  if (!plans.ok()) {
    err << "fp8scope analyze: " << plans.message() << "\n";
    return kBadInput;
  }
  ReadOptions read;
  if (!o.dtype.empty()) {
    read.npy_raw_dtype = dtype_from_name(o.dtype);
    const bool raw_type = read.npy_raw_dtype && (*read.npy_raw_dtype == DType::kBF16 || dtype_is_codes(*read.npy_raw_dtype));
    if (!raw_type) {
      err << "fp8scope analyze: --dtype: expected bf16, e4m3, e5m2 or e2m1, got " << o.dtype << "\n";
      return kBadInput;
    }
  }
  Result<TensorFile> file = read_tensor_file(o.file, read);
  if (!file.ok()) {
    err << "fp8scope analyze: " << file.message() << "\n";
    return kBadInput;
  }
  Result<std::vector<const FileTensor*>> chosen = select(file.value(), o.tensors);
  if (!chosen.ok()) {
    err << "fp8scope analyze: " << chosen.message() << "\n";
    return kBadInput;
  }
  // --dtype names raw bytes; on a tensor whose type the file states it would be silently ignored.
  for (const FileTensor* t : chosen.value()) {
    if (read.npy_raw_dtype && t->dtype != read.npy_raw_dtype) {
      err << "fp8scope analyze: --dtype " << o.dtype << ": tensor '" << t->name << "' of " << o.file << " is "
          << t->file_dtype << ", not raw bytes; --dtype only names .npy elements NumPy cannot ('<V2', '<u2', '|V1', "
          << "'|u1'): leave it out\n";
      return kBadInput;
    }
  }
  if (!o.scale_layout.empty()) return run_observed(o, file.value(), chosen.value(), out, err);
  auto engine = make_cpu_engine(o.threads);
  if (!o.json) out << o.file << "\n";
  for (const FileTensor* t : chosen.value()) {
    if (!t->dtype) {
      o.json ? void(out << skipped_json(o.file, *t).dump() << "\n") : print_skipped(out, *t);
      continue;
    }
    TensorView view = t->view();
    view.channels = channel_axis_for(plans.value().front().operand);
    // What TE would refuse to run on this tensor is not computed; each says why.
    std::vector<RecipePlan> runnable;
    std::vector<std::pair<RecipeKind, std::string>> refused;
    for (const RecipePlan& p : plans.value()) {
      if (std::optional<std::string> why = te_refusal(p.recipe, p.operand, view.dtype, view.cols)) {
        refused.emplace_back(p.recipe.kind, std::move(*why));
      } else {
        runnable.push_back(p);
      }
    }
    Result<TensorReport> report = analyze_recipes(*engine, view, runnable);
    if (!report.ok()) {
      err << "fp8scope analyze: " << o.file << ": tensor '" << t->name << "': " << report.message() << "\n";
      return kBadInput;
    }
    if (o.json) {
      for (const RecipeResult& r : report.value().recipes) out << recipe_json(o.file, *t, report.value(), r).dump() << "\n";
    } else {
      print_table(out, *t, report.value());
    }
    for (const auto& [kind, why] : refused) {
      o.json ? void(out << refused_json(o.file, *t, kind, why).dump() << "\n") : void(out << "  not computed: " << why << "\n");
    }
  }
  return 0;
}

}  // namespace fp8scope::cli
