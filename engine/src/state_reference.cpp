// The final state's reference (reference.hpp compute_state_reference): the
// state after each sequence's last token (SPEC §8), certified as the outputs
// are, with the magnitudes a kernel's final state is judged against; and our
// own orders' final states in a candidate's precision (orders.hpp), rule 3's.
#include "hla/engine/orders.hpp"
#include "hla/engine/reference.hpp"

#include "hla/engine/detail.hpp"
#include "hla/exact.hpp"
#include "hla/fast/engine.hpp"
#include "hla/state.hpp"

#include <cmath>

namespace hla::engine {
namespace {

using fast::DD;

struct StateTask {
  Index b, h, t0, t1, seq;
};

// Exact rationals (the magnitude likewise, on absolute values): correctly rounded.
void exact_state(const BatchProblem& p, const BatchProblem& a, const StateTask& t, StateReference& s) {
  const StateMats<Rational> X = exact::final_state(p.head<Rational>(t.b, t.h, t.t0, t.t1), p.head_state<Rational>(t.seq, t.h));
  const StateMats<Rational> M = exact::final_state(a.head<Rational>(t.b, t.h, t.t0, t.t1), a.head_state<Rational>(t.seq, t.h));
  p.for_each_state_entry(t.seq, t.h, [&](size_t i, Index r, Index c, size_t at) {
    s.values[at] = to_double(X[i](r, c));
    s.mag[at] = to_double(M[i](r, c));
  });
}

// Binary128 by the streaming recurrence: within depth_bound·2^-112·M of the exact value.
void f113_state(const BatchProblem& p, const BatchProblem& a, const StateTask& t, StateReference& s) {
  const StateMats<f113> X = final_state(p.head<f113>(t.b, t.h, t.t0, t.t1), p.head_state<f113>(t.seq, t.h));
  const StateMats<f113> M = final_state(a.head<f113>(t.b, t.h, t.t0, t.t1), a.head_state<f113>(t.seq, t.h));
  const f113 k = f113(depth_bound(p.opt.variant, t.t1 - t.t0, p.d)) * f113(0x1p-112);
  p.for_each_state_entry(t.seq, t.h, [&](size_t i, Index r, Index c, size_t at) {
    s.values[at] = static_cast<double>(X[i](r, c));
    s.mag[at] = static_cast<double>(M[i](r, c));
    if (!certifies(X[i](r, c), k * M[i](r, c))) s.flags[at] |= kUncertified;
  });
}

// Head (t.b, t.h)'s final carry by the fast engine in S (DD or double), from x's initial state.
template <class S> fast::Carry<S> fast_final(const BatchProblem& x, const StateTask& t) {
  auto as = [](double v) {
    if constexpr (std::is_same_v<S, DD>) return DD{v, 0};
    else return S(v);
  };
  auto at = [&](const std::vector<double>& v, size_t (BatchProblem::*index)(Index, Index, Index, Index) const) {
    return [&, index](Index tk, Index c) { return as(v[(x.*index)(t.b, t.h, t.t0 + tk, c)]); };
  };
  fast::FastHead<S> fh = fast::make_fast_head<S>(x.opt, t.t1 - t.t0, x.d, x.dv, at(x.q, &BatchProblem::q_index),
                                                 at(x.k, &BatchProblem::k_index), at(x.v, &BatchProblem::v_index), 64, false);
  fh.full_carry = true;
  const BatchProblem::StateView X0 = x.state_of(t.b, t.h, t.t0);
  fast::set_initial_carry(fh, X0.layout, [&](size_t i, Index r, Index c) { return as(X0.at(i, r, c)); });
  return fast::final_carry(fh);
}

// The double-double engine's carry, certified from its running bound against
// the double engine's magnitude on absolute values (rounded up by its own
// bound); false (nothing written) when either does not stay finite, or when
// `all_certified` asks for every entry certified and one is not.
bool fast_state(const BatchProblem& p, const BatchProblem& a, const StateTask& t, StateReference& s, bool all_certified) {
  const fast::Carry<DD> X = fast_final<DD>(p, t);
  const fast::Carry<double> M = fast_final<double>(a, t);
  for (size_t i = 0; i < X.size(); ++i)
    if (!X[i].finite || !M[i].finite) return false;
  struct Entry {
    size_t at;
    double value, mag;
    bool certified;
  };
  std::vector<Entry> entries;
  bool all = true;
  p.for_each_state_entry(t.seq, t.h, [&](size_t i, Index r, Index c, size_t at) {
    const DD x = X[i].val.at(r, c);
    const double m = M[i].val.at(r, c), up = (m + (M[i].tiny ? M[i].alpha : 0)) * (1 + 2 * (M[i].phi + 2) * 0x1p-53);
    const f113 v = fast::f113_from_dd(x);
    const f113 e =
        (f113(X[i].phi) * f113(0x1p-106) * f113(up) + f113(X[i].tiny ? X[i].alpha : 0)) * (1 + f113(0x1p-60)) + abs(v) * f113(0x1p-112);
    entries.push_back({at, static_cast<double>(v), m, certifies(v, e)});  // m as computed: its upward bound certifies
    all = all && entries.back().certified;
  });
  if (all_certified && !all) return false;
  for (const Entry& e : entries) {
    s.values[e.at] = e.value, s.mag[e.at] = e.mag;
    if (!e.certified) s.flags[e.at] |= kUncertified;
  }
  return true;
}

}  // namespace

BatchProblem abs_problem_of(BatchProblem a) {
  for (auto* x : {&a.q, &a.k, &a.v, &a.state})
    for (double& e : *x) e = std::fabs(e);
  a.opt.scale = abs(a.opt.scale), a.opt.lambda = abs(a.opt.lambda), a.opt.normalize = false;
  return a;
}

StateReference compute_state_reference(const BatchProblem& p, Index exact_max_n, bool engine_first) {
  StateReference s;
  if (!has_state(p.opt.variant)) return s;
  const size_t size = static_cast<size_t>(p.sequence_count() * p.heads * state_size(state_layout(p.opt, p.d, p.dv)));
  s.values.assign(size, 0), s.mag.assign(size, 0), s.flags.assign(size, 0);
  const BatchProblem a = abs_problem_of(p);
  const bool exact = exact_applies(p, exact_max_n);
  std::vector<StateTask> tasks;
  // The state after a sequence's last token: one task per (sequence, head).
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) { tasks.push_back({b, h, t0, t1, p.sequence_of(b, t0)}); });
  parallel_for(tasks.size(), exact ? 1 : worker_threads(), [&](size_t k) {  // tasks write disjoint entries
    const StateTask& t = tasks[k];
    // The engine first (campaigns: as the outputs), taken only when it certifies every entry; large heads: always.
    const bool large = static_cast<double>(t.t1 - t.t0) * p.d * (p.d + p.dv) > 0x1p22;
    const bool try_fast = (engine_first || (large && !exact)) && fast::supports(p.opt.variant) && p.head_finite(t.b, t.h, t.t0, t.t1);
    if (try_fast && fast_state(p, a, t, s, engine_first)) return;
    if (exact) return exact_state(p, a, t, s);
    f113_state(p, a, t, s);
  });
  fill_state_difference_state_magnitude(p, s);
  return s;
}

