#include "fp8scope/insight/amax_replay.h"

#include <algorithm>
#include <cmath>

#include "fp8scope/kernels/scale_rules.h"

namespace fp8scope::insight {

ReplayOutcome replay_delayed(const std::vector<AmaxPoint>& s, CastFormat format, int history_len, int margin) {
  ReplayOutcome r;
  r.history_len = history_len;
  r.margin = margin;
  const double fmax = format_max(format);
  const double limit = static_cast<double>(scaled_max(static_cast<float>(fmax), static_cast<float>(margin)));
  double headroom_sum = 0;
  std::size_t unclipped = 0;
  for (std::size_t i = 1; i < s.size(); ++i) {
    // The history window is the steps [step - history_len, step); the latest sample always counts,
    // since a sparser sampling than the history cannot see the steps in between.
    double history = 0;
    for (std::size_t j = i; j-- > 0;) {
      if (j + 1 < i && s[j].step + static_cast<std::uint64_t>(history_len) < s[i].step) break;
      if (std::isfinite(s[j].amax)) history = std::max(history, s[j].amax);
    }
    if (!(history > 0) || !std::isfinite(s[i].amax) || !(s[i].amax > 0)) continue;
    const double scale = limit / history;
    const double ratio = s[i].amax * scale / fmax;  // above 1: the largest values are clipped
    ++r.steps;
    if (ratio > 1.0) {
      ++r.clipped_steps;
      r.worst_clip_log2 = std::max(r.worst_clip_log2, std::log2(ratio));
    } else {
      headroom_sum += -std::log2(ratio);
      ++unclipped;
    }
  }
  r.mean_headroom_log2 = unclipped ? headroom_sum / static_cast<double>(unclipped) : 0.0;
  return r;
}

std::optional<ReplaySuggestion> suggest_delayed_scaling(const std::vector<AmaxPoint>& s, CastFormat format,
                                                        std::uint64_t sampling_interval) {
  if (s.size() < 2) return std::nullopt;
  ReplaySuggestion out;
  out.te_default = replay_delayed(s, format, 1024, 0);
  bool have = false;
  for (int len : {1, 4, 16, 64, 256, 1024}) {
    if (static_cast<std::uint64_t>(len) < sampling_interval && len != 1024) continue;
    for (int margin = 0; margin <= 4; ++margin) {
      const ReplayOutcome r = replay_delayed(s, format, len, margin);
      const auto key = [](const ReplayOutcome& x) { return std::make_pair(x.clipped_steps, x.mean_headroom_log2); };
      if (!have || key(r) < key(out.best)) out.best = r;
      have = true;
    }
  }
  return out;
}

}  // namespace fp8scope::insight
