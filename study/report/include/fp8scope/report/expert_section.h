// The report's mixture-of-experts section: the experts that depart from their layer's others, and
// an experts x steps heatmap for each of the worst MoE layers (a grey cell: the expert was not
// sampled at that step, e.g. it received no tokens).
#pragma once

#include <sstream>

#include "fp8scope/insight/run_study.h"

namespace fp8scope::report {

// Writes nothing when the run has no MoE layer. columns: sampled steps are bucketed down to this many.
void expert_section(const insight::RunStudy& study, std::size_t columns, std::ostringstream& out);

}  // namespace fp8scope::report
