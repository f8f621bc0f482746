// What the report's pages share: the style sheet, table cells, numbers as the tables show them,
// and the inference check's section (a run's report and `fp8scope checkpoint --run` draw it).
#pragma once

#include <sstream>
#include <string>

#include "fp8scope/insight/inference_check.h"

namespace fp8scope::report {

const char* report_style();
// A figure as the tables show it: "-" for NaN, "inf" for infinities.
std::string number(double v, const char* fmt = "%.3g");
std::string cell(const std::string& text, bool numeric = false);
void inference_check_section(const insight::InferenceCheck& check, std::ostringstream& out);

}  // namespace fp8scope::report
