// Diagnosis hints (Report::hints) from where a failing report's scores lie:
// which parts fail, which heads, and along the tokens: periodic at a chunk
// width, clean up to a chunk boundary, growing with t, at sequence starts.
// An element is "wrong" here when its score is above its part's threshold,
// min(rule 3's line, the bound) (ScoreMap::limit, bound): honest orders stay
// below it, and a hint is only looked for on a failing report.
#include "internal.hpp"
#include "score_map.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hla::check {
namespace {

double dx_threshold(const ScoreMap& m) { return m.limit > 0 ? std::min(m.limit, m.bound) : m.bound; }

std::string dx_join(const std::vector<Index>& v, size_t shown = 8) {
  std::string s;
  for (size_t i = 0; i < std::min(v.size(), shown); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > shown) s += ", … (" + std::to_string(v.size()) + " in all)";
  return s;
}

std::string dx_num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

bool dx_is_final_state(const ScoreMap& m) { return m.name.rfind("state.", 0) == 0; }
bool dx_is_gradient(const ScoreMap& m) { return m.name != "out" && m.name != "den" && !dx_is_final_state(m); }

// Which parts fail, when some of them are right.
std::optional<std::string> hint_parts(const Report& r) {
  std::vector<std::string> bad, good;
  for (const ScoreMap& m : r.maps) (m.fails ? bad : good).push_back(m.name);
  if (bad.empty() || good.empty()) return std::nullopt;
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s + (v.size() == 1 ? " is" : " are");
  };
  auto names = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s;
  };
  if (bad.size() == 1 && bad[0] == "den")
    return "confined to den: den is wrong while " + join(good) +
           " right: look at the denominator's own sum (its decay, scale or ε, or den stored from another step)";
  if (std::all_of(r.maps.begin(), r.maps.end(), [](const ScoreMap& m) { return !m.fails || dx_is_final_state(m); }))
    return "confined to the final state: " + names(bad) + (bad.size() == 1 ? " is" : " are") + " wrong while " + join(good) +
           " right: look at the state a kernel returns (its decay at the last token, a part taken from another chunk or head)";
  const bool grads_only = std::none_of(r.maps.begin(), r.maps.end(), [](const ScoreMap& m) { return m.fails && !dx_is_gradient(m); });
  if (grads_only && bad.size() == 1)
    return "confined to one gradient: " + bad[0] + " is wrong while " + join(good) + " right: look at " + bad[0] +
           "'s own terms in the backward";
  if (grads_only) return "confined to the gradients " + names(bad) + " (" + join(good) + " right): a bug in the backward";
  return "confined to " + names(bad) + " (" + join(good) + " right)";
}

// Which heads are wrong: some of them, or the same head of each GQA group.
std::optional<std::string> hint_heads(const ScoreMap& m) {
  const Index nb = m.blocks(), heads = m.heads;
  if (heads < 2 || m.cand_blocks.empty()) return std::nullopt;
  std::vector<bool> bad(static_cast<size_t>(heads), false);
  const double T = dx_threshold(m);
  for (Index row = 0; row < m.rows; ++row)
    for (Index k = 0; k < nb; ++k)
      if (m.cand_blocks[static_cast<size_t>(row * nb + k)] > T) bad[static_cast<size_t>(row % heads)] = true;
  std::vector<Index> list;
  for (Index h = 0; h < heads; ++h)
    if (bad[static_cast<size_t>(h)]) list.push_back(h);
  if (list.empty() || static_cast<Index>(list.size()) == heads) return std::nullopt;
  const bool kv = dx_is_gradient(m) && (m.name == "dk" || m.name == "dv");
  const std::string what = kv ? "K/V heads " : "heads ";
  const Index g = m.group;
  if (g > 1 && heads % g == 0) {
    // The same positions within every group of g query heads (h / g: its K/V head).
    std::set<Index> first;
    for (Index h : list)
      if (h < g) first.insert(h);
    bool same = !first.empty() && static_cast<Index>(first.size()) < g;
    for (Index h = 0; h < heads && same; ++h) same = bad[static_cast<size_t>(h)] == (first.count(h % g) > 0);
    if (same) {
      const std::vector<Index> in_group(first.begin(), first.end());
      return "confined to " + std::string(in_group.size() == 1 ? "one head" : "the same heads") + " of each GQA group: heads " +
             dx_join(list) + " of " + std::to_string(heads) + " are wrong (index " + dx_join(in_group) + " within each group of " +
             std::to_string(g) + " sharing a K/V head): a head-to-K/V-head mapping (or group sum) bug";
    }
  }
  return "confined to some " + what.substr(0, what.size() - 1) + ": " + what + dx_join(list) + " of " + std::to_string(heads) +
         " are wrong, the others right" + (g > 1 ? " (GQA: query head h reads K/V head h / " + std::to_string(g) + ")" : "");
}

