// Definitions behind evaluate.hpp; included only by the instantiation units
// (and by tests that need the operators' summaries).
#pragma once

#include "hla/bounds.hpp"
#include "hla/evaluate.hpp"
#include "hla/head.hpp"
#include "hla/operators.hpp"
#include "hla/paper/ahla_paper.hpp"
#include "hla/paper/hla2_paper.hpp"
#include "hla/scan.hpp"

#include <stdexcept>

namespace hla {

// The single-token segments T_0 … T_{n-1} of an operator.
template <class Op> std::vector<typename Op::Summary> token_summaries(const Op& op, Index n) {
  std::vector<typename Op::Summary> tok;
  tok.reserve(static_cast<size_t>(n));
  for (Index t = 0; t < n; ++t) tok.push_back(op.token(t));
  return tok;
}

// Outputs of a scan form: per-token inclusive summaries, then the readout.
template <class Op> auto scan_form(const Op& op, Index n, Index dv1, Form f, Index chunk) {
  using T = typename decltype(op.readout(op.identity(), 0))::Scalar;
  const std::vector<typename Op::Summary> tok = token_summaries(op, n);
  std::vector<typename Op::Summary> inc;
  switch (f) {
    case Form::fold: inc = scan::inclusive_fold(op, tok); break;
    case Form::blelloch: inc = scan::inclusive_blelloch(op, tok); break;
    case Form::chunked_scan: inc = scan::inclusive_chunked(op, tok, static_cast<size_t>(chunk)); break;
    default: throw std::logic_error("scan_form: not a scan form");
  }
  Mat<T> Y(n, dv1);
  for (Index t = 0; t < n; ++t) Y.row(t) = op.readout(inc[static_cast<size_t>(t)], t);
  return Y;
}

// Variant V's form f (V: its operator type, operators.hpp). Defined in
// run_form.hpp and instantiated per operator and scalar in units of their
// own (reference/CMakeLists.txt): the heaviest instantiations build in
// parallel, and code that includes this header never repeats them.
template <class V, class T> Mat<T> run_form(const Head<T>& h, Form f, Index chunk);

// SPEC §1 normalization, one place for every form.
template <class S> Output<S> finish(const Options& opt, const Mat<S>& Y) {
  const Index dv = Y.cols() - 1;
  Output<S> o{Y.leftCols(dv), Y.col(dv), Y.leftCols(dv)};
  if (!opt.normalize) return o;
  const S eps = from_rational<S>(opt.eps);
  for (Index t = 0; t < Y.rows(); ++t) {
    const S div = normalizer(o.den(t), eps, opt.eps_mode);
    if constexpr (is_exact_v<S>) {
      if (div == S(0))
        throw std::domain_error("normalized output at token " + std::to_string(t) + " divides by den + eps = 0");
    }
    o.out.row(t) = o.num.row(t) / div;
  }
  return o;
}

template <class S> void check_form_args(const Problem<S>& p, Index chunk) {
  p.validate();
  if (chunk < 1) throw InputError("chunk width must be >= 1, got " + std::to_string(chunk));
}

template <class S> Output<S> evaluate(const Problem<S>& p, Form f, Index chunk, bool log_decay) {
  check_form_args(p, chunk);
  const auto fs = forms_of(p.opt.variant);
  if (std::find(fs.begin(), fs.end(), f) == fs.end())
    throw InputError("variant " + to_string(p.opt.variant) + " has no form " + to_string(f));
  const Head<S> h = make_head(p, log_decay);
  return finish(p.opt, with_operator(p.opt.variant, [&]<class V>(V) { return run_form<V>(h, f, chunk); }));
}

template <class S> Output<S> evaluate_paper(const Problem<S>& p, PaperForm f, Index chunk) {
  check_form_args(p, chunk);
  if (p.opt.variant != variant_of(f))
    throw InputError(to_string(f) + " is a form of " + to_string(variant_of(f)) + ", not " + to_string(p.opt.variant));
  const Head<S> h = make_head(p);
  auto scan = [&](const auto& op) { return scan_form(op, h.n(), h.dv1(), Form::blelloch, chunk); };
  switch (f) {
    case PaperForm::E1_hla2_streaming: return finish(p.opt, paper::hla2_streaming_E1(h));
    case PaperForm::E2_hla2_scan: return finish(p.opt, scan(paper::Hla2OpE2<S>{{h}}));
    case PaperForm::E3_ahla_scan: return finish(p.opt, scan(paper::AhlaOpE3<S>{{h}}));
    case PaperForm::E5_hla2_chunked: return finish(p.opt, paper::hla2_chunked_E5(h, chunk));
    case PaperForm::E6_ahla_chunked: return finish(p.opt, paper::ahla_chunked_E6(h, chunk));
  }
  throw std::logic_error("unknown paper form");
}

template <class S> Output<S> magnitude(const Problem<S>& p, bool unmasked_order) {
  using std::abs;
  auto absm = [](const Mat<S>& m) { return Mat<S>(m.unaryExpr([](const S& x) { return S(abs(x)); })); };
  Problem<S> a{p.opt, absm(p.q), absm(p.k), absm(p.v)};
  a.opt.scale = abs(p.opt.scale);
  a.opt.normalize = false;
  // A variant may be bounded by another's magnitude (variants.hpp).
  unmasked_order = unmasked_order || info(a.opt.variant).magnitude_unmasked;
  a.opt.variant = info(a.opt.variant).magnitude_as;
  if (unmasked_order && has_unmasked(a.opt.variant)) a.opt.masked = false;
  // On absolute values every term is ≥ 0 and the streaming forms only add
  // terms (proven equal to naive by the properties): exact in rationals,
  // relative error ≤ K·u in floats, and O(n) instead of naive's O(n³).
  return evaluate(a, Form::streaming);
}

}  // namespace hla

// Explicitly instantiated once per scalar type, in reference/src/instantiate_*.cpp
// (ext = nothing); every other includer sees them as extern and reuses those.
#define HLA_EVALUATE_INSTANTIATIONS(ext, S)                                                               \
  ext template hla::Output<S> hla::evaluate<S>(const hla::Problem<S>&, hla::Form, hla::Index, bool);      \
  ext template hla::Output<S> hla::evaluate_paper<S>(const hla::Problem<S>&, hla::PaperForm, hla::Index); \
  ext template hla::Output<S> hla::magnitude<S>(const hla::Problem<S>&, bool);
HLA_EVALUATE_INSTANTIATIONS(extern, hla::Rational)
HLA_EVALUATE_INSTANTIATIONS(extern, hla::f113)
HLA_EVALUATE_INSTANTIATIONS(extern, double)
HLA_EVALUATE_INSTANTIATIONS(extern, float)
HLA_EVALUATE_INSTANTIATIONS(extern, hla::bf16)
HLA_EVALUATE_INSTANTIATIONS(extern, hla::f16)
