// The HTML page of `fp8scope checkpoint -o report.html`: the verdict, the convention and why, the
// structural findings, every weight worst first with its figures against the reference, and the
// inference check against training (--run) when it was asked for. One file, no script.
#pragma once

#include <optional>
#include <string>

#include "fp8scope/checkpoint/checkpoint_check.h"
#include "fp8scope/insight/inference_check.h"

namespace fp8scope::report {

std::string checkpoint_page(const checkpoint::CheckpointReport& report,
                            const std::optional<insight::InferenceCheck>& training, const std::string& generated_by);

}  // namespace fp8scope::report
