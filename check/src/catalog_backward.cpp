// A la1 / masked hla2 backward with flaws (catalog_forms.hpp): SPEC §9's
// reverse-time adjoints of the §3 recurrences, in double, each flaw one
// switch. With q̃ = scale·q, v' = [v | 1] and the upstream of [num | den]
// Ȳ_t = [do/D | dden − ⟨do, o⟩/D] (normalized; D = den ⊕ ε, 0 for den where a
// clamp holds D), per query head and sequence:
//   la1:  P_t = γP_{t−1} + k_tv'_tᵀ; dq̃_t = P_tȲ_t; R_j = γR_{j+1} + q̃_jȲ_jᵀ,
//         dk_j = R_jv'_j, dv'_j = R_jᵀk_j.
//   hla2: S_t = γS_{t−1} + k_tk_tᵀ, b_t = S_tq̃_t, F_t = γ²F_{t−1} + b_tv'_tᵀ;
//         R_j = γ²R_{j+1} + q̃_jȲ_jᵀ, g_j = R_jv'_j; dq̃_t = F_tȲ_t + S_tg_t,
//         dv'_j = R_jᵀb_j; M_i = γM_{i+1} + g_iq̃_iᵀ, dk_i = (M_i + M_iᵀ)k_i.
// From an initial state (S0, F0; la1: P0) the forward starts there; the final
// state's upstream enters the last token's adjoints undecayed (R_{L−1} =
// R_end + q̃Ȳᵀ). dk and dv of a K/V head sum over its group's query heads.
#include "catalog_forms.hpp"

#include "hla/bounds.hpp"
#include "hla/head.hpp"

#include <cmath>
#include <vector>

