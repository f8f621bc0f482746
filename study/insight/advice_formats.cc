#include "fp8scope/insight/advice_formats.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "fp8scope/kernels/recipe.h"
#include "fp8scope/te/custom_recipe.h"
#include "fp8scope/te/te_names.h"

namespace fp8scope::insight {
namespace {

// TE's names for fp8scope's operands.
const char* te_tensor(const std::string& operand) { return te::tensor_of(operand_from_name(operand).value_or(Operand::kX)).name; }

std::string regex_escape(const std::string& s) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(s, special, R"(\$&)");
}

std::string join(const std::set<std::string>& items, const char* separator) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : separator) + i;
  return out;
}

std::string number(double v, const char* fmt = "%.3g") {
  if (!std::isfinite(v)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, fmt, v);
  return text;
}

// What the debug API should do to one module.
struct ModulePlan {
  std::set<std::string> sampled_gemms, bf16_gemms;
  std::map<std::string, std::set<std::string>> per_tensor;  // gemm -> TE tensor names
  // AutoswitchGemm: the GEMMs and tensors to watch, and the strictest thresholds among them.
  std::set<std::string> autoswitch_gemms, autoswitch_tensors;
  double underflow_pct = 0, mse = 0;
  bool operator<(const ModulePlan& o) const {
    return std::tie(sampled_gemms, bf16_gemms, per_tensor, autoswitch_gemms, autoswitch_tensors, underflow_pct, mse) <
           std::tie(o.sampled_gemms, o.bf16_gemms, o.per_tensor, o.autoswitch_gemms, o.autoswitch_tensors,
                    o.underflow_pct, o.mse);
  }
};

void add_autoswitch(ModulePlan& p, const TensorAdvice& t) {
  const bool first = p.autoswitch_gemms.empty();
  p.autoswitch_gemms.insert(t.tensor.gemm);
  p.autoswitch_tensors.insert(te_tensor(t.tensor.operand));
  p.underflow_pct = first ? t.autoswitch->underflow_pct : std::min(p.underflow_pct, t.autoswitch->underflow_pct);
  p.mse = first ? t.autoswitch->mse : std::min(p.mse, t.autoswitch->mse);
}

}  // namespace

std::string module_name(const std::string& label) { return label.substr(0, label.rfind('#')); }

int transformer_layer_index(const std::string& module) {
  static const std::regex index(R"((?:^|\.)(\d+)(?:\.|$))");
  std::smatch m;
  if (!std::regex_search(module, m, index)) return -1;
  return std::stoi(m[1].str());
}

