// Property builders over a segment operator Op (SPEC §4): associativity on
// random multi-token segments, the identity, arbitrary bracketings and the
// scan forms. Used for the correct operators (scan.cpp) and, expecting
// falsification, for the paper's (errata.cpp).
#pragma once

#include "hla/evaluate_impl.hpp"

#include "generators.hpp"

namespace hla::test {

// Cuts the tokens at two random points into segments A, B, C (each folded
// serially) and checks (A ⊕ B) ⊕ C == A ⊕ (B ⊕ C).
template <class Op> auto associativity(Spec s) {
  return [s] {
    const auto p = *problem_gen(s);
    const Head<Rational> h = make_head(p);
    const Op op{{h}};
    const auto tok = token_summaries(op, h.n());
    const auto a = *rc::gen::inRange<size_t>(0, tok.size() + 1);
    const auto b = *rc::gen::inRange<size_t>(a, tok.size() + 1);
    const auto A = scan::reduce(op, tok.begin(), tok.begin() + a);
    const auto B = scan::reduce(op, tok.begin() + a, tok.begin() + b);
    const auto C = scan::reduce(op, tok.begin() + b, tok.end());
    RC_TAG("segment lengths", a, b - a, tok.size() - b);
    RC_ASSERT(op.combine(op.combine(A, B), C) == op.combine(A, op.combine(B, C)));
  };
}

template <class Op> auto identity_neutral(Spec s) {
  return [s] {
    const auto p = *problem_gen(s);
    const Head<Rational> h = make_head(p);
    const Op op{{h}};
    const auto tok = token_summaries(op, h.n());
    const auto X = scan::reduce(op, tok.begin(), tok.end());
    RC_ASSERT(op.combine(op.identity(), X) == X);
    RC_ASSERT(op.combine(X, op.identity()) == X);
  };
}

template <class Op> auto bracketing_equals_fold(Spec s) {
  return [s] {
    const auto p = *problem_gen(s);
    const Head<Rational> h = make_head(p);
    const Op op{{h}};
    const auto tok = token_summaries(op, h.n());
    const auto picks = *rc::gen::container<std::vector<size_t>>(tok.size(), rc::gen::inRange<size_t>(0, 1000));
    RC_ASSERT(scan::reduce_bracketed(op, tok, picks) == scan::reduce(op, tok.begin(), tok.end()));
  };
}

// Inclusive states of the Blelloch scan and of the chunked scan for every
// w in 1..n+1 equal those of the serial fold.
template <class Op> auto scans_equal_fold(Spec s) {
  return [s] {
    const auto p = *problem_gen(s);
    const Head<Rational> h = make_head(p);
    const Op op{{h}};
    const auto tok = token_summaries(op, h.n());
    const auto fold = scan::inclusive_fold(op, tok);
    RC_ASSERT(scan::inclusive_blelloch(op, tok) == fold);
    for (size_t w = 1; w <= tok.size() + 1; ++w) RC_ASSERT(scan::inclusive_chunked(op, tok, w) == fold);
  };
}

}  // namespace hla::test