// Periodic at a width W: within each sequence, from its second period on, the
// wrong phases are whole classes mod W (at most a quarter of them) and the
// others hold no wrong token; the smallest such W of 4, 8, …, 256.
std::optional<std::string> hint_periodic(const ScoreMap& m, Index longest) {
  if (!m.tokens || m.cand_phase.empty()) return std::nullopt;
  const double T = dx_threshold(m);
  const Index P = std::min<Index>(ScoreMap::kPhases, longest);
  for (Index W = 4; W <= ScoreMap::kPhases && 2 * W <= P; W *= 2) {
    std::vector<Index> high;
    bool ok = true;
    for (Index c = 0; c < W && ok; ++c) {
      Index members = 0, wrong = 0;
      for (Index r = W + c; r < P; r += W) {
        ++members;
        wrong += m.cand_phase[static_cast<size_t>(r)] > T;
      }
      if (wrong == members && members >= 2) high.push_back(c);
      else if (wrong > 0) ok = false;
    }
    if (!ok || high.empty() || static_cast<Index>(high.size()) * 4 > W) continue;
    std::vector<Index> examples;
    for (Index r = W; r < P && examples.size() < 3; ++r)
      if (std::count(high.begin(), high.end(), r % W)) examples.push_back(r);
    return "periodic at width " + std::to_string(W) + ": the wrong tokens are those at (t - sequence start) mod " +
           std::to_string(W) + " in {" + dx_join(high) + "} (e.g. " + dx_join(examples) +
           "), the rest are right: a chunk-boundary bug at chunk width " + std::to_string(W);
  }
  return std::nullopt;
}

// The worst score per position within its sequence, [0, longest) (a map's
// per-position array folded over the packed sequences); empty where the
// positions were pooled (step > 1) across packed sequences.
std::vector<float> dx_profile(const BatchProblem& p, const ScoreMap& m, bool ours) {
  const std::vector<float>& pos = ours ? m.ours_positions : m.cand_positions;
  if (pos.empty() || !m.tokens) return {};
  if (m.step > 1) return p.offsets.empty() ? pos : std::vector<float>{};
  std::vector<float> prof(static_cast<size_t>(longest_sequence(p)), -1.0f);
  for (const auto& [t0, t1] : p.sequences())
    for (Index t = t0; t < t1; ++t) prof[static_cast<size_t>(t - t0)] = std::max(prof[static_cast<size_t>(t - t0)], pos[static_cast<size_t>(t)]);
  return prof;
}

// Right up to a chunk boundary f (a multiple of 8) in every sequence, wrong
// from there on: the worst score jumps 16-fold at f.
std::optional<std::string> hint_onset(const ScoreMap& m, const std::vector<float>& prof) {
  if (m.step > 1 || prof.empty()) return std::nullopt;
  const double T = dx_threshold(m);
  const Index L = static_cast<Index>(prof.size());
  Index f = 0;
  while (f < L && !(prof[static_cast<size_t>(f)] > T)) ++f;
  if (f < 8 || f >= L || f % 8 != 0) return std::nullopt;
  float before = 0;
  for (Index t = std::max<Index>(0, f - 8); t < f; ++t) before = std::max(before, prof[static_cast<size_t>(t)]);
  Index wrong = 0;
  for (Index t = f; t < L; ++t) wrong += prof[static_cast<size_t>(t)] > T;
  if (!(prof[static_cast<size_t>(f)] > 16 * std::max(before, 0.0f)) || 2 * wrong < L - f) return std::nullopt;
  Index w = 8;
  while (f % (2 * w) == 0 && 2 * w <= f) w *= 2;
  return "wrong from token " + std::to_string(f) + " of each sequence on, right before it (the worst score jumps from " +
         dx_num(before) + " to " + dx_num(prof[static_cast<size_t>(f)]) + "): the first chunk of a chunked kernel is right and the " +
         "carry into later chunks is not (chunk width " + std::to_string(w) + " or a divisor of it)";
}