void write_advice_table(const RunAdvice& a, std::ostream& out, std::size_t max_rows) {
  char line[512];
  // from: what the what-ifs read: the run's own tensors where its casts were captured (cast,
  // recompute), BF16 operands (gemm), the baseline's (see below), or nothing (-).
  std::snprintf(line, sizeof line, "%-5s %-40s %-6s %-3s %-14s %-9s %-9s %-9s %-7s %-9s %-9s %-5s %s\n", "risk", "layer",
                "gemm", "op", "judged_by", "from", "underflow", "d.overflw", "sqnr_dB", "1-cosine", "code_sat", "blame",
                "recommendation");
  out << line;
  std::size_t rows = 0;
  for (const TensorAdvice& t : a.tensors) {
    if (max_rows != 0 && rows++ == max_rows) {
      out << "... " << a.tensors.size() - max_rows << " more tensors (all of them with --top 0)\n";
      break;
    }
    const std::string from = t.what_if_source.empty()  ? "-"
                             : t.what_if_source != a.run ? "baseline"
                                                         : data_source_name(t.what_if_data);
    std::snprintf(line, sizeof line, "%-5.2f %-40s %-6s %-3s %-14s %-9s %-9s %-9s %-7s %-9s %-9s %-5zu %s\n", t.risk,
                  t.tensor.layer.c_str(), t.tensor.gemm.c_str(), t.tensor.operand.c_str(), recipe_name(t.what_if_recipe),
                  from.c_str(), number(t.underflow_current).c_str(), number(t.overflow_delayed).c_str(),
                  number(t.sqnr_current_db, "%.1f").c_str(), number(t.one_minus_cosine).c_str(),
                  number(t.saturation_observed).c_str(), t.spike_blame, recommendation_name(t.recommendation));
    out << line;
  }
  std::set<std::string> sources;
  for (const TensorAdvice& t : a.tensors) {
    if (!t.what_if_source.empty() && t.what_if_source != a.run) sources.insert(t.what_if_source);
  }
  if (!sources.empty()) {
    out << "(underflow, overflow, SQNR and 1-cosine of tensors run " << a.run << " captured only as FP8 or FP4 codes "
        << "come from the same tensors of " << join(sources, ", ") << ", under the recipe in judged_by)\n";
  }
  bool any = false;
  for (const TensorAdvice& t : a.tensors) {
    if (t.recommendation == Recommendation::kKeepFp8 && !t.autoswitch) continue;
    if (!any) out << "\nwhy, for each tensor not kept as it is:\n";
    any = true;
    out << "  " << t.tensor.name() << ": " << recommendation_name(t.recommendation) << " - " << t.reason;
    if (t.autoswitch) {
      out << "; switch its GEMM to high precision while underflow exceeds " << number(t.autoswitch->underflow_pct)
          << "% or MSE " << number(t.autoswitch->mse) << " (AutoswitchGemm in --format te-yaml)";
    }
    out << "\n";
  }
  if (!any) out << "\nevery tensor is kept as it is.\n";
  if (!a.experts.empty()) out << "\nexperts that depart from their layer's others:\n";
  for (const ExpertOutlier& e : a.experts) out << "  " << e.sentence << "\n";
  if (a.ladder.gemms.empty()) return;
  std::string rungs;
  for (const LadderRung& r : kLadderRungs) {
    rungs += (rungs.empty() ? "" : ", ") + std::string(recipe_name(r.recipe)) +
             (r.only_gemm ? std::string(" (") + r.only_gemm + ")" : "");
  }
  out << "\nthe recipe each GEMM can take (the first of " << rungs << " that holds every operand; what it could\n"
      << "move to, not advice: --format te-recipe writes the advice above, each GEMM's tensors kept as they are\n"
      << "unless a line above says otherwise):\n";
  for (const GemmRecipe& g : a.ladder.gemms) {
    std::snprintf(line, sizeof line, "  %-40s %-6s %-15s ", g.layer.c_str(), g.gemm.c_str(),
                  te::precision_name(g.recipe).c_str());
    out << line << g.evidence << "\n";
  }
  std::snprintf(line, sizeof line, "%zu of %zu GEMMs (%.0f%%) are ready for FP4", a.ladder.fp4_ready,
                a.ladder.gemms.size(), 100.0 * a.ladder.fp4_share());
  out << line << "; the NVFP4 training papers keep about 15% of layers in higher precision.\n";
}

