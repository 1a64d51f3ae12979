// hla2 with one state's decay wrong (catalog_forms.hpp): SPEC §3's two
// streaming forms with their decays as parameters, plain loops in double.
#include "catalog_forms.hpp"

#include "hla/bounds.hpp"

#include <vector>

namespace hla::check {
namespace catalog_forms {

// One head's sequence [t0, t1): num and den per token into c.
void head(const BatchProblem& p, Hla2Decay which, Index b, Index h, Index t0, Index t1, engine::CandidateOutputs& c) {
  const Index d = p.d, w = p.dv + 1;  // values carry a column of ones: den
  const double g = to_double(p.opt.gamma), lam = to_double(p.opt.lambda), s = to_double(p.opt.scale);
  const double eps = to_double(p.opt.eps);
  std::vector<double> S(static_cast<size_t>(d * d)), C(static_cast<size_t>(d * w)), X(C.size()), q(static_cast<size_t>(d)), k(q.size()),
      v(static_cast<size_t>(w)), Sq(q.size()), kC(static_cast<size_t>(w));
  auto at = [](std::vector<double>& m, Index cols, Index r, Index col) -> double& { return m[static_cast<size_t>(r * cols + col)]; };
  for (Index t = t0; t < t1; ++t) {
    for (Index i = 0; i < d; ++i) q[i] = s * p.q[p.q_index(b, h, t, i)], k[i] = p.k[p.k_index(b, h, t, i)];
    for (Index j = 0; j < p.dv; ++j) v[j] = p.v[p.v_index(b, h, t, j)];
    v[p.dv] = 1;
    if (which == Hla2Decay::G_by_gamma) {  // X = G: γG + γk(kᵀC_{t−1})
      for (Index j = 0; j < w; ++j) {
        kC[j] = 0;
        for (Index i = 0; i < d; ++i) kC[j] += k[i] * at(C, w, i, j);
      }
      for (Index i = 0; i < d; ++i)
        for (Index j = 0; j < w; ++j) at(X, w, i, j) = g * at(X, w, i, j) + g * k[i] * kC[j];
    }
    for (Index i = 0; i < d; ++i) {
      for (Index l = 0; l < d; ++l) at(S, d, i, l) = g * at(S, d, i, l) + k[i] * k[l];
      for (Index j = 0; j < w; ++j) at(C, w, i, j) = g * at(C, w, i, j) + q[i] * v[j];
    }
    for (Index i = 0; i < d; ++i) {
      Sq[i] = 0;
      for (Index l = 0; l < d; ++l) Sq[i] += at(S, d, i, l) * q[l];
    }
    if (which == Hla2Decay::F_by_gamma)  // X = F: γF + (S_tq_t)v_tᵀ
      for (Index i = 0; i < d; ++i)
        for (Index j = 0; j < w; ++j) at(X, w, i, j) = g * at(X, w, i, j) + Sq[i] * v[j];
    for (Index j = 0; j < w; ++j) {
      double y = 0;
      for (Index i = 0; i < d; ++i) {
        const double u = which == Hla2Decay::F_by_gamma ? lam * q[i] : Sq[i] + lam * q[i];  // (S symmetric)
        y += u * at(C, w, i, j) + (which == Hla2Decay::F_by_gamma ? 1.0 : -1.0) * q[i] * at(X, w, i, j);
      }
      kC[j] = y;
    }
    const double den = kC[p.dv], D = p.opt.normalize ? normalizer(den, eps, p.opt.eps_mode) : 1.0;
    c.den[p.den_index(b, h, t)] = den;
    for (Index j = 0; j < p.dv; ++j) c.out[p.out_index(b, h, t, j)] = kC[j] / D;
  }
}

}  // namespace catalog_forms

engine::CandidateOutputs hla2_wrong_decay(const BatchProblem& p, Hla2Decay which) {
  engine::CandidateOutputs c{std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)),
                             std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n)), DType::f64, DType::f64};
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) { catalog_forms::head(p, which, b, h, t0, t1, c); });
  return c;
}

}  // namespace hla::check