StateCheck double_final_state(const BatchProblem& p) {
  StateCheck s;
  const size_t size = static_cast<size_t>(p.sequence_count() * p.heads * state_size(state_layout(p.opt, p.d, p.dv)));
  s.values.assign(size, 0), s.mag.assign(size, 0), s.tol.assign(size, 0);
  const BatchProblem a = abs_problem_of(p);
  std::vector<StateTask> tasks;
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) { tasks.push_back({b, h, t0, t1, p.sequence_of(b, t0)}); });
  parallel_for(tasks.size(), worker_threads(), [&](size_t k) {
    const StateTask& t = tasks[k];
    const double K = depth_bound(p.opt.variant, t.t1 - t.t0, p.d), u = 0x1p-53, slack = 0x1p-1000;
    if (fast::supports(p.opt.variant) && p.head_finite(t.b, t.h, t.t0, t.t1)) {
      const fast::Carry<double> X = fast_final<double>(p, t), M = fast_final<double>(a, t);
      bool finite = true;
      for (size_t i = 0; i < X.size(); ++i) finite = finite && X[i].finite && M[i].finite;
      if (finite) {
        p.for_each_state_entry(t.seq, t.h, [&](size_t i, Index r, Index c, size_t at) {
          // Either run's own bound where it is larger than K (never tighter than the a priori one).
          const double phi = std::max({K, X[i].phi, M[i].phi}), alpha = (X[i].tiny ? X[i].alpha : 0) + (M[i].tiny ? M[i].alpha : 0);
          s.values[at] = X[i].val.at(r, c), s.mag[at] = M[i].val.at(r, c);
          s.tol[at] = (phi + 2) * u * (s.mag[at] + alpha) * (1 + 0x1p-40) + 2 * alpha + slack;
        });
        return;
      }
    }
    auto streaming = [&]<class S>(S) {
      const StateMats<S> X = final_state(p.head<S>(t.b, t.h, t.t0, t.t1), p.head_state<S>(t.seq, t.h));
      const StateMats<S> M = final_state(a.head<S>(t.b, t.h, t.t0, t.t1), a.head_state<S>(t.seq, t.h));
      bool finite = true;
      p.for_each_state_entry(t.seq, t.h, [&](size_t i, Index r, Index c, size_t at) {
        s.values[at] = static_cast<double>(X[i](r, c)), s.mag[at] = static_cast<double>(M[i](r, c));
        s.tol[at] = (K + 2) * u * s.mag[at] + slack;
        finite = finite && std::isfinite(s.mag[at]);
      });
      return finite;
    };
    if (!streaming(0.0) && p.head_finite(t.b, t.h, t.t0, t.t1)) streaming(f113(0));
  });
  return s;
}