namespace {

// What the debug API should do to each module of a run, and what none of its features can say.
struct TeDebugPlan {
  std::map<std::string, ModulePlan> modules;
  std::vector<std::string> recipe_level, autoswitch_notes;
};

TeDebugPlan plan_te_debug(const RunAdvice& a, const TeYamlOptions& options) {
  TeDebugPlan plan;
  for (const TensorAdvice& t : a.tensors) {
    ModulePlan& p = plan.modules[module_name(t.tensor.layer)];
    p.sampled_gemms.insert(t.tensor.gemm);
    switch (t.recommendation) {
      case Recommendation::kFallBackToBf16: p.bf16_gemms.insert(t.tensor.gemm); break;
      case Recommendation::kCurrentScaling: p.per_tensor[t.tensor.gemm].insert(te_tensor(t.tensor.operand)); break;
      case Recommendation::kTuneDelayed:
      case Recommendation::kE5m2ForDy:
      case Recommendation::kFinerRecipe:
        plan.recipe_level.push_back(t.tensor.name() + ": " + recommendation_name(t.recommendation) + " - " + t.reason);
        break;
      case Recommendation::kKeepFp8: break;
    }
    if (t.autoswitch) {
      if (options.autoswitch_gemm) add_autoswitch(p, t);
      plan.autoswitch_notes.push_back(t.tensor.name() + ": underflow " + number(t.autoswitch->underflow_pct) +
                                      "%, mse " + number(t.autoswitch->mse));
    }
  }
  return plan;
}

// Modules that need the same features share one section and one regex; BF16 wins over rescaling
// and switching, and a module that needs nothing gets no section.
std::map<ModulePlan, std::set<std::string>> te_sections(std::map<std::string, ModulePlan>& modules) {
  std::map<ModulePlan, std::set<std::string>> sections;
  for (auto& [module, plan] : modules) {
    for (const std::string& g : plan.bf16_gemms) {
      plan.per_tensor.erase(g);
      plan.autoswitch_gemms.erase(g);
    }
    if (plan.autoswitch_gemms.empty()) plan.autoswitch_tensors.clear();
    if (plan.bf16_gemms.empty() && plan.per_tensor.empty() && plan.autoswitch_gemms.empty()) continue;
    sections[plan].insert(module);
  }
  return sections;
}

te::ConfigNode enabled() { return te::ConfigNode::scalar("True"); }

te::ConfigNode strings(const std::set<std::string>& items) {
  return te::ConfigNode::list_of(std::vector<std::string>(items.begin(), items.end()));
}

// Section `n`: its layers selector, then the features of its plan under transformer_engine.
te::SectionConfig te_section(int n, const ModulePlan& plan, const std::set<std::string>& names,
                             std::uint64_t sampling_interval) {
  using te::ConfigNode;
  std::set<std::string> escaped;
  for (const std::string& m : names) escaped.insert(regex_escape(m));
  te::SectionConfig s;
  s.name = "fp8scope_" + std::to_string(n);
  s.enabled = enabled();
  s.layers = ConfigNode::map({{"layer_name_regex_pattern", ConfigNode::scalar("^(" + join(escaped, "|") + ")$", false)}});
  if (!plan.bf16_gemms.empty() && plan.bf16_gemms == plan.sampled_gemms) {
    s.features.push_back({"DisableQuantizationLayer", true, ConfigNode::map({{"enabled", enabled()}})});
    return s;
  }
  if (!plan.bf16_gemms.empty()) {
    s.features.push_back(
        {"DisableQuantizationGEMM", true, ConfigNode::map({{"enabled", enabled()}, {"gemms", strings(plan.bf16_gemms)}})});
  }
  if (!plan.per_tensor.empty()) {
    std::vector<ConfigNode> gemms;
    for (const auto& [gemm, tensors] : plan.per_tensor) {
      gemms.push_back(ConfigNode::map({{"gemm", ConfigNode::scalar(gemm)}, {"tensors", strings(tensors)}}));
    }
    s.features.push_back(
        {"PerTensorScaling", true, ConfigNode::map({{"enabled", enabled()}, {"gemms_struct", ConfigNode::list(gemms)}})});
  }
  if (!plan.autoswitch_gemms.empty()) {
    // TE PR #2883's AutoswitchGemm: high precision while a watched tensor crosses the thresholds.
    s.features.push_back({"AutoswitchGemm", true,
                          ConfigNode::map({{"enabled", enabled()},
                                           {"gemms", strings(plan.autoswitch_gemms)},
                                           {"tensors", strings(plan.autoswitch_tensors)},
                                           {"underflow_threshold_pct", ConfigNode::scalar(number(plan.underflow_pct, "%.4g"))},
                                           {"mse_threshold", ConfigNode::scalar(number(plan.mse, "%.4g"))},
                                           {"freq", ConfigNode::scalar(std::to_string(sampling_interval))}})});
  }
  return s;
}

// The closing comments: what the written features leave out, and where to find it.
std::vector<std::string> te_notes(const TeDebugPlan& plan, const RunAdvice& a, const TeYamlOptions& options) {
  std::vector<std::string> notes;
  if (!plan.autoswitch_notes.empty() && options.autoswitch_gemm) {
    notes.push_back("AutoswitchGemm (TE PR #2883, not on TE's main branch) thresholds sit between each tensor's");
    notes.push_back("typical and worst sampled step; a section takes the lowest of its tensors':");
    for (const std::string& n : plan.autoswitch_notes) notes.push_back("  " + n);
  } else if (!plan.autoswitch_notes.empty()) {
    notes.push_back("These tensors are fine most steps but lossy at some. TE PR #2883's AutoswitchGemm (not on TE's");
    notes.push_back("main branch) would run their GEMMs in high precision only then; fp8scope advise");
    notes.push_back("--te-features autoswitch_gemm writes it, with these thresholds (underflow %, MSE):");
    for (const std::string& n : plan.autoswitch_notes) notes.push_back("  " + n);
  }
  if (!a.ladder.gemms.empty()) {
    notes.push_back("The recipe each GEMM can take (NVFP4, MXFP8, ...) is no feature of the debug API, whose features");
    notes.push_back("on TE's main branch only disable quantization: fp8scope advise --format te-recipe writes it as a");
    notes.push_back("CustomRecipe, hybrid where a layer's GEMMs differ (TE PR #2817).");
  }
  if (!plan.recipe_level.empty()) {
    notes.push_back("Recipe settings the debug API cannot express (set them in the FP8 recipe):");
    for (const std::string& r : plan.recipe_level) notes.push_back("  " + r);
  }
  return notes;
}

}  // namespace