namespace hla::check {
namespace catalog_backward {

using V = Eigen::VectorXd;
using M = Eigen::MatrixXd;

// Member `name` of a state laid out as BatchProblem::state, of (seq, h), as a matrix (zero when x is empty).
M member(const BatchProblem& p, const std::vector<double>& x, Index seq, Index h, const std::string& name) {
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  size_t at = static_cast<size_t>((seq * p.heads + h) * state_size(layout));
  for (const StatePart& m : layout) {
    if (m.name == name) {
      M X = M::Zero(m.rows, m.width());
      if (!x.empty())
        for (Index r = 0; r < m.rows; ++r)
          for (Index c = 0; c < m.width(); ++c) X(r, c) = x[at + static_cast<size_t>(r * m.width() + c)];
      return X;
    }
    at += static_cast<size_t>(m.size());
  }
  return M();
}

// The upstream Ȳ of [num | den] at tokens [t0, t1) of (b, hq).
M upstream(const BatchProblem& p, const BackwardInputs& in, Index b, Index hq, Index t0, Index t1) {
  auto finite = [](double x) { return std::isfinite(x) ? x : 0.0; };  // a NaN probe's upstream reaches unscored elements only
  const double eps = to_double(p.opt.eps);
  M Y(t1 - t0, p.dv + 1);
  for (Index t = 0; t < t1 - t0; ++t) {
    const double den = in.den[p.den_index(b, hq, t0 + t)], D = p.opt.normalize ? normalizer(den, eps, p.opt.eps_mode) : 1.0;
    double dot = 0;
    for (Index j = 0; j < p.dv; ++j) {
      const double o = finite(in.dout[p.out_index(b, hq, t0 + t, j)]);
      Y(t, j) = o / D, dot += o * in.num[p.out_index(b, hq, t0 + t, j)] / D;
    }
    const bool held = p.opt.eps_mode == EpsMode::clamp && std::fabs(den) < eps;
    Y(t, p.dv) = (in.dden.empty() ? 0.0 : finite(in.dden[p.den_index(b, hq, t0 + t)])) - (p.opt.normalize && !held ? dot / D : 0.0);
  }
  return Y;
}

}  // namespace catalog_backward

engine::CandidateOutputs la1_hla2_backward(const BatchProblem& p, const BackwardInputs& in, BackwardFlaw flaw, Index w) {
  using namespace catalog_backward;
  engine::CandidateOutputs c;
  c.dq.assign(static_cast<size_t>(p.batch * p.heads * p.n * p.d), 0);
  c.dk.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.d), 0);
  c.dv.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.dv), 0);
  const bool hla2 = p.opt.variant == Variant::hla2;
  const std::string Fname = hla2 ? "F" : "P";
  const double g = to_double(p.opt.gamma), rho_f = hla2 ? g * g : g;  // F's (P's) decay
  const double rho = flaw == BackwardFlaw::adjoint_decay_gamma ? g : rho_f;
  const double scale = to_double(p.opt.scale);
  const auto seqs = p.sequences();
  const Index d = p.d, wv = p.dv + 1;
  for (Index b = 0; b < p.batch; ++b)
    for (Index hq = 0; hq < p.heads; ++hq) {
      M R_top = M::Zero(d, wv), M_top = M::Zero(d, d);  // the adjoints entering a sequence's last token
      for (auto seq = seqs.rbegin(); seq != seqs.rend(); ++seq) {
        const auto [t0, t1] = *seq;
        const Index L = t1 - t0, s = p.sequence_of(b, t0);
        const Head<double> h = make_head(p.head<double>(b, hq, t0, t1));
        if (in.dstate_end) R_top = member(p, *in.dstate_end, s, hq, Fname), M_top = hla2 ? member(p, *in.dstate_end, s, hq, "S") : M_top;
        const M Y = upstream(p, in, b, hq, t0, t1);
        // Forward from the initial state: F_t (P_t), S_t, b_t.
        std::vector<M> F(static_cast<size_t>(L)), S(static_cast<size_t>(L));
        M Fc = member(p, p.state, s, hq, Fname), Sc = hla2 ? member(p, p.state, s, hq, "S") : M();
        const M F0 = Fc;
        M bs(L, d);
        for (Index t = 0; t < L; ++t) {
          const V q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
          if (hla2) {
            Sc = g * Sc + k * k.transpose();
            bs.row(t) = (Sc * q).transpose();
            S[static_cast<size_t>(t)] = Sc;
          } else {
            bs.row(t) = k.transpose();
          }
          Fc = rho_f * Fc + bs.row(t).transpose() * h.v.row(t);
          F[static_cast<size_t>(t)] = Fc;
        }
        M dq = M::Zero(L, d), dk = M::Zero(L, d), dv = M::Zero(L, wv);
        for (Index t = 0; t < L; ++t) {
          dq.row(t) = (F[static_cast<size_t>(t)] * Y.row(t).transpose()).transpose();
          if (flaw == BackwardFlaw::dq_carry_chunk_before && t >= w && t % w == 0) {  // ρ(F_{t−w−1} − F_{t−1})Ȳ_t: one chunk early
            const M& before = t - w - 1 >= 0 ? F[static_cast<size_t>(t - w - 1)] : F0;
            dq.row(t) += (rho_f * (before - F[static_cast<size_t>(t - 1)]) * Y.row(t).transpose()).transpose();
          }
        }
        M R = R_top, Mk = M_top;
        for (Index j = L - 1; j >= 0; --j) {
          const V q = h.q.row(j).transpose(), k = h.k.row(j).transpose();
          R = (j == L - 1 ? R : M(rho * R)) + q * Y.row(j);
          dv.row(j) = (R.transpose() * bs.row(j).transpose()).transpose();
          if (!hla2) {
            dk.row(j) = (R * h.v.row(j).transpose()).transpose();
            continue;
          }
          const V gj = R * h.v.row(j).transpose();
          dq.row(j) += (S[static_cast<size_t>(j)] * gj).transpose();
          Mk = (j == L - 1 ? Mk : M(g * Mk)) + gj * q.transpose();
          dk.row(j) = (flaw == BackwardFlaw::dk_no_cross ? V(Mk * k) : V((Mk + Mk.transpose()) * k)).transpose();
        }
        // The next sequence (the one before) starts from zero, or (adjoints_not_reset) from ρR_0, γM_0.
        const bool leak = flaw == BackwardFlaw::adjoints_not_reset && L > 0;
        R_top = leak ? M(rho * R) : M(M::Zero(d, wv)), M_top = leak && hla2 ? M(g * Mk) : M(M::Zero(d, d));
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

engine::CandidateOutputs flawed_backward(const BatchProblem& p, const engine::Reference& ref, BackwardFlaw flaw, Index w) {
  return la1_hla2_backward(p, {ref.grad->dout, ref.grad->dden, ref.num, ref.den}, flaw, w);
}

}  // namespace hla::check
