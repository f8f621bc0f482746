#include "fp8scope/insight/inference_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace fp8scope::insight {
namespace {

template <class... Args>
std::string format(const char* fmt, Args... args) {
  char text[256];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

const RecordPoint* latest(const std::vector<RecordPoint>* points) {
  return points == nullptr || points->empty() ? nullptr : &points->back();
}

double median(const std::vector<GemmOutputPoint>& points, double GemmOutputPoint::*value) {
  std::vector<double> v;
  for (const GemmOutputPoint& p : points) {
    if (const double x = p.*value; std::isfinite(x)) v.push_back(x);
  }
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

bool flagged(WeightVerdict v) {
  return v == WeightVerdict::kScaleDiffers || v == WeightVerdict::kCodesDiffer || v == WeightVerdict::kFormatDiffers;
}

bool same_scale(double a, double b) { return std::fabs(a - b) <= kScaleTolerance * std::fabs(b); }

// A block-scaled weight (MXFP8, NVFP4, 1x128, 128x128): only training's own codes of the same
// layout can be compared, by their fingerprint and their smallest and largest block scale; the
// daemon fingerprints a BF16 weight's per-tensor cast, not its block casts.
void check_block_scaled(WeightCheck& c, const RecordPoint& inf, ScaleLayout inf_layout, const TensorRecords& training) {
  const FloatFormat* fmt = nullptr;
  const RecordPoint* ref = latest(training.find(Caster::job(), &fmt));
  if (ref == nullptr || !training.block_scaled()) {
    c.verdict = WeightVerdict::kNotComparable;
    c.detail = std::string("inference casts this weight with ") + scale_layout_name(inf_layout) +
               " block scales; training has no block-scaled codes of it to compare with";
    return;
  }
  c.training_step = ref->step;
  c.training_format = fmt;
  c.training_scale = ref->scale;
  c.training_source = Caster::job();
  if (fmt != c.format || training.scale_layout != inf_layout) {
    c.verdict = WeightVerdict::kFormatDiffers;
    c.detail = std::string("inference casts to ") + c.format->name + " with " + scale_layout_name(inf_layout) +
               " scales, training to " + fmt->name + " with " + scale_layout_name(training.scale_layout);
  } else if (!same_scale(inf.scale, ref->scale) || !same_scale(inf.scale_max, ref->scale_max)) {
    c.verdict = WeightVerdict::kScaleDiffers;
    c.detail = format("block scales %.7g to %.7g, training ended with %.7g to %.7g", inf.scale, inf.scale_max,
                      ref->scale, ref->scale_max);
  } else if (inf.codes_digest.empty() || ref->codes_digest.empty() || inf.codes_digest != ref->codes_digest) {
    c.verdict = inf.codes_digest.empty() || ref->codes_digest.empty() ? WeightVerdict::kNotComparable
                                                                       : WeightVerdict::kCodesDiffer;
    c.detail = c.verdict == WeightVerdict::kCodesDiffer
                   ? "the same block scale range, but the codes differ from training's last (another checkpoint)"
                   : "the same block scale range; no code fingerprint on one side";
  } else {
    c.verdict = WeightVerdict::kMatches;
    c.detail = "the same codes and block scale range as training's last";
  }
}

WeightCheck check_weight(const TensorKey& key, const RecordPoint& inf, const FloatFormat* inf_format,
                         ScaleLayout inf_layout, const TensorRecords* training) {
  WeightCheck c;
  c.tensor = key;
  c.step = inf.step;
  c.format = inf_format;
  c.scale = inf.scale;
  if (training == nullptr) {
    c.verdict = WeightVerdict::kNotInTraining;
    c.detail = "training captured no weight of this layer and GEMM";
    return c;
  }
  if (inf_layout != ScaleLayout::kNone) {
    check_block_scaled(c, inf, inf_layout, *training);
    return c;
  }
  // Trained in FP8: the codes and scale training's last step used. Trained in BF16: the scale and
  // codes a per-tensor cast of the final weight gives.
  Caster source = Caster::job();
  const FloatFormat* fmt = nullptr;
  const RecordPoint* ref = latest(training->find(source, &fmt));
  if (ref == nullptr) {
    source = Caster::recipe(RecipeKind::kTensorCurrent);
    ref = latest(training->find(source, &fmt));
  }
  if (ref == nullptr) {
    c.verdict = WeightVerdict::kNotComparable;
    c.detail = "training's capture of this weight has neither FP8 codes nor a current-scaling cast";
    return c;
  }
  c.training_step = ref->step;
  c.training_format = fmt;
  c.training_scale = ref->scale;
  c.training_source = source;
  if (fmt != inf_format) {
    c.verdict = WeightVerdict::kFormatDiffers;
    c.detail = std::string("inference casts to ") + inf_format->name + ", training to " + fmt->name;
  } else if (training->block_scaled()) {
    c.verdict = WeightVerdict::kFormatDiffers;
    c.detail = std::string("inference casts with one per-tensor scale, training with ") +
               scale_layout_name(training->scale_layout) + " block scales";
  } else if (!same_scale(inf.scale, ref->scale)) {
    c.verdict = WeightVerdict::kScaleDiffers;
    c.detail = format("scale %.7g, training ended with %.7g (%+.2f binades)", inf.scale, ref->scale,
                      std::log2(inf.scale / ref->scale));
  } else if (inf.codes_digest.empty() || ref->codes_digest.empty()) {
    c.verdict = WeightVerdict::kNotComparable;
    c.detail = "the same scale; no code fingerprint on one side (a daemon older than the inference check)";
  } else if (inf.codes_digest != ref->codes_digest) {
    c.verdict = WeightVerdict::kCodesDiffer;
    c.detail = "the same scale, but the FP8 codes differ from the trained weight cast with it (another "
               "checkpoint, layout or rounding)";
  } else {
    c.verdict = WeightVerdict::kMatches;
    c.detail = "the same scale and the same codes";
  }
  return c;
}

}  // namespace

const char* weight_verdict_name(WeightVerdict v) {
  switch (v) {
    case WeightVerdict::kMatches: return "matches";
    case WeightVerdict::kScaleDiffers: return "scale differs";
    case WeightVerdict::kCodesDiffer: return "codes differ";
    case WeightVerdict::kFormatDiffers: return "format differs";
    case WeightVerdict::kNotInTraining: return "not in training";
    case WeightVerdict::kNotComparable: return "not comparable";
  }
  return "?";
}

std::optional<InferenceCheck> check_inference(const RunRecords& inference, const RunRecords& training) {
  // A run that computes gradients is a training run: its weights are its own, not training's.
  for (const auto& [key, records] : inference.tensors) {
    if (key.gemm == "dgrad" || key.gemm == "wgrad") return std::nullopt;
  }
  InferenceCheck out;
  out.run = inference.run;
  out.training = training.run;
  for (const auto& [key, records] : inference.tensors) {
    if (key.gemm != "fprop" || key.operand != "w") continue;
    const FloatFormat* fmt = nullptr;
    const RecordPoint* inf = latest(records.find(Caster::job(), &fmt));
    if (inf == nullptr) continue;  // inference ran this GEMM in high precision
    auto it = training.tensors.find(key);
    out.weights.push_back(
        check_weight(key, *inf, fmt, records.scale_layout, it == training.tensors.end() ? nullptr : &it->second));
    out.flagged += flagged(out.weights.back().verdict);
  }
  if (out.weights.empty()) return std::nullopt;
  std::stable_sort(out.weights.begin(), out.weights.end(), [](const WeightCheck& a, const WeightCheck& b) {
    return flagged(a.verdict) > flagged(b.verdict);
  });

  // The GEMM check's output error per layer, where either side captured a BF16 (X, W) pair.
  std::map<std::pair<std::string, std::string>, OutputCheck> outputs;
  for (const RunRecords* side : {&inference, &training}) {
    for (const auto& [layer, modes] : side->gemm_outputs) {
      for (const auto& [accumulate, points] : modes) {
        auto [it, added] = outputs.try_emplace({layer, accumulate});
        OutputCheck& o = it->second;
        if (added) o = OutputCheck{layer, accumulate, std::nan(""), std::nan(""), std::nan(""), std::nan("")};
        (side == &inference ? o.run_cosine : o.training_cosine) = median(points, &GemmOutputPoint::cosine);
        (side == &inference ? o.run_mse : o.training_mse) = median(points, &GemmOutputPoint::mse);
      }
    }
  }
  for (auto& [key, o] : outputs) out.outputs.push_back(o);
  return out;
}

}  // namespace fp8scope::insight
