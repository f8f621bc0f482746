#include "fp8scope/checkpoint/weight_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "element_comparison.h"
#include "fp8scope/checkpoint/producer_cast.h"
#include "fp8scope/kernels/dtype.h"
#include "fp8scope/kernels/gemm_check.h"

namespace fp8scope::checkpoint {
namespace {

template <class... Args>
std::string format(const char* fmt, Args... args) {
  char text[400];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

std::string storage_name(ScaleStorage s) {
  switch (s) {
    case ScaleStorage::kF32: return "F32";
    case ScaleStorage::kBF16: return "BF16";
    case ScaleStorage::kF16: return "F16";
    case ScaleStorage::kUE4M3: return "UE4M3";
    case ScaleStorage::kE8M0: return "E8M0";
  }
  return "?";
}

// The reference tensor of a weight: the same name (module.weight, or the module itself as
// transformers names a gpt-oss expert parameter), of the same shape or its expert transpose.
std::optional<Reference> find_reference(const CheckpointFiles& ref, const QuantizedWeight& w, std::string* why) {
  for (const std::string& name : {w.module + ".weight", w.module}) {
    const CheckpointTensor* t = ref.find(name);
    if (t == nullptr) continue;
    const std::string dtype = t->entry.dtype->name;
    const std::optional<DType> d = t->entry.dtype->dtype;
    if (!d || dtype_is_codes(*d)) {
      *why = name + " in the reference is " + dtype + ", not high-precision weights";
      return std::nullopt;
    }
    const std::vector<std::int64_t>& s = t->entry.shape;
    const std::int64_t n = t->entry.numel();
    const bool same = n == w.numel() && s.size() >= 2 && s[s.size() - 2] == w.rows && s.back() == w.cols;
    const bool transposed = !same && n == w.numel() && s.size() >= 2 && s[s.size() - 2] == w.cols && s.back() == w.rows;
    if (!same && !transposed) {
      *why = name + " in the reference has " + std::to_string(n) + " elements; the export's weight " +
             std::to_string(w.numel()) + " (" + std::to_string(w.rows) + " x " + std::to_string(w.cols) + ")";
      return std::nullopt;
    }
    Result<MappedTensor> m = ref.map(*t);
    if (!m.ok()) {
      *why = m.message();
      return std::nullopt;
    }
    return Reference{t, std::move(m).value(), *d, transposed};
  }
  *why = "the reference has no " + w.module + ".weight";
  return std::nullopt;
}

// How the stored scales stand against the producer's, block by block.
struct ScaleComparison {
  std::vector<float> expected;  // the producer's scale values
  std::uint64_t differing = 0, inverted = 0, transposed = 0, compared = 0;
  float scale_2_expected = 0;
  // Every compared scale is the producer's times 2^exponent_offset (0: not so): an exponent bias
  // written off by that much.
  int exponent_offset = 0;
};

// k when stored = expected * 2^k exactly, else nullopt.
std::optional<int> power_of_two_ratio(float stored, float expected) {
  if (!(std::isfinite(stored) && std::isfinite(expected) && stored > 0 && expected > 0)) return std::nullopt;
  int e = 0;
  const double m = std::frexp(static_cast<double>(stored) / expected, &e);
  if (m != 0.5) return std::nullopt;
  return e - 1;
}

bool same_scale(const QuantizedWeight& w, std::uint32_t stored_code, float stored, const ExpectedScale& e) {
  if (w.scale_storage == ScaleStorage::kUE4M3 || w.scale_storage == ScaleStorage::kE8M0) return stored_code == e.code;
  return stored == e.value || std::fabs(stored - e.value) <= 1e-6f * std::fabs(e.value);
}

bool near(double a, double b) { return std::fabs(a - b) <= 1e-3 * std::fabs(b); }

ScaleComparison compare_scales(const QuantizedWeight& w, Convention c, const WeightDecoder& dec,
                               const std::vector<float>& amax, float tensor_amax) {
  ScaleComparison s;
  s.scale_2_expected = w.scale_storage == ScaleStorage::kUE4M3 ? nvfp4_scale_2(tensor_amax) : 1.0f;
  std::vector<ExpectedScale> expected;
  for (float a : amax) expected.push_back(expected_scale(w, c, a, s.scale_2_expected));
  const bool square = w.grid_rows == w.grid_cols && w.grid_rows > 1;
  std::optional<int> offset;
  bool one_offset = true;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    s.expected.push_back(expected[i].known ? expected[i].value : dec.scales()[i]);
    if (!expected[i].known) continue;
    ++s.compared;
    const float stored = dec.scales()[i];
    const std::optional<int> k = power_of_two_ratio(stored, expected[i].value);
    one_offset = one_offset && k && (!offset || *k == *offset);
    if (k) offset = k;
    if (same_scale(w, dec.scale_codes()[i], stored, expected[i])) continue;
    ++s.differing;
    if (near(static_cast<double>(stored) * expected[i].value, 1.0)) ++s.inverted;
    if (square) {
      const std::size_t cells = static_cast<std::size_t>(w.grid_rows * w.grid_cols);
      const std::size_t e = i / cells, gr = i % cells / w.grid_cols, gc = i % cells % w.grid_cols;
      const std::size_t j = e * cells + gc * w.grid_cols + gr;
      if (same_scale(w, dec.scale_codes()[i], stored, expected[j])) ++s.transposed;
    }
  }
  if (one_offset && offset && s.compared > 0) s.exponent_offset = *offset;
  return s;
}

// The reference tensor of the same shape that the export's values match best, when one matches
// far better than the weight's own (an exporter that paired names by shape).
std::optional<std::pair<std::string, double>> better_pairing(const CheckpointFiles& refs, const WeightDecoder& dec,
                                                             const Reference& own) {
  const double own_cos = sampled_cosine(dec, own);
  std::optional<std::pair<std::string, double>> best;
  for (const CheckpointTensor& t : refs.tensors()) {
    if (&t == own.tensor || t.entry.shape != own.tensor->entry.shape || !t.entry.dtype->dtype) continue;
    Result<MappedTensor> m = refs.map(t);
    if (!m.ok()) continue;
    const Reference other{&t, std::move(m).value(), *t.entry.dtype->dtype, own.transposed};
    const double cos = sampled_cosine(dec, other);
    if (cos > 0.99 && cos > own_cos + 0.1 && (!best || cos > best->second)) best = std::make_pair(t.name, cos);
  }
  return best;
}

// What the weight shows alone.
void check_alone(const QuantizedWeight& w, const WeightDecoder& dec, WeightReport& out) {
  const CodeCensus codes = census(dec);
  out.nonfinite_codes = codes.nonfinite, out.codes_at_max = codes.at_max;
  out.amax = codes.amax, out.amin = codes.amin;
  out.dynamic_range_log2 = out.amin > 0 ? std::log2(out.amax / out.amin) : 0.0;
  out.scale_min = HUGE_VAL, out.scale_max = 0;
  for (std::size_t i = 0; i < dec.scales().size(); ++i) {
    const float s = dec.scales()[i];
    const std::uint32_t code = dec.scale_codes()[i];
    ++out.scales;
    if (!std::isfinite(s) || s < 0 || (s == 0 && w.scale_storage != ScaleStorage::kUE4M3)) ++out.bad_scales;
    if (std::isfinite(s)) out.scale_min = std::min<double>(out.scale_min, s), out.scale_max = std::max<double>(out.scale_max, s);
    const bool floor = w.scale_storage == ScaleStorage::kUE4M3 ? code <= 1
                       : w.scale_storage == ScaleStorage::kE8M0 ? code == 0
                                                                : s < 0x1p-126f;
    const bool ceiling = (w.scale_storage == ScaleStorage::kUE4M3 && code == 0x7E) ||
                         (w.scale_storage == ScaleStorage::kE8M0 && code == 0xFE);
    out.scales_at_floor += floor;
    out.scales_at_ceiling += ceiling;
  }
  if (out.scales == 0) out.scale_min = 0;
  if (out.nonfinite_codes > 0) {
    out.add({Severity::kError, "nonfinite_codes",
             format("%llu codes are NaN or Inf in %s: every GEMM output they touch is NaN",
                    static_cast<unsigned long long>(out.nonfinite_codes), w.codes_format->name)});
  }
  if (out.bad_scales > 0) {
    out.add({Severity::kError, "bad_scale", format("%llu of %llu scales are zero, negative, NaN or Inf",
                                                   static_cast<unsigned long long>(out.bad_scales),
                                                   static_cast<unsigned long long>(out.scales))});
  }
  // A cast from amax puts about one code a block at ±max; many more is saturation.
  if (out.codes_at_max > 4 * out.scales + out.numel / 100) {
    out.add({Severity::kWarning, "saturated", format("%.3g%% of the codes sit at +-max (%llu blocks)",
                                                     100.0 * static_cast<double>(out.codes_at_max) / static_cast<double>(out.numel),
                                                     static_cast<unsigned long long>(out.scales))});
  }
  // NVFP4's per-tensor factor (amax / (6 * 448)) puts the block holding the amax at 448 by design; more than
  // about one block in a hundred there means the factor is too small and blocks clip.
  const std::uint64_t expected_at_ceiling = w.scale_storage == ScaleStorage::kUE4M3 ? 1 + out.scales / 100 : 0;
  if (out.scales_at_ceiling > expected_at_ceiling) {
    out.add({Severity::kWarning, "scale_ceiling", format("%llu block scales at the %s format's ceiling",
                                                         static_cast<unsigned long long>(out.scales_at_ceiling),
                                                         storage_name(w.scale_storage).c_str())});
  }
}

// Which mistake the stored scales show, by name (the scales differ from the producer's).
Finding scale_finding(const WeightDecoder& dec, const ScaleComparison& scales, const ElementComparison& el,
                      bool scale_2_wrong, const WeightReport& out) {
  const char* code = "scale_differs";
  std::string message;
  if (scale_2_wrong && near(static_cast<double>(dec.scale_2()) * scales.scale_2_expected, 1.0)) {
    code = "inverted_scale";
    message = format("weight_scale_2 is %.7g, the inverse of amax/2688 = %.7g", dec.scale_2(), scales.scale_2_expected);
  } else if (scales.inverted * 2 >= scales.differing && scales.differing > 0) {
    code = "inverted_scale";
    message = format("%llu of %llu scales are the inverse of the producer's (amax/fmax): stored where its inverse is "
                     "expected; values off %.3g relative (cosine %.6f)",
                     static_cast<unsigned long long>(scales.inverted), static_cast<unsigned long long>(scales.compared),
                     out.relative_error, out.cosine);
  } else if (scales.transposed * 2 >= scales.differing && scales.differing > 0) {
    code = "transposed_scales";
    message = format("%llu of %llu block scales are the producer's of the transposed block: the grid is stored [in, out]",
                     static_cast<unsigned long long>(scales.transposed), static_cast<unsigned long long>(scales.compared));
  } else if (scales.exponent_offset != 0 && el.differing_from_expected == 0) {
    // The codes are right and every scale is off by one power of two: the scale's exponent was
    // written with another bias (an E8M0 bias of 126 or 128 for 127), not a scale from elsewhere.
    code = "scale_exponent_bias";
    message = format("every stored scale is the producer's times 2^%d, the codes are its own: the scales' exponent "
                     "bias is off by %d, so every value is read x%g",
                     scales.exponent_offset, scales.exponent_offset, std::ldexp(1.0, scales.exponent_offset));
  } else if (el.differing == 0 && el.differing_from_expected > 0) {
    // The codes are the reference cast with the stored scales, which are not the producer's for
    // these weights: a scale from older weights, under which the larger values saturate.
    code = "stale_scale";
    message = format("the codes are the reference cast with the stored scales, but %llu of %llu of those are not the "
                     "producer's for these weights (a scale from older weights): %llu codes sit at +-max, values off "
                     "%.3g relative",
                     static_cast<unsigned long long>(scales.differing), static_cast<unsigned long long>(scales.compared),
                     static_cast<unsigned long long>(out.codes_at_max), out.relative_error);
  } else if (el.differing_from_expected == 0) {
    message = format("the codes are the producer's cast of the reference, but %llu of %llu stored scales are not its "
                     "scales; values off %.3g relative",
                     static_cast<unsigned long long>(scales.differing), static_cast<unsigned long long>(scales.compared),
                     out.relative_error);
  } else {
    message = format("%llu of %llu scales differ from the producer's of the reference; values off %.3g relative, "
                     "%llu codes differ",
                     static_cast<unsigned long long>(scales.differing), static_cast<unsigned long long>(scales.compared),
                     out.relative_error, static_cast<unsigned long long>(el.differing_from_expected));
  }
  return {Severity::kError, code, message};
}

// What the codes show once the scales are the producer's: packed FP4 in the other nibble order,
// codes more than a step off, or another rounding.
void add_codes_finding(const CheckpointFiles& files, const QuantizedWeight& w, Convention c, const Reference& ref,
                       const ScaleComparison& scales, const ElementComparison& el, WeightReport& out) {
  // Packed FP4 written with element 2j in the high nibble: read the other way round, the codes are
  // the producer's.
  if (el.off_by_more > 0 && w.codes_format == &kE2M1) {
    Result<WeightDecoder> swapped = WeightDecoder::open(files, w, true);
    if (swapped.ok() && compare_elements(swapped.value(), c, ref, scales.expected).differing_from_expected == 0) {
      out.add({Severity::kError, "swapped_nibbles",
               format("the packed FP4 codes hold element 2j in the high nibble and 2j+1 in the low one; every loader "
                      "reads them the other way round (%llu codes off by more than one step as stored, none swapped)",
                      static_cast<unsigned long long>(el.off_by_more))});
      return;
    }
  }
  const double n = static_cast<double>(std::max<std::uint64_t>(out.numel, 1));
  if (el.off_by_more > 0) {
    out.add({Severity::kError, "codes_differ",
             format("%llu codes differ from the producer's cast of the reference by more than one step (cosine %.6f, "
                    "SQNR %.1f dB)",
                    static_cast<unsigned long long>(el.off_by_more), out.cosine, out.sqnr_db)});
  } else if (static_cast<double>(el.differing) > 0.01 * n) {
    out.add({Severity::kWarning, "rounding",
             format("%.3g%% of the codes are one step from the producer's cast (another rounding)",
                    100.0 * static_cast<double>(el.differing) / n)});
  }
}

// The weight against its reference, and what went wrong, by name.
void check_against(const CheckpointFiles& files, const CheckpointFiles& refs, const QuantizedWeight& w, Convention c,
                   const WeightDecoder& dec, WeightReport& out) {
  std::string why;
  std::optional<Reference> ref = find_reference(refs, w, &why);
  if (!ref) {
    out.add({Severity::kWarning, "no_reference", why});
    return;
  }
  // Only gpt-oss experts have a reference convention of the other orientation (transformers'
  // [E, in, out]); any other weight that matches its reference only transposed is stored so, and
  // every loader reads it [out, in].
  if (ref->transposed && c != Convention::kGptOssMxfp4) {
    out.add({Severity::kError, "transposed_weight",
             format("the weight is stored [%lld, %lld], its reference %s is [%lld, %lld]: written [in, out], where %s "
                    "loaders read [out, in]",
                    static_cast<long long>(w.rows), static_cast<long long>(w.cols), ref->tensor->name.c_str(),
                    static_cast<long long>(w.cols), static_cast<long long>(w.rows), convention_info(c).name)});
    return;
  }
  out.compared = true;
  out.reference = ref->tensor->name;
  float tensor_amax = 0;
  const std::vector<float> amax = block_amaxes(dec, *ref, &tensor_amax);
  const ScaleComparison scales = compare_scales(w, c, dec, amax, tensor_amax);
  const ElementComparison el = compare_elements(dec, c, *ref, scales.expected);
  GemmCheckResult r;
  el.sums.finish(&r);
  out.mse = r.mse, out.cosine = r.cosine, out.max_abs_error = el.sums.max_abs_error;
  out.relative_error = relative_error(el.sums);
  out.sqnr_db = el.sums.squared_error > 0 ? 10.0 * std::log10(el.sums.ref_squares / el.sums.squared_error) : HUGE_VAL;
  out.codes_differing = el.differing_from_expected, out.codes_off_by_more = el.off_by_more, out.scales_differing = scales.differing;
  // Pairs with NaN or Inf on either side are left out of the sums; with none left there is no
  // figure to hold the export to, and no verdict either.
  if (el.sums.count == 0 && out.numel > 0) {
    out.add({Severity::kError, "unusable_reference",
             format("no value could be compared: reference %s holds only NaN or Inf where the export is finite",
                    out.reference.c_str())});
    return;
  }
  const bool scale_2_wrong = w.scale_2 != nullptr && !near(dec.scale_2(), scales.scale_2_expected);
  if (out.cosine < 0.9) {
    if (auto other = better_pairing(refs, dec, *ref)) {
      out.add({Severity::kError, "wrong_pairing",
               format("its values are reference %s's (cosine %.4f), not %s's (%.4f): paired by shape with the wrong tensor",
                      other->first.c_str(), other->second, out.reference.c_str(), out.cosine)});
      return;
    }
  }
  // Read as FNUZ the values must match the reference, not merely halve a uniform error (they halve:
  // the cosine stays, the relative error follows from the sums).
  const double as_fnuz = relative_error_as_fnuz(el.sums);
  if (w.codes_format == &kE4M3 && as_fnuz < 0.1 && as_fnuz < 0.5 * out.relative_error && out.cosine > 0.999) {
    out.add({Severity::kError, "e4m3_variant",
             format("the codes are E4M3 FNUZ (bias 8), stored as F8_E4M3: read as OCP E4M3 every value doubles "
                    "(relative error %.3g; %.3g read as FNUZ)", out.relative_error, as_fnuz)});
    return;
  }
  if (scale_2_wrong || scales.differing > 0) {
    out.add(scale_finding(dec, scales, el, scale_2_wrong, out));
    return;
  }
  add_codes_finding(files, w, c, *ref, scales, el, out);
}

}  // namespace

void WeightReport::add(Finding f) {
  // The most severe finding names the verdict; of equal ones, the first.
  if (f.severity > severity || (f.severity != Severity::kOk && f.severity == severity && verdict == "ok")) verdict = f.code;
  severity = std::max(severity, f.severity);
  findings.push_back(std::move(f));
}

WeightReport check_weight(const CheckpointFiles& files, const QuantizedWeight& w, const Declaration& d,
                          const CheckpointFiles* reference) {
  WeightReport out;
  out.module = w.module;
  out.codes_dtype = w.codes != nullptr ? w.codes->entry.dtype->name : "";
  out.shape = {w.rows, w.cols};
  if (w.experts > 1) out.shape.insert(out.shape.begin(), w.experts);
  out.numel = static_cast<std::uint64_t>(w.numel());
  out.scale_layout = (w.block_rows == w.rows && w.block_cols == w.cols ? std::string("per tensor")
                      : w.block_rows == 1 && w.block_cols == w.cols ? std::string("per row")
                                                                    : std::to_string(w.block_rows) + "x" + std::to_string(w.block_cols)) +
                     " " + storage_name(w.scale_storage);
  Result<WeightDecoder> dec = WeightDecoder::open(files, w);
  if (!dec.ok()) {
    out.add({Severity::kError, "unreadable", dec.message()});
    return out;
  }
  check_alone(w, dec.value(), out);
  if (reference != nullptr) check_against(files, *reference, w, d.convention, dec.value(), out);
  if (out.severity == Severity::kOk) out.verdict = out.compared ? "matches" : "ok";
  return out;
}

}  // namespace fp8scope::checkpoint
