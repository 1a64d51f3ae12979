// A flawed la1 / masked hla2 backward (catalog_forms.hpp flawed_backward):
// SPEC §9's reverse-time adjoints of the §3 recurrences, in double, each flaw
// one switch. With q̃ = scale·q, v' = [v | 1] and the upstream of [num | den]
// Ȳ_t = [do/D | dden − ⟨do, o⟩/D] (normalized; D = den ⊕ ε, 0 for den where a
// clamp holds D), per query head and sequence:
//   la1:  P_t = γP_{t−1} + k_tv'_tᵀ; dq̃_t = P_tȲ_t; R_j = γR_{j+1} + q̃_jȲ_jᵀ,
//         dk_j = R_jv'_j, dv'_j = R_jᵀk_j.
//   hla2: S_t = γS_{t−1} + k_tk_tᵀ, b_t = S_tq̃_t, F_t = γ²F_{t−1} + b_tv'_tᵀ;
//         R_j = γ²R_{j+1} + q̃_jȲ_jᵀ, g_j = R_jv'_j; dq̃_t = F_tȲ_t + S_tg_t,
//         dv'_j = R_jᵀb_j; M_i = γM_{i+1} + g_iq̃_iᵀ, dk_i = (M_i + M_iᵀ)k_i.
// dk and dv of a K/V head sum over its group's query heads.
#include "catalog_forms.hpp"

#include "hla/bounds.hpp"
#include "hla/head.hpp"

#include <cmath>
#include <vector>

namespace hla::check {

engine::CandidateOutputs flawed_backward(const BatchProblem& p, const engine::Reference& ref, BackwardFlaw flaw, Index w) {
  using V = Eigen::VectorXd;
  using M = Eigen::MatrixXd;
  const engine::GradientReference& gr = *ref.grad;
  auto finite = [](double x) { return std::isfinite(x) ? x : 0.0; };  // a NaN probe's upstream reaches unscored elements only
  engine::CandidateOutputs c;
  c.dq.assign(static_cast<size_t>(p.batch * p.heads * p.n * p.d), 0);
  c.dk.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.d), 0);
  c.dv.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.dv), 0);
  const bool hla2 = p.opt.variant == Variant::hla2;
  const double g = to_double(p.opt.gamma), rho = hla2 && flaw != BackwardFlaw::adjoint_decay_gamma ? g * g : g;
  const double rho_f = hla2 ? g * g : g;  // F's (P's) own decay
  const double eps = to_double(p.opt.eps), scale = to_double(p.opt.scale);
  const auto seqs = p.sequences();
  const Index d = p.d, wv = p.dv + 1;
  for (Index b = 0; b < p.batch; ++b)
    for (Index hq = 0; hq < p.heads; ++hq) {
    // The adjoints of S and F (P), reset at every sequence's end (adjoints_not_reset: only at the row's).
    M R = M::Zero(d, wv), Mk = M::Zero(d, d);
    for (auto seq = seqs.rbegin(); seq != seqs.rend(); ++seq) {
    const auto [t0, t1] = *seq;
    const Index L = t1 - t0;
    if (flaw != BackwardFlaw::adjoints_not_reset) R.setZero(), Mk.setZero();
    const Head<double> h = make_head(p.head<double>(b, hq, t0, t1));
    M Y(L, wv);  // the upstream of [num | den]
    for (Index t = 0; t < L; ++t) {
      const double den = ref.den[p.den_index(b, hq, t0 + t)], D = p.opt.normalize ? normalizer(den, eps, p.opt.eps_mode) : 1.0;
      double dot = 0;
      for (Index j = 0; j < p.dv; ++j) {
        const double o = finite(gr.dout[p.out_index(b, hq, t0 + t, j)]);
        Y(t, j) = o / D, dot += o * ref.num[p.out_index(b, hq, t0 + t, j)] / D;
      }
      const bool held = p.opt.eps_mode == EpsMode::clamp && std::fabs(den) < eps;
      Y(t, p.dv) = (gr.dden.empty() ? 0.0 : finite(gr.dden[p.den_index(b, hq, t0 + t)])) - (p.opt.normalize && !held ? dot / D : 0.0);
    }
    // Forward: F_t (P_t), S_t, b_t.
    std::vector<M> F(static_cast<size_t>(L)), S(static_cast<size_t>(L));
    M Fc = M::Zero(d, wv), Sc = M::Zero(d, d);
    M bs(L, d);
    for (Index t = 0; t < L; ++t) {
      const V q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      if (hla2) {
        Sc = g * Sc + k * k.transpose();
        bs.row(t) = (Sc * q).transpose();
        Fc = rho_f * Fc + bs.row(t).transpose() * h.v.row(t);
        S[static_cast<size_t>(t)] = Sc;
      } else {
        bs.row(t) = k.transpose();
        Fc = rho_f * Fc + k * h.v.row(t);
      }
      F[static_cast<size_t>(t)] = Fc;
    }
    M dq = M::Zero(L, d), dk = M::Zero(L, d), dv = M::Zero(L, wv);
    for (Index t = 0; t < L; ++t) {
      dq.row(t) = (F[static_cast<size_t>(t)] * Y.row(t).transpose()).transpose();
      if (flaw == BackwardFlaw::dq_carry_chunk_before && t >= w && t % w == 0) {  // ρ(F_{t−w−1} − F_{t−1})Ȳ_t: the carry one chunk early
        const M before = t - w - 1 >= 0 ? F[static_cast<size_t>(t - w - 1)] : M::Zero(d, wv);
        dq.row(t) += (rho_f * (before - F[static_cast<size_t>(t - 1)]) * Y.row(t).transpose()).transpose();
      }
    }
    for (Index j = L - 1; j >= 0; --j) {
      const V q = h.q.row(j).transpose(), k = h.k.row(j).transpose();
      R = rho * R + q * Y.row(j);
      dv.row(j) = (R.transpose() * bs.row(j).transpose()).transpose();
      if (!hla2) {
        dk.row(j) = (R * h.v.row(j).transpose()).transpose();
        continue;
      }
      const V gj = R * h.v.row(j).transpose();
      dq.row(j) += (S[static_cast<size_t>(j)] * gj).transpose();
      Mk = g * Mk + gj * q.transpose();
      dk.row(j) = (flaw == BackwardFlaw::dk_no_cross ? V(Mk * k) : V((Mk + Mk.transpose()) * k)).transpose();
    }
    for (Index t = 0; t < L; ++t) {
      for (Index x = 0; x < d; ++x) {
        c.dq[p.q_index(b, hq, t0 + t, x)] = scale * dq(t, x);
        c.dk[p.k_index(b, hq, t0 + t, x)] += dk(t, x);
      }
      for (Index x = 0; x < p.dv; ++x) c.dv[p.v_index(b, hq, t0 + t, x)] += dv(t, x);
    }
    }
    }
  return c;
}

}  // namespace hla::check