// The error grows with t: the worst score per eighth of the sequence rises
// 4-fold at least, without falling by half, faster than ours, and still in
// the second half.
std::optional<std::string> hint_growth(const BatchProblem& p, const ScoreMap& m, const std::vector<float>& prof,
                                       const std::vector<float>& ours) {
  const Index L = static_cast<Index>(prof.size());
  if (L < 32 || ours.size() != prof.size()) return std::nullopt;
  double c[8], o[8];
  for (int i = 0; i < 8; ++i) {
    c[i] = o[i] = 0;
    for (Index t = L * i / 8; t < L * (i + 1) / 8; ++t) {
      c[i] = std::max(c[i], static_cast<double>(prof[static_cast<size_t>(t)]));
      o[i] = std::max(o[i], static_cast<double>(ours[static_cast<size_t>(t)]));
    }
  }
  if (!(c[7] > dx_threshold(m)) || !std::isfinite(c[7])) return std::nullopt;
  for (int i = 0; i < 7; ++i)
    if (c[i + 1] < c[i] / 2) return std::nullopt;
  const double floor = std::max(o[0], 1e-300), rise = c[7] / std::max(c[0], floor), ours_rise = std::max(o[7], floor) / floor;
  // Still rising in the second half (a step up at one token, a carry bug, is not growth).
  if (rise < 4 || rise < 4 * ours_rise || c[7] < 1.3 * c[3]) return std::nullopt;
  return "grows with the token index: the worst score per eighth of the sequence rises from " + dx_num(c[0]) + " to " + dx_num(c[7]) +
         " (ours " + dx_num(o[0]) + " to " + dx_num(o[7]) + "): an error that accumulates along the sequence (" +
         (p.opt.gamma != 1 ? "a decay power, " : "") + "a state kept in too low a precision)";
}

// Wrong at the starts of sequences: only their first tokens, or (packed)
// the first sequence right and every later one wrong from its start.
std::optional<std::string> hint_starts(const BatchProblem& p, const ScoreMap& m) {
  if (!m.tokens || m.step > 1 || m.cand_positions.empty()) return std::nullopt;
  const double T = dx_threshold(m);
  const auto seqs = p.sequences();
  std::vector<Index> wrong_seqs, starts;
  bool only_starts = true, first_right = true, later_from_start = seqs.size() > 1;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto [t0, t1] = seqs[s];
    bool any = false, at_start = false;
    for (Index t = t0; t < t1; ++t)
      if (m.cand_positions[static_cast<size_t>(t)] > T) {
        any = true;
        at_start = at_start || t - t0 < 4;
        only_starts = only_starts && t - t0 < 4;
      }
    if (any) wrong_seqs.push_back(static_cast<Index>(s)), starts.push_back(t0);
    if (s == 0) first_right = !any;
    else if (t1 > t0) later_from_start = later_from_start && at_start;
  }
  if (wrong_seqs.empty()) return std::nullopt;
  const std::string where = p.offsets.empty() ? "" : " (packed sequences " + dx_join(wrong_seqs) + ", starting at tokens " + dx_join(starts) + ")";
  if (!p.offsets.empty() && first_right && later_from_start)
    return "at sequence starts: the first packed sequence is right and each later one is wrong from its first tokens" + where +
           ": a state not reset at the cu_seqlens offsets, or an offset read wrongly";
  const Index longest = longest_sequence(p);
  if (only_starts && longest > 8)
    return "concentrated at sequence starts: only tokens 0 to 3 of a sequence are wrong" + where +
           ": the start of a sequence (cu_seqlens offsets, an initial state, a position counter) is handled wrongly";
  return std::nullopt;
}

}  // namespace

std::vector<std::string> diagnose(const BatchProblem& p, const Report& r) {
  std::vector<std::string> hints;
  // A candidate that the flat class passes no worse than our own flat orders
  // has the rounding profile of a flat sum (the class hint says so): where its
  // error lies says nothing about a bug. (The state-difference class passes
  // far more, its magnitude being far larger: no such evidence.)
  if (r.passing_class && r.passing_class->is_flat() && r.passing_ratio <= 1) return hints;
  if (auto h = hint_parts(r)) hints.push_back(*h);
  const Index longest = longest_sequence(p);
  for (const ScoreMap& m : r.maps) {
    if (!m.fails || map_worst(m) <= dx_threshold(m)) continue;
    std::vector<std::optional<std::string>> found{hint_heads(m)};
    if (m.tokens) {
      const std::vector<float> prof = dx_profile(p, m, false), ours = dx_profile(p, m, true);
      found.push_back(hint_starts(p, m));
      if (auto periodic = hint_periodic(m, longest)) {
        found.push_back(periodic);
      } else {
        found.push_back(hint_onset(m, prof));
        found.push_back(hint_growth(p, m, prof, ours));
      }
    }
    for (const auto& h : found)
      if (h && hints.size() < 12) hints.push_back(m.name + ": " + *h);
  }
  return hints;
}

}  // namespace hla::check