te::DebugConfig te_debug_config(const RunAdvice& a, const TeYamlOptions& options) {
  TeDebugPlan plan = plan_te_debug(a, options);
  const std::map<ModulePlan, std::set<std::string>> sections = te_sections(plan.modules);
  te::DebugConfig config;
  config.leading_comments = {
      "Transformer Engine precision debug tools (nvdlfw_inspect) config written by fp8scope advise",
      "for run " + a.run + ". Load it with debug_api.initialize(config_file=...)."};
  if (sections.empty()) config.leading_comments.push_back("No layer needs BF16, per-tensor current scaling or automatic switching.");
  int n = 0;
  for (const auto& [module_plan, names] : sections) config.sections.push_back(te_section(++n, module_plan, names, a.sampling_interval));
  config.trailing_comments = te_notes(plan, a, options);
  return config;
}

void write_te_debug_yaml(const RunAdvice& a, std::ostream& out, const TeYamlOptions& options) {
  te::write_debug_config(te_debug_config(a, options), out);
}

namespace {

// How cautious a precision is: BF16 most, then FP8 per tensor, FP8 in blocks, FP4.
int caution(const te::GemmPrecision& p) {
  if (!p) return 100;
  const Recipe r = default_recipe(*p);
  if (r.per_tensor()) return 50;
  if (!r.fp4()) return 40 + r.block_cols / 32;  // block_128x128 and 1x128 over mxfp8's 1x32
  return r.block_cols == 32 ? 20 : 10;          // mxfp4 over the NVFP4 family
}

// What the table says of one tensor, as the precision of the GEMM that reads it.
te::GemmPrecision advised_precision(const TensorAdvice& t) {
  switch (t.recommendation) {
    case Recommendation::kFallBackToBf16: return std::nullopt;
    case Recommendation::kFinerRecipe: return t.finer_recipe.value_or(RecipeKind::kMxfp8);
    case Recommendation::kCurrentScaling: return RecipeKind::kTensorCurrent;
    case Recommendation::kKeepFp8:
    case Recommendation::kTuneDelayed:
    case Recommendation::kE5m2ForDy: break;
  }
  return t.what_if_recipe;  // the recipe that casts as the job does (tensor_current for a BF16 run)
}

}  // namespace

