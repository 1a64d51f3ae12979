// The catalog's new forms (catalog_forms.hpp): hla2 with one state's decay
// wrong (SPEC §3's two streaming forms with their decays as parameters, plain
// loops in double); the E2 chunk carry (the reference library's own hla2
// operator and the paper's E2 one, arranged as a chunked kernel); a mask
// strict inside chunks (the dropped terms, subtracted from the reference).
#include "catalog_forms.hpp"

#include "hla/bounds.hpp"
#include "hla/evaluate_impl.hpp"

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

// Each sequence's outputs of `forms` forms by eval(b, h, t0, t1, head), one
// matrix per form (rows: [num | den]), normalized, into one CandidateOutputs per form.
template <class Eval> std::vector<engine::CandidateOutputs> per_head_forms(const BatchProblem& p, size_t forms, Eval&& eval) {
  std::vector<engine::CandidateOutputs> c(
      forms, engine::CandidateOutputs{std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)),
                                      std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n)), DType::f64, DType::f64});
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    const Problem<double> hp = p.head<double>(b, h, t0, t1);
    const std::vector<Mat<double>> Y = eval(b, h, t0, t1, make_head(hp));
    for (size_t f = 0; f < forms; ++f) {
      const Output<double> o = finish(p.opt, Y[f]);
      for (Index t = t0; t < t1; ++t) {
        c[f].den[p.den_index(b, h, t)] = o.den(t - t0);
        for (Index j = 0; j < p.dv; ++j) c[f].out[p.out_index(b, h, t, j)] = o.out(t - t0, j);
      }
    }
  });
  return c;
}
template <class Eval> engine::CandidateOutputs per_head(const BatchProblem& p, Eval&& eval) {
  return std::move(per_head_forms(p, 1, [&](Index b, Index h, Index t0, Index t1, const Head<double>& hd) {
    return std::vector<Mat<double>>{eval(b, h, t0, t1, hd)};
  })[0]);
}

}  // namespace catalog_forms

engine::CandidateOutputs hla2_e2_chunk_carry(const BatchProblem& p, Index w) {
  return catalog_forms::per_head(p, [&](Index, Index, Index, Index, const Head<double>& h) {
    using Summary = hla2::Op<double>::Summary;
    const hla2::Op<double> op{h};
    const paper::Hla2OpE2<double> e2{{h}};
    // X ⊕ token t by the (associative) §4 operator, the token's rank one
    // used: G ← γ²G + γk(kᵀC), C before its update; O(d²), not a product of summaries.
    const double g = h.gamma;
    auto push = [&](Summary& X, Index t) {
      const Vec<double> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      X.G = (g * g) * X.G + g * k * (k.transpose() * X.C);
      X.S = g * X.S + k * k.transpose();
      X.C = g * X.C + q * h.v.row(t);
      X.rho *= g;
    };
    Mat<double> Y(h.n(), h.dv1());
    Summary carry = op.identity();
    for (Index c0 = 0; c0 < h.n(); c0 += w) {
      Summary local = op.identity(), run = carry;  // run = carry ⊕ local, token by token
      for (Index t = c0; t < std::min(h.n(), c0 + w); ++t) {
        push(local, t), push(run, t);
        Y.row(t) = op.readout(run, t);
      }
      carry = e2.combine(carry, local);
    }
    return Y;
  });
}

std::vector<engine::CandidateOutputs> strict_mask_in_chunks(const BatchProblem& p, const engine::Reference& ref,
                                                            const std::vector<Index>& widths) {
  const bool ahla = p.opt.variant == Variant::ahla, la1 = p.opt.variant == Variant::la1;
  return catalog_forms::per_head_forms(p, widths.size(), [&](Index b, Index hd, Index t0, Index, const Head<double>& h) {
    const Index n = h.n(), d = h.d();
    Mat<double> Y(n, h.dv1());
    for (Index t = 0; t < n; ++t) {
      for (Index j = 0; j < p.dv; ++j) Y(t, j) = ref.num[p.out_index(b, hd, t0 + t, j)];
      Y(t, p.dv) = ref.den[p.den_index(b, hd, t0 + t)];
    }
    auto a = [&](Index x, Index y) { return h.q.row(x).dot(h.k.row(y)); };
    std::vector<double> g(static_cast<size_t>(2 * n + 1));  // γ^e
    for (size_t e = 0; e < g.size(); ++e) g[e] = std::pow(static_cast<double>(h.gamma), static_cast<double>(e));
    // The terms every token drops whatever the width, by recurrences (O(d²) a token):
    // la1 j = t; ahla i = t: a_tt·q_tᵀK_t, K_t = γK + k_tv_tᵀ; hla2 j = t: (q_tᵀS_tq_t + λ|q_t|²)v_t, S_t = γS + k_tk_tᵀ.
    Mat<double> S = Mat<double>::Zero(d, d), K = Mat<double>::Zero(d, h.dv1());
    for (Index t = 0; t < n; ++t) {
      const Vec<double> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      if (la1) {
        Y.row(t) -= a(t, t) * h.v.row(t);
      } else if (ahla) {
        K = h.gamma * K + k * h.v.row(t);
        Y.row(t) -= a(t, t) * (q.transpose() * K);
      } else {
        S = h.gamma * S + k * k.transpose();
        Y.row(t) -= (q.dot(S * q) + h.lambda * q.squaredNorm()) * h.v.row(t);
      }
    }
    // Inside t's chunk of w: ahla j = i < t, hla2 i = j < t.
    std::vector<Mat<double>> out(widths.size(), Y);
    if (!la1)
      for (size_t f = 0; f < widths.size(); ++f)
        for (Index t = 0; t < n; ++t)
          for (Index j = t / widths[f] * widths[f]; j < t; ++j)
            out[f].row(t) -= g[static_cast<size_t>(ahla ? t - j : 2 * (t - j))] * a(t, j) * a(j, j) * h.v.row(j);
    return out;
  });
}

engine::CandidateOutputs hla2_wrong_decay(const BatchProblem& p, Hla2Decay which) {
  engine::CandidateOutputs c{std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)),
                             std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n)), DType::f64, DType::f64};
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) { catalog_forms::head(p, which, b, h, t0, t1, c); });
  return c;
}

}  // namespace hla::check
