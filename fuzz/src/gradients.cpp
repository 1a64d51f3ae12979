#include "hla/fuzz/gradients.hpp"

#include "hla/check/gradient.hpp"
#include "hla_impl.h"

#include <cmath>
#include <numeric>

namespace hla::fuzz {
namespace {

size_t at(Index i) { return static_cast<size_t>(i); }

// The sequence [t0, t1) holding token t.
std::pair<Index, Index> sequence_of(const BatchProblem& p, Index t) {
  for (const auto& [t0, t1] : p.sequences())
    if (t >= t0 && t < t1) return {t0, t1};
  return {0, p.n};
}

}  // namespace

bool upstream_finite(const FuzzCase& c) {
  for (const auto* x : {&c.dout, &c.dden})
    for (double e : *x)
      if (!std::isfinite(e)) return false;
  return true;
}

void draw_upstream(FuzzCase& c, const Supports& s, gen::Rng& r) {
  const BatchProblem& p = c.p;
  c.grad = true;
  c.dout.resize(at(p.batch * p.heads * p.n * p.dv));
  for (double& e : c.dout) e = round_to(p.dtype, r.normal());
  c.dden.clear();
  if (s.has(HLA_FEAT_DEN)) {
    c.dden.resize(at(p.batch * p.heads * p.n));
    for (double& e : c.dden) e = round_to(p.dtype, r.normal());
  }
  if (p.n < 2 || c.probe != Probe::plain || r.int_in(1, 4) != 1) return;  // another probe keeps its finite upstream
  c.probe = Probe::grad_nan_causality;
  // A token in the first third of its sequence: the tokens after it are judged.
  const Index b = r.int_in(0, p.batch - 1), h = r.int_in(0, p.heads - 1), t = r.int_in(0, p.n - 1);
  const auto [t0, t1] = sequence_of(p, t);
  const Index j = t0 + r.int_in(0, (t1 - t0 - 1) / 3);
  const size_t row = at((b * p.heads + h) * p.n + j);
  const double bad = r.int_in(0, 1) ? NAN : INFINITY;
  if (!c.dden.empty() && r.int_in(1, 4) == 1) c.dden[row] = bad;
  else c.dout[row * at(p.dv) + at(r.int_in(0, p.dv - 1))] = bad;
  c.exact_tier = false;
}

engine::Reference with_gradients(const FuzzCase& c, engine::Reference ref, bool hide) {
  const BatchProblem& p = c.p;
  std::vector<double> dout = c.dout, dden = c.dden;
  for (auto* x : {&dout, &dden})
    for (double& e : *x)
      if (!std::isfinite(e)) e = 0;
  ref.grad = engine::compute_gradient_reference(p, ref, dout, dden);
  if (hide) fuzz::hide_reach(c, ref);
  return ref;
}

void hide_reach(const FuzzCase& c, engine::Reference& ref) {
  const BatchProblem& p = c.p;
  // SPEC §9: o_t depends on tokens ≤ t of its sequence (every token of it
  // unmasked), so upstream at (b, h, j) reaches dq of (b, h) and dk, dv of
  // (b, h's kv head) at those tokens only.
  engine::GradientReference& g = *ref.grad;
  const Index group = p.heads / p.kv_heads;
  auto hide = [&](std::vector<double>& x, Index heads, Index head, Index b, Index t, Index cols) {
    for (Index col = 0; col < cols; ++col) x[at(((b * heads + head) * p.n + t) * cols + col)] = NAN;
  };
  for (Index b = 0; b < p.batch; ++b)
    for (Index h = 0; h < p.heads; ++h)
      for (Index j = 0; j < p.n; ++j) {
        const size_t row = at((b * p.heads + h) * p.n + j);
        bool bad = !c.dden.empty() && !std::isfinite(c.dden[row]);
        for (Index col = 0; col < p.dv; ++col) bad = bad || !std::isfinite(c.dout[row * at(p.dv) + at(col)]);
        if (!bad) continue;
        const auto [t0, t1] = sequence_of(p, j);
        for (Index t = t0; t < (p.opt.masked ? j + 1 : t1); ++t) {
          hide(g.dq, p.heads, h, b, t, p.d);
          hide(g.dk, p.kv_heads, h / group, b, t, p.d);
          hide(g.dv, p.kv_heads, h / group, b, t, p.dv);
        }
      }
}

void keep_upstream(FuzzCase& k, const FuzzCase& c, const Keep& keep) {
  if (!c.grad) return;
  const BatchProblem& p = c.p;
  auto all = [](const std::vector<Index>& xs, Index n) {
    if (!xs.empty()) return xs;
    std::vector<Index> out(at(n));
    std::iota(out.begin(), out.end(), Index(0));
    return out;
  };
  const auto bs = all(keep.batches, p.batch), hs = all(keep.heads, p.heads);
  const Ranges ts = keep.tokens.empty() ? Ranges{{0, p.n}} : keep.tokens;
  auto pick = [&](const std::vector<double>& x, Index cols, Index cols2) {
    std::vector<double> out;
    if (x.empty()) return out;
    for (Index b : bs)
      for (Index h : hs)
        for (const auto& [t0, t1] : ts)
          for (Index t = t0; t < t1; ++t)
            for (Index col = 0; col < cols2; ++col) out.push_back(x[at(((b * p.heads + h) * p.n + t) * cols + col)]);
    return out;
  };
  k.dout = pick(c.dout, p.dv, keep.dv);
  k.dden = pick(c.dden, 1, 1);
}

}  // namespace hla::fuzz