TeRecipePlan te_recipe_plan(const RunAdvice& a) {
  TeRecipePlan plan;
  std::map<std::pair<std::string, std::string>, std::pair<te::GemmPrecision, std::string>> by_gemm;
  std::map<RecipeKind, std::size_t> job_recipes;  // of the tensors the job itself cast
  for (const TensorAdvice& t : a.tensors) {
    if (t.observed_format != nullptr) ++job_recipes[t.what_if_recipe];
    const te::GemmPrecision p = advised_precision(t);
    const auto key = std::make_pair(t.tensor.layer, t.tensor.gemm);
    auto [it, fresh] = by_gemm.try_emplace(key, p, "");
    if (!fresh && caution(p) > caution(it->second.first)) it->second.first = p;
    it->second.second += (it->second.second.empty() ? "" : "; ") + t.tensor.operand + ": " +
                         recommendation_name(t.recommendation);
  }
  for (const auto& [key, value] : by_gemm) {
    GemmRecipe g;
    g.layer = key.first, g.gemm = key.second;
    g.recipe = value.first;
    g.evidence = value.second;
    plan.gemms.push_back(std::move(g));
  }
  // The job's recipe: the one most of its own casts used (of a tie, the first); none in a BF16 run.
  std::size_t most = 0;
  for (const auto& [recipe, n] : job_recipes) {
    if (n > most) most = n, plan.fallback = recipe;
  }
  return plan;
}

void write_te_recipe(const TeRecipePlan& plan, const std::string& run, std::ostream& out) {
  te::ModulePrecisions modules;
  for (const GemmRecipe& g : plan.gemms) {
    modules[module_name(g.layer)][gemm_from_name(g.gemm).value_or(GemmRole::kUnknown)] = g.recipe;
  }
  te::write_te_custom_recipe(modules, plan.fallback, run, out);
}

void write_megatron_layers(const RunAdvice& a, std::ostream& out) {
  std::set<int> bf16, seen;
  std::set<std::string> unnumbered;
  for (const TensorAdvice& t : a.tensors) {
    const std::string module = module_name(t.tensor.layer);
    const int index = transformer_layer_index(module);
    if (index >= 0) seen.insert(index);
    if (t.recommendation != Recommendation::kFallBackToBf16) continue;
    if (index >= 0) bf16.insert(index);
    else unnumbered.insert(module);
  }
  out << "# Transformer layers to keep in BF16 for run " << a.run
      << " (0-based, as in the module names; sampled layers: " << seen.size() << ")\n";
  std::string list;
  for (int i : bf16) list += (list.empty() ? "" : ",") + std::to_string(i);
  out << "bf16_layers: [" << list << "]\n";
  if (!unnumbered.empty()) out << "# modules without a layer number that need BF16: " << join(unnumbered, ", ") << "\n";
  if (bf16.empty() || seen.empty()) return;
  // Megatron-Core keeps only the first and last layers in BF16; say so when the list is exactly that.
  const int last = *seen.rbegin();
  int at_start = 0, at_end = 0;
  while (bf16.count(at_start)) ++at_start;
  while (bf16.count(last - at_end) && last - at_end >= at_start) ++at_end;
  if (static_cast<std::size_t>(at_start + at_end) == bf16.size()) {
    out << "megatron_args: --first-last-layers-bf16 --num-layers-at-start-in-bf16 " << at_start
        << " --num-layers-at-end-in-bf16 " << at_end << "\n";
  } else {
    out << "# not only first and last layers: Megatron's --first-last-layers-bf16 cannot express this list\n";
  }
}

namespace {

// What --format te-recipe writes: the advice per GEMM, and the fallback.
nlohmann::json te_recipe_json(const TeRecipePlan& plan) {
  nlohmann::json gemms = nlohmann::json::array();
  for (const GemmRecipe& g : plan.gemms) {
    gemms.push_back({{"layer", g.layer}, {"gemm", g.gemm}, {"recipe", te::precision_name(g.recipe)}, {"from", g.evidence}});
  }
  return {{"fallback", te::precision_name(plan.fallback)}, {"gemms", gemms}};
}

}  // namespace