// A state-difference kernel forms the masked member F (and f) as the product
// of unmasked members minus what the mask drops (hla2 F = S·C − G, f = S·m − h;
// hla3 F = S·SQ·P − G): its error is bounded by the product's magnitude, the
// same product over the absolute values' unmasked final state (the terms of
// F and of G together), plus F's own magnitude (the initial state's terms).
void fill_state_difference_state_magnitude(const BatchProblem& p, StateReference& s) {
  s.mag_sd = s.mag;
  if (!has_state_difference_magnitude(p.opt) || s.mag.empty()) return;
  BatchProblem un = abs_problem_of(p);
  un.opt.masked = false;
  const std::vector<StatePart> masked = state_layout(p.opt, p.d, p.dv), unmasked = state_layout(un.opt, p.d, p.dv);
  // The unmasked problem's initial state: the members both share, each entry at its member's
  // offset in the unmasked layout (it differs in size and order: hla3 adds SQ, hla2 drops F); SQ zero.
  if (p.has_state()) {
    const std::vector<double> abs_masked = std::move(un.state);
    un.state.assign(static_cast<size_t>(p.sequence_count() * p.heads) * static_cast<size_t>(state_size(unmasked)), 0.0);
    p.for_each_state_entry([&](Index seq, Index h, size_t i, Index r, Index c, size_t at) {
      const BatchProblem::StateView U = un.state_view(seq, h);
      for (size_t j = 0; j < unmasked.size(); ++j)
        if (unmasked[j].name == masked[i].name) un.state[U.start[j] + static_cast<size_t>(r * unmasked[j].width() + c)] = abs_masked[at];
    });
  }
  const double up = 1 + 4 * depth_bound(p.opt.variant, longest_sequence(p), p.d) * 0x1p-53;
  std::vector<StateTask> tasks;
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) { tasks.push_back({b, h, t0, t1, p.sequence_of(b, t0)}); });
  parallel_for(tasks.size(), worker_threads(), [&](size_t k) {
    const StateTask& t = tasks[k];
    StateMats<double> U;
    if (fast::supports(p.opt.variant) && un.head_finite(t.b, t.h, t.t0, t.t1))
      for (const auto& m : fast_final<double>(un, t)) {
        U.emplace_back(m.rows(), m.cols());
        for (Index r = 0; r < m.rows(); ++r)
          for (Index c = 0; c < m.cols(); ++c) U.back()(r, c) = m.val.at(r, c);
      }
    else U = final_state(un.head<double>(t.b, t.h, t.t0, t.t1), un.head_state<double>(t.seq, t.h));
    // hla2 (S, C, ·): S·C; hla3 (S, P, SQ): S·SQ·P. The ones column rides along (m, z).
    const Mat<double> prod = p.opt.variant == Variant::hla3 ? Mat<double>(U[0] * U[2] * U[1]) : Mat<double>(U[0] * U[1]);
    p.for_each_state_entry(t.seq, t.h, [&](size_t i, Index r, Index c, size_t at) {
      if (masked[i].name == "F") s.mag_sd[at] = (s.mag[at] + prod(r, c)) * up;
    });
  });
}

namespace {

// p with NaN/Inf inputs set to 0: the final states they reach are not scored.
BatchProblem finite_inputs(BatchProblem p) {
  for (auto* x : {&p.q, &p.k, &p.v, &p.state})
    for (double& e : *x)
      if (!std::isfinite(e)) e = 0;
  return p;
}

}  // namespace

std::vector<std::pair<std::string, std::vector<double>>> state_baselines(const BatchProblem& given, Precision prec, FormClass cls) {
  std::vector<std::pair<std::string, std::vector<double>>> out;
  if (!has_state(given.opt.variant) || !fast::supports(given.opt.variant)) return out;
  const BatchProblem p = finite_inputs(given);
  const BatchProblem r = with_reversed_features(p);
  for (const BaselineForm& f :
       {BaselineForm{Form::streaming, 1}, BaselineForm{Form::streaming, 1, true}, BaselineForm{Form::chunked_matmul, 8},
        BaselineForm{Form::chunked_matmul, 16, true}, BaselineForm{Form::chunked_matmul, 32}, BaselineForm{Form::chunked_matmul, 64}}) {
    if (!f.reversed_features) {
      out.emplace_back(f.name(), fast_ours_state(p, prec, f));
      continue;
    }
    std::vector<double> x = fast_ours_state(r, prec, f);
    reverse_state_features(p, x);
    out.emplace_back(f.name(), std::move(x));
  }
  if (cls == FormClass::state_difference && p.opt.variant == Variant::hla2 && p.opt.masked)  // hla3's: not yet
    out.emplace_back("paper state (S*C - G)", fast_ours_state(p, prec, BaselineForm{Form::streaming_paper_state, 1}));
  return out;
}

}  // namespace hla::engine
