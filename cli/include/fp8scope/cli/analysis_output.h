// How `fp8scope analyze` prints a tensor's report: a readable table, or JSON Lines (one object per
// tensor x recipe) whose statistic keys come from the statistics table.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "fp8scope/kernels/observed_analysis.h"
#include "fp8scope/kernels/recipe_analysis.h"
#include "fp8scope/tensorfile/tensor_file.h"

namespace fp8scope::cli {

// The JSON object for one recipe's result on one tensor (non-finite numbers become null).
nlohmann::ordered_json recipe_json(const std::string& file, const FileTensor& tensor, const TensorReport& report,
                                   const RecipeResult& recipe);
nlohmann::ordered_json skipped_json(const std::string& file, const FileTensor& tensor);
// A recipe TE would refuse on the tensor (te_refusal): its name and TE's reason.
nlohmann::ordered_json refused_json(const std::string& file, const FileTensor& tensor, RecipeKind recipe,
                                    const std::string& why);
// The JSON object for a job's own codes ("observed") and the scales they were read with.
// `relative`: the figures in the tensor's unit are relative to a per-tensor factor not given
// (NVFP4 codes without --scale-inv): "value_units": "relative", else "real".
nlohmann::ordered_json observed_json(const std::string& file, const FileTensor& tensor, const ObservedAnalysis& a,
                                     const ScaleLayoutTerm& layout, bool relative, double seconds);

void print_table(std::ostream& out, const FileTensor& tensor, const TensorReport& report);
void print_observed(std::ostream& out, const FileTensor& tensor, const ObservedAnalysis& a, const ScaleLayoutTerm& layout,
                    bool relative);
void print_skipped(std::ostream& out, const FileTensor& tensor);

std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace fp8scope::cli