std::string advice_json(const RunAdvice& a) {
  nlohmann::json tensors = nlohmann::json::array();
  auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  for (const TensorAdvice& t : a.tensors) {
    nlohmann::json j = {{"layer", t.tensor.layer},
                        {"gemm", t.tensor.gemm},
                        {"operand", t.tensor.operand},
                        {"risk", t.risk},
                        {"driver", t.driver},
                        {"recommendation", recommendation_name(t.recommendation)},
                        {"reason", t.reason},
                        {"underflow_current", finite(t.underflow_current)},
                        {"overflow_delayed", finite(t.overflow_delayed)},
                        {"sqnr_current_db", finite(t.sqnr_current_db)},
                        {"one_minus_cosine", finite(t.one_minus_cosine)},
                        {"lagging_share", finite(t.lagging_share)},
                        {"saturation_observed", finite(t.saturation_observed)},
                        {"what_if_source", t.what_if_source},
                        {"what_if_data", data_source_name(t.what_if_data)},
                        {"what_if_recipe", recipe_name(t.what_if_recipe)},
                        {"observed_layout", t.observed_layout == ScaleLayout::kNone ? "" : scale_layout_name(t.observed_layout)},
                        {"spike_blame", t.spike_blame}};
    if (t.finer_recipe) j["finer_recipe"] = recipe_name(*t.finer_recipe);
    if (t.autoswitch) {
      j["autoswitch"] = {{"underflow_threshold_pct", t.autoswitch->underflow_pct}, {"mse_threshold", t.autoswitch->mse}};
    }
    if (t.replay) {
      j["replay"] = {{"amax_history_len", t.replay->best.history_len},
                     {"margin", t.replay->best.margin},
                     {"clipped_steps", t.replay->best.clipped_steps},
                     {"mean_headroom_log2", t.replay->best.mean_headroom_log2},
                     {"te_default_clipped_steps", t.replay->te_default.clipped_steps},
                     {"te_default_mean_headroom_log2", t.replay->te_default.mean_headroom_log2}};
    }
    tensors.push_back(j);
  }
  nlohmann::json experts = nlohmann::json::array();
  for (const ExpertOutlier& e : a.experts) {
    experts.push_back({{"layer", e.tensor.layer},
                       {"gemm", e.tensor.gemm},
                       {"operand", e.tensor.operand},
                       {"statistic", e.statistic},
                       {"recipe", e.caster.name()},
                       {"experts", e.experts},
                       {"values", e.values},
                       {"median", e.median},
                       {"factor", std::isfinite(e.factor) ? nlohmann::json(e.factor) : nlohmann::json(nullptr)},
                       {"experts_in_layer", e.experts_in_layer},
                       {"sentence", e.sentence}});
  }
  nlohmann::json gemms = nlohmann::json::array();
  for (const GemmRecipe& g : a.ladder.gemms) {
    nlohmann::json operands = nlohmann::json::array();
    for (const OperandRungs& o : g.operands) {
      nlohmann::json rungs = nlohmann::json::array();
      for (const RungEvidence& r : o.rungs) {
        rungs.push_back({{"recipe", recipe_name(r.recipe)},
                         {"holds", r.holds},
                         {"underflow", finite(r.underflow)},
                         {"sqnr_db", finite(r.sqnr_db)},
                         {"one_minus_cosine", finite(r.one_minus_cosine)},
                         {"failed_on", r.failed_on}});
      }
      operands.push_back({{"operand", o.operand}, {"rungs", rungs}});
    }
    gemms.push_back({{"layer", g.layer}, {"gemm", g.gemm}, {"recipe", te::precision_name(g.recipe)}, {"evidence", g.evidence},
                     {"operands", operands}});
  }
  const nlohmann::json ladder = {{"gemms", gemms},
                                 {"fp4_ready", a.ladder.fp4_ready},
                                 {"fp4_share", a.ladder.fp4_share()}};
  return nlohmann::json{{"run", a.run},           {"tensors", tensors},      {"experts", experts},
                        {"recipe_ladder", ladder}, {"te_recipe", te_recipe_json(te_recipe_plan(a))}}
      .dump();
}

}  // namespace fp8scope::insight
