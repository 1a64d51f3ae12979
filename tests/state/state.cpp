// Initial states (SPEC §3, §8, hla/state.hpp), exact where the algebra is:
// - continuing a sequence from the state its first part leaves behind equals
//   one pass (the naive definition), and the final states compose;
// - the fast engine started from any state (not only reachable ones) equals
//   the streaming recurrence started from it;
// - the certified reference of a problem with a state stores the correctly
//   rounded exact values; the checker passes a kernel that continues from
//   the state and fails one that ignores it;
// - files: the initial_state.<part> tensors round-trip and bad ones are refused;
// - gradients (SPEC §9): the reference's dstate is ∂L/∂X0, exact where
//   certified; the checker passes a correct candidate dstate and fails a
//   dropped or wrong one, naming it; dstate tensors round-trip and bad ones are refused.
#include "hla/check/check.hpp"
#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"
#include "hla/engine/detail.hpp"
#include "hla/engine/gradient_reference.hpp"
#include "hla/engine/orders.hpp"
#include "hla/engine/reference.hpp"
#include "hla/exact.hpp"
#include "hla/fast/engine.hpp"
#include "hla/io/candidate.hpp"
#include "hla/io/fixture.hpp"
#include "hla/io/inputs.hpp"
#include "hla/io/state.hpp"
#include "hla/backward.hpp"
#include "hla/state.hpp"

#include <random>

#include "../engine/engine_exact.hpp"
#include "../../properties/generators.hpp"
#include "../../properties/harness.hpp"

using namespace hla;
using namespace hla::test;

namespace {

const std::vector<Variant> kStateVariants = variants_where([](const VariantInfo& r) { return r.has_state; });

Problem<Rational> rows_of(const Problem<Rational>& p, Index t0, Index t1) {
  return {p.opt, p.q.middleRows(t0, t1 - t0), p.k.middleRows(t0, t1 - t0), p.v.middleRows(t0, t1 - t0)};
}

StateMats<Rational> zero_state(const Problem<Rational>& p) {
  StateMats<Rational> X;
  for (const StatePart& m : state_layout(p.opt, p.d(), p.dv())) X.push_back(Mat<Rational>::Zero(m.rows, m.width()));
  return X;
}

// An arbitrary state (every used member random; unused members zero).
StateMats<Rational> state_gen(const Problem<Rational>& p) {
  StateMats<Rational> X;
  for (const StatePart& m : state_layout(p.opt, p.d(), p.dv()))
    X.push_back(m.role == StatePart::Role::unused ? Mat<Rational>(Mat<Rational>::Zero(m.rows, m.width()))
                                                  : *rational_matrix(m.rows, m.width()));
  return X;
}

void per_variant(Variant v) {
  const std::string name = to_string(v);
  prop(name + ": continuing from the state of a prefix equals one pass (naive), and final states compose", [v] {
    const auto p = *problem_gen({.variant = v, .random_scale = true});
    const Index m = *rc::gen::inRange<Index>(0, p.n() + 1);
    const auto head = rows_of(p, 0, m), tail = rows_of(p, m, p.n());
    const StateMats<Rational> X = final_state(head, zero_state(p));
    const Output<Rational> whole = evaluate(p, Form::naive), cont = evaluate_from(tail, X);
    RC_ASSERT(cont.num == whole.num.bottomRows(p.n() - m));
    RC_ASSERT(cont.den == whole.den.tail(p.n() - m));
    RC_ASSERT(cont.out == whole.out.bottomRows(p.n() - m));
    RC_ASSERT(final_state(tail, X) == final_state(p, zero_state(p)));
    RC_CLASSIFY(m > 0 && m < p.n(), "split inside");
  });
  prop(name + ": the fast engine from any state equals the streaming recurrence from it (exact), magnitudes too", [v] {
    auto p = *problem_gen({.variant = v, .random_scale = true});
    p.opt.normalize = false;  // the engine computes num and den
    const StateMats<Rational> X = state_gen(p);
    const Index w = *rc::gen::inRange<Index>(1, p.n() + 3);
    auto id = [](const Mat<Rational>& x) { return [&x](Index t, Index c) { return x(t, c); }; };
    fast::FastHead<Rational> h = fast::make_fast_head<Rational>(p.opt, p.n(), p.d(), p.dv(), id(p.q), id(p.k), id(p.v), w);
    fast::set_initial_carry(h, state_layout(p.opt, p.d(), p.dv()), [&](size_t i, Index r, Index c) { return X[i](r, c); });
    const fast::HeadResult<Rational> r = fast::evaluate_head(h);
    const Output<Rational> want = evaluate_from(p, X);
    const std::string bad = engine_mismatch(r, want, magnitude_from(p, X));
    if (!bad.empty()) RC_FAIL(bad);
    // Control: the state matters (else the property above could not tell).
    RC_CLASSIFY(evaluate_from(p, zero_state(p)).num != want.num, "state changes the outputs");
  });
}

// A batch problem of f32 Gaussian inputs with a random f32 initial state.
BatchProblem batch_with_state(Options o, Index B, Index H, Index n, Index d, Index dv, uint64_t seed, bool packed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  auto f32 = [&] { return static_cast<double>(static_cast<float>(N(rng))); };
  BatchProblem p;
  p.opt = o;
  p.batch = packed ? 1 : B, p.heads = H, p.kv_heads = H, p.n = n, p.d = d, p.dv = dv;
  p.resize_buffers();
  for (auto* x : {&p.q, &p.k, &p.v})
    for (double& e : *x) e = f32();
  if (packed && n >= 2) p.offsets = {0, n / 2, n};
  const auto layout = state_layout(o, d, dv);
  p.state.resize(static_cast<size_t>(p.sequence_count() * H * state_size(layout)));
  size_t at = 0;
  while (at < p.state.size())
    for (const StatePart& m : layout)
      for (Index i = 0; i < m.size(); ++i) p.state[at++] = m.role == StatePart::Role::unused ? 0.0 : f32();
  p.validate();
  return p;
}

rc::Gen<BatchProblem> batch_gen(Variant v) {
  return rc::gen::apply([](Options o, Index B, Index H, Index n, Index d, Index dv, uint64_t seed,
                           bool packed) { return batch_with_state(o, B, H, n, d, dv, seed, packed); },
                        options_gen({.variant = v, .random_scale = true}), rc::gen::inRange<Index>(1, 3), rc::gen::inRange<Index>(1, 3),
                        rc::gen::inRange<Index>(0, 13), rc::gen::inRange<Index>(1, 5), rc::gen::inRange<Index>(1, 4),
                        rc::gen::arbitrary<uint64_t>(), rc::gen::arbitrary<bool>());
}

// The exact outputs of every (batch, head, sequence) of p, through the rational streaming form from the state.
struct Exact {
  std::vector<Rational> out, den;
};
Exact exact_of(const BatchProblem& p) {
  Exact e{std::vector<Rational>(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)),
          std::vector<Rational>(static_cast<size_t>(p.batch * p.heads * p.n))};
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    const auto o = evaluate_from(p.head<Rational>(b, h, t0, t1), p.head_state<Rational>(p.sequence_of(b, t0), h));
    for (Index t = t0; t < t1; ++t) {
      e.den[p.den_index(b, h, t)] = o.den(t - t0);
      for (Index c = 0; c < p.dv; ++c) e.out[p.out_index(b, h, t, c)] = o.out(t - t0, c);
    }
  });
  return e;
}

void reference_props(Variant v) {
  const std::string name = to_string(v);
  prop(name +
           ": the reference from a state (exact tier, and the double-double engine) stores the correctly rounded exact value wherever "
           "certified",
       [v] {
         const BatchProblem p = *batch_gen(v);
         Exact e;
         try {
           e = exact_of(p);
         } catch (const std::domain_error&) {
           RC_DISCARD("den + eps = 0 exactly");
         }
         for (const Index exact_max_n : {Index{48}, Index{0}}) {
           engine::ReferenceOptions ro;
           ro.exact_max_n = exact_max_n;
           ro.threads = 1;
           const engine::Reference r = engine::compute_reference(p, ro);
           for (size_t i = 0; i < e.out.size(); ++i)
             if (!(r.flags[i] & engine::kUncertified) && r.out[i] != to_double(e.out[i]))
               RC_FAIL("out[" + std::to_string(i) + "] = " + std::to_string(r.out[i]) + ", exact " + to_string(e.out[i]) +
                       " (exact_max_n " + std::to_string(exact_max_n) + ")");
           for (size_t i = 0; i < e.den.size(); ++i)
             if (!(r.den_flags[i] & engine::kUncertified) && r.den[i] != to_double(e.den[i]))
               RC_FAIL("den[" + std::to_string(i) + "] = " + std::to_string(r.den[i]) + ", exact " + to_string(e.den[i]));
         }
       });
}

// out of p as a float32 kernel computes it (the streaming recurrence in
// double, rounded to f32), from the problem's state or (ignore_state) from zero.
engine::CandidateOutputs f32_kernel(const BatchProblem& p, bool ignore_state) {
  engine::CandidateOutputs c{std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)),
                             std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n)), DType::f32, DType::f32};
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    const Problem<double> ph = p.head<double>(b, h, t0, t1);
    StateMats<double> X = p.head_state<double>(p.sequence_of(b, t0), h);
    if (ignore_state)
      for (auto& m : X) m.setZero();
    const auto o = evaluate_from(ph, X);
    for (Index t = t0; t < t1; ++t) {
      c.den[p.den_index(b, h, t)] = static_cast<float>(o.den(t - t0));
      for (Index k = 0; k < p.dv; ++k) c.out[p.out_index(b, h, t, k)] = static_cast<float>(o.out(t - t0, k));
    }
  });
  return c;
}

// Variant v normalized (add), γ = 99/100 where it may decay.
Options normalized(Variant v) {
  Options o;
  o.variant = v;
  o.gamma = needs_unit_gamma(v) ? Rational(1) : Rational(99, 100);
  o.normalize = true;
  return o;
}

// Upstream do (and dden when normalized) of p: f32 Gaussian values from seed.
struct Upstream {
  std::vector<double> dout, dden;
};
Upstream upstream_of(const BatchProblem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  Upstream u{std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)), {}};
  for (double& e : u.dout) e = static_cast<float>(N(rng));
  if (p.opt.normalize) {
    u.dden.resize(static_cast<size_t>(p.batch * p.heads * p.n));
    for (double& e : u.dden) e = static_cast<float>(N(rng));
  }
  return u;
}

// p's reference with the gradients for u, and our f32 kernel from the state with its chunked backward (width 7).
struct WithGradients {
  engine::Reference ref;
  engine::CandidateOutputs c;
};
WithGradients f32_with_gradients(const BatchProblem& p, const Upstream& u) {
  WithGradients g{engine::compute_reference(p), f32_kernel(p, false)};
  g.ref.grad = engine::compute_gradient_reference(p, g.ref, u.dout, u.dden);
  engine::ours_gradients(p, u.dout, u.dden, BackwardForm::chunked, 7, DType::f32, g.c);
  return g;
}

// The exact ∂L/∂X0 of every (sequence, query head) of p, laid out as p.state,
// by backward form f (chunks of w).
std::vector<Rational> exact_dstate(const BatchProblem& p, const Upstream& u, BackwardForm f, Index w) {
  std::vector<Rational> out(p.state.size());
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    Mat<Rational> up(t1 - t0, p.dv);
    Vec<Rational> dd = Vec<Rational>::Zero(t1 - t0);
    for (Index t = t0; t < t1; ++t) {
      for (Index c = 0; c < p.dv; ++c) up(t - t0, c) = to_rational(u.dout[p.out_index(b, h, t, c)]);
      if (!u.dden.empty()) dd(t - t0) = to_rational(u.dden[p.den_index(b, h, t)]);
    }
    const Index seq = p.sequence_of(b, t0);
    const auto g = backward_from(p.head<Rational>(b, h, t0, t1), p.head_state<Rational>(seq, h), up, dd, f, w);
    const BatchProblem::StateView X = p.state_view(seq, h);
    for (size_t m = 0; m < g.dstate.size(); ++m)
      for (Index r = 0; r < g.dstate[m].rows(); ++r)
        for (Index c = 0; c < g.dstate[m].cols(); ++c)
          out[X.start[m] + static_cast<size_t>(r * g.dstate[m].cols() + c)] = g.dstate[m](r, c);
  });
  return out;
}

void gradient_props(Variant v) {
  prop(to_string(v) +
           ": the reference's dstate is ∂L/∂X0 (every reverse form alike), correctly rounded wherever certified, within its magnitude",
       [v] {
         const BatchProblem p = *batch_gen(v);
         const Upstream u = upstream_of(p, *rc::gen::arbitrary<uint64_t>());
         std::vector<Rational> e;
         try {
           e = exact_dstate(p, u, BackwardForm::streaming, 1);
         } catch (const std::domain_error&) {
           RC_DISCARD("den + eps = 0 exactly");
         }
         const Index w = *rc::gen::inRange<Index>(1, p.n + 2);
         RC_ASSERT(exact_dstate(p, u, BackwardForm::chunked, w) == e);
         if (has_backward_form(v, BackwardForm::chunked_matmul)) RC_ASSERT(exact_dstate(p, u, BackwardForm::chunked_matmul, w) == e);
         for (const Index exact_max_n : {Index{48}, Index{0}}) {  // exact rationals, and binary128
           engine::ReferenceOptions ro;
           ro.exact_max_n = exact_max_n;
           ro.threads = 1;
           const engine::GradientReference g = engine::compute_gradient_reference(p, engine::compute_reference(p, ro), u.dout, u.dden);
           RC_ASSERT(g.dstate.size() == e.size());
           for (size_t i = 0; i < e.size(); ++i) {
             const double x = to_double(e[i]);
             if (!(g.dstate_flags[i] & engine::kUncertified) && g.dstate[i] != x)
               RC_FAIL("dstate[" + std::to_string(i) + "] = " + std::to_string(g.dstate[i]) + ", exact " + to_string(e[i]) +
                       " (exact_max_n " + std::to_string(exact_max_n) + ")");
             RC_ASSERT(std::fabs(x) <= g.mag_dstate[i] * (1 + 0x1p-60));
           }
           RC_CLASSIFY(exact_max_n == 0 && g.uncertified == 0, "binary128, all certified");
         }
       });
}

}  // namespace

TEST_CASE("state gradient: la1", "[state][gradients]") { gradient_props(Variant::la1); }
TEST_CASE("state gradient: hla2", "[state][gradients]") { gradient_props(Variant::hla2); }
TEST_CASE("state gradient: ahla", "[state][gradients]") { gradient_props(Variant::ahla); }
TEST_CASE("state gradient: hla3", "[state][gradients]") { gradient_props(Variant::hla3); }

TEST_CASE("state gradient: the checker passes a correct dstate and fails a dropped, wrong or missing one, naming it",
          "[state][gradients]") {
  for (const Variant v : kStateVariants) {
    const Options o = normalized(v);
    const BatchProblem p = batch_with_state(o, 2, 2, 20, 4, 3, 7, false);
    const Upstream u = upstream_of(p, 3);
    WithGradients g = f32_with_gradients(p, u);
    engine::Reference& ref = g.ref;  // named references: lambdas below capture them (clang 14: no structured bindings)
    engine::CandidateOutputs& c = g.c;
    REQUIRE(!c.dstate_parts.empty());
    check::CheckOptions opt;
    opt.require_gradients = true;
    const auto good = check::check(p, ref, c, opt);
    INFO(to_string(v) << ":\n" << good.text());
    CHECK(good.pass);
    size_t rows = 0;
    for (const auto& g : good.gradients) rows += g.name.rfind("dstate.", 0) == 0 && g.checked && g.scored > 0;
    CHECK(rows == c.dstate_parts.size());
    // Each part has its map (issue 32): rows (sequence, head), positions the part's rows, and a section of the page.
    CHECK(good.hints.empty());
    const std::string page = good.html();
    for (const auto& m : good.maps) {
      if (m.name.rfind("dstate.", 0) != 0) continue;
      CHECK_FALSE(m.tokens);
      CHECK(m.rows == p.sequence_count() * p.heads);
      CHECK(m.cand_blocks.size() == static_cast<size_t>(m.rows * m.blocks()));
      CHECK(page.find("id=\"part-" + m.name + "\"") != std::string::npos);
    }
    {
      engine::CandidateOutputs zeros = c;
      std::fill(zeros.dstate.begin(), zeros.dstate.end(), 0.0);
      const auto r = check::check(p, ref, zeros, opt);
      bool hinted = false;
      for (const auto& h : r.hints)
        hinted = hinted || h.rfind("confined to the gradients dstate.", 0) == 0 || h.rfind("confined to one gradient: dstate.", 0) == 0;
      INFO(r.text());
      CHECK(hinted);
    }
    auto fails_naming_dstate = [&](const engine::CandidateOutputs& bad, const char* what) {
      const auto r = check::check(p, ref, bad, opt);
      INFO(what << ":\n" << r.text());
      CHECK(!r.pass);
      bool named = false;
      for (const auto& reason : r.reasons) named = named || reason.find("dstate.") != std::string::npos;
      CHECK(named);
    };
    engine::CandidateOutputs dropped = c;
    std::fill(dropped.dstate.begin(), dropped.dstate.end(), 0.0);
    fails_naming_dstate(dropped, "the state gradient dropped (zeros)");
    // A wrong one: the bound decides. The largest element moved by s·u·M* (M* its magnitude times
    // its sequence's conditioning factor, in float64 so that no rounding blurs it) scores s.
    // (Of a member that is not symmetric: a symmetric one is judged by (G + Gᵀ)/2, which halves a one-sided move.)
    const std::vector<StatePart> layout = state_layout(o, p.d, p.dv);
    size_t big = 0;
    p.for_each_state_entry([&](Index, Index, size_t m, Index, Index, size_t at) {
      if (!layout[m].symmetric && ref.grad->mag_dstate[at] > ref.grad->mag_dstate[big]) big = at;
    });
    const check::GradientYardstick y = check::gradient_yardstick(p, ref, *ref.grad, engine::FormClass::masked, 0x1p-24);
    const double Mstar = y.state[big];
    REQUIRE(std::isfinite(Mstar));
    auto moved = [&](double by) {
      engine::CandidateOutputs m = c;
      m.dstate = ref.grad->dstate, m.dstate_dtype = DType::f64;
      m.dstate[big] += by * 0x1p-24 * Mstar;
      return m;
    };
    const double K = good.gradient_bound;
    // Rule 2 alone lets a move of (K_g − 3)·u·M* through; rule 3 (our orders in f32) does not.
    const auto below = check::check(p, ref, moved(K - 3), opt);
    CHECK_FALSE(below.pass);
    for (const auto& g : below.gradients) CHECK(g.over_bound == 0);
    fails_naming_dstate(moved(K + 3), "one element moved by (K_g + 4)·u·M*");
    engine::CandidateOutputs missing = c;
    missing.dstate_parts.clear();
    fails_naming_dstate(missing, "no dstate with --require-grad");
    // A kernel that reads a symmetric member S as Sᵀ·q has the transposed gradient there: it passes too.
    engine::CandidateOutputs transposed = c;
    bool any_symmetric = false, moved_one = false;
    p.for_each_state_entry([&](Index, Index, size_t m, Index r, Index col, size_t at) {
      if (!layout[m].symmetric) return;
      any_symmetric = true;
      transposed.dstate[at] = c.dstate[at + static_cast<size_t>((col - r) * (layout[m].width() - 1))];
      // One upper-triangle entry moved by 4(K_g + 4)·u·M*: symmetrizing halves it, still beyond the bound.
      if (r < col && !moved_one && ref.grad->mag_dstate[at] > 0) {
        transposed.dstate[at] += 4 * (good.gradient_bound + 4) * 0x1p-24 * y.state[at];
        moved_one = true;
      }
    });
    if (any_symmetric) {
      engine::CandidateOutputs sym = transposed;  // the honest transpose, without the asymmetric change
      p.for_each_state_entry([&](Index, Index, size_t m, Index r, Index col, size_t at) {
        if (layout[m].symmetric) sym.dstate[at] = c.dstate[at + static_cast<size_t>((col - r) * (layout[m].width() - 1))];
      });
      const auto rs = check::check(p, ref, sym, opt);
      INFO("transposed S:\n" << rs.text());
      CHECK(rs.pass);
      fails_naming_dstate(transposed, "S transposed and one triangle moved");
    }
  }
}

TEST_CASE("state gradient: ref_dstate/mag_dstate and candidate dstate.<part> round-trip, and bad ones are refused",
          "[state][gradients][io]") {
  Options o;
  o.variant = Variant::hla2;
  o.gamma = Rational(1, 2);
  o.lambda = Rational(1, 4);  // C required too
  const BatchProblem p = batch_with_state(o, 1, 2, 6, 3, 2, 11, true);
  const Upstream u = upstream_of(p, 5);
  engine::Reference ref = engine::compute_reference(p);
  ref.grad = engine::compute_gradient_reference(p, ref, u.dout, u.dden);
  const io::Fixture f = check::make_fixture(p, ref, {});
  const io::SafetensorsFile st = io::fixture_to_safetensors(f);
  for (const char* name : {"ref_dstate.S", "ref_dstate.C", "ref_dstate.m", "ref_dstate.F", "ref_dstate.f", "mag_dstate.S", "mag_dstate.f"})
    CHECK(st.tensors.count(name) == 1);
  CHECK(st.tensors.at("ref_dstate.S").shape == std::vector<int64_t>{2, 2, 3, 3});  // two packed sequences, two heads
  CHECK(st.tensors.at("ref_dstate.f").shape == std::vector<int64_t>{2, 2, 3});
  const io::Fixture g = io::fixture_from_safetensors(st, "test");
  CHECK(g.ref_dstate == f.ref_dstate);
  CHECK(g.mag_dstate == f.mag_dstate);
  // The digest covers them; a file without them is refused.
  io::SafetensorsFile edited = st;
  edited.tensors.at("ref_dstate.S") = io::float_tensor(DType::f64, {2, 2, 3, 3}, std::vector<double>(36, 1.0), "S");
  CHECK_THROWS_WITH(io::fixture_from_safetensors(edited, "test"), Catch::Contains("digest mismatch"));
  io::Fixture none = f;
  none.ref_dstate.clear(), none.mag_dstate.clear();
  CHECK_THROWS_WITH(io::fixture_to_safetensors(none), Catch::Contains("ref_dstate"));
  // Candidates: the parts round-trip; a wrong shape, an unknown part, or dstate without a state is refused.
  engine::CandidateOutputs c = f32_kernel(p, false);
  engine::ours_gradients(p, u.dout, u.dden, BackwardForm::streaming, 16, DType::f32, c);
  const io::SafetensorsFile cs = io::candidate_to_safetensors(check::candidate_of(c), f);
  CHECK(cs.tensors.at("dstate.F").shape == std::vector<int64_t>{2, 2, 3, 2});
  const io::Candidate back = io::candidate_from_safetensors(cs, f, "cand");
  CHECK(back.dstate == c.dstate);
  CHECK(back.dstate_parts == c.dstate_parts);
  io::SafetensorsFile bad = cs;
  bad.tensors.at("dstate.S") = io::float_tensor(DType::f32, {2, 2, 3}, std::vector<double>(12, 0.0), "S");
  CHECK_THROWS_WITH(io::candidate_from_safetensors(bad, f, "cand"), Catch::Contains("dstate.S has shape [2, 2, 3]; expected [2, 2, 3, 3]"));
  io::SafetensorsFile unknown = cs;
  unknown.tensors["dstate.G"] = cs.tensors.at("dstate.F");
  CHECK_THROWS_WITH(io::candidate_from_safetensors(unknown, f, "cand"), Catch::Contains("'dstate.G', which is not part of"));
  io::Fixture stateless = check::make_fixture(p, ref, {});
  stateless.problem.state.clear(), stateless.ref_dstate.clear(), stateless.mag_dstate.clear(), stateless.dstate_flags.clear();
  CHECK_THROWS_WITH(io::candidate_from_safetensors(cs, stateless, "cand"), Catch::Contains("no initial state"));
}

TEST_CASE("state: la1", "[state]") { per_variant(Variant::la1); }
TEST_CASE("state: hla2", "[state]") { per_variant(Variant::hla2); }
TEST_CASE("state: ahla", "[state]") { per_variant(Variant::ahla); }
TEST_CASE("state: hla3", "[state]") { per_variant(Variant::hla3); }
TEST_CASE("state reference: la1", "[state]") { reference_props(Variant::la1); }
TEST_CASE("state reference: hla2", "[state]") { reference_props(Variant::hla2); }
TEST_CASE("state reference: ahla", "[state]") { reference_props(Variant::ahla); }
TEST_CASE("state reference: hla3", "[state]") { reference_props(Variant::hla3); }

TEST_CASE("state: the variants with a state are those with a backward type (whose State it is)", "[state]") {
  for (const auto& v : kVariants) CHECK(has_state(v.id) == has_backward(v.id));
}

TEST_CASE("state: a variant's row says it has a state exactly when state_layout lays one out", "[state]") {
  for (const auto& v : kVariants) {
    Options o;
    o.variant = v.id;
    bool laid_out = true;
    try {
      laid_out = !state_layout(o, 4, 3).empty();
    } catch (const InputError&) {
      laid_out = false;
    }
    INFO(v.name);
    CHECK(laid_out == has_state(v.id));
  }
}

TEST_CASE("state: the checker passes a kernel that continues from the state and fails one that ignores it", "[state]") {
  for (const Variant v : kStateVariants) {
    const Options o = normalized(v);
    const BatchProblem p = batch_with_state(o, 2, 2, 40, 8, 8, 7, false);
    const engine::Reference ref = engine::compute_reference(p);
    const auto good = check::check(p, ref, f32_kernel(p, false), {});
    INFO(to_string(v) << ", from the state:\n" << good.text());
    CHECK(good.pass);
    const auto bad = check::check(p, ref, f32_kernel(p, true), {});
    INFO(to_string(v) << ", ignoring the state:\n" << bad.text());
    CHECK(!bad.pass);
  }
}

// Final states (SPEC §8; reference.hpp StateReference, check.hpp Report::states).

// Our f32 kernel (f32_kernel) with our streaming order's final state in f32, every part the layout uses.
engine::CandidateOutputs f32_kernel_with_state(const BatchProblem& p) {
  engine::CandidateOutputs c = f32_kernel(p, false);
  c.final_state = engine::fast_ours_state(p, engine::Precision::f32, {Form::streaming, 1});
  c.final_state_dtype = DType::f32;
  for (double& x : c.final_state) x = static_cast<float>(x);
  for (const StatePart& m : state_layout(p.opt, p.d, p.dv))
    if (m.role != StatePart::Role::unused)
      for (const std::string& name : {m.name, m.ones})
        if (!name.empty()) c.final_state_parts.push_back(name);
  return c;
}

TEST_CASE("final state: the reference is the exact final state, by each engine", "[state][final]") {
  for (const Variant v : kStateVariants)
    for (const bool packed : {false, true}) {
      const BatchProblem p = batch_with_state(normalized(v), 2, 2, 24, 4, 3, 11, packed);
      const engine::StateReference exact = engine::compute_state_reference(p);                            // rationals
      const engine::StateReference f113 = engine::compute_state_reference(p, 0);                          // binary128
      const engine::StateReference first = engine::compute_state_reference(p, engine::kExactMaxN, true);  // the engine first
      CHECK(first.flags == exact.flags);  // certified everywhere: the engine's where it certifies all, else exact rationals
      REQUIRE(exact.values.size() == static_cast<size_t>(p.sequence_count() * p.heads * state_size(state_layout(p.opt, p.d, p.dv))));
      size_t certified = 0;
      p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
        const Index seq = p.sequence_of(b, t0);
        const StateMats<Rational> X = exact::final_state(p.head<Rational>(b, h, t0, t1), p.head_state<Rational>(seq, h));
        const BatchProblem::StateView at = p.state_view(seq, h);
        for (size_t i = 0; i < X.size(); ++i)
          for (Index r = 0; r < X[i].rows(); ++r)
            for (Index c = 0; c < X[i].cols(); ++c) {
              const size_t k = at.start[i] + static_cast<size_t>(r * X[i].cols() + c);
              INFO(to_string(v) << " entry " << k);
              CHECK(exact.values[k] == to_double(X[i](r, c)));  // correctly rounded
              CHECK(std::fabs(exact.values[k]) <= exact.mag[k]);
              CHECK(first.values[k] == exact.values[k]);
              CHECK(std::fabs(first.mag[k] - exact.mag[k]) <= 0x1p-40 * exact.mag[k]);  // the engine's, as computed in double
              CHECK(exact.mag_sd[k] >= exact.mag[k]);
              if (f113.flags[k] & engine::kUncertified) continue;
              ++certified;
              CHECK(f113.values[k] == exact.values[k]);
            }
      });
      CHECK(certified > exact.values.size() * 9 / 10);
    }
}

TEST_CASE("final state: the double-double engine's carry is certified on a large head", "[state][final]") {
  Options o = normalized(Variant::hla2);
  BatchProblem p = batch_with_state(o, 1, 1, 600, 64, 64, 5, false);  // n·d·(d + dv) above 2^22: the fast path
  const engine::StateReference s = engine::compute_state_reference(p);
  const StateMats<f113> X = final_state(p.head<f113>(0, 0, 0, p.n), p.head_state<f113>(0, 0));
  size_t certified = 0, k = 0;
  for (const auto& m : X)
    for (Index r = 0; r < m.rows(); ++r)
      for (Index c = 0; c < m.cols(); ++c, ++k) {
        if (s.flags[k] & engine::kUncertified) continue;
        ++certified;
        // binary128 within depth_bound·2^-112·M: the certified value is its rounding wherever that certifies too.
        if (engine::certifies(m(r, c), f113(engine::depth_bound(o.variant, p.n, p.d)) * f113(0x1p-112) * f113(s.mag[k])))
          CHECK(s.values[k] == static_cast<double>(m(r, c)));
      }
  CHECK(certified >= k * 99 / 100);
}

TEST_CASE("final state: the checker passes our orders' final state and fails a wrong or missing part, naming it", "[state][final]") {
  for (const Variant v : kStateVariants) {
    const BatchProblem p = batch_with_state(normalized(v), 2, 2, 40, 8, 8, 7, true);
    const engine::Reference ref = engine::compute_reference(p);
    const engine::CandidateOutputs good = f32_kernel_with_state(p);
    const check::Report r = check::check(p, ref, good, {});
    INFO(to_string(v) << ":\n" << r.text());
    CHECK(r.pass);
    CHECK(r.states.size() >= good.final_state_parts.size());
    for (const auto& row : r.states) CHECK((!row.checked || (row.scored > 0 && row.baseline_applied)));
    // The last member's entry (F, E or P) off by 1e-3 of its magnitude: FAIL, naming the part.
    engine::CandidateOutputs bad = good;
    const size_t k = bad.final_state.size() - 2;
    bad.final_state[k] += 1e-3 * ref.final_state.mag[k];
    const check::Report b = check::check(p, ref, bad, {});
    INFO(b.text());
    CHECK(!b.pass);
    CHECK(b.text().find("reason: state.") != std::string::npos);
    CHECK(b.text().find("confined to the final state") != std::string::npos);
    // A required part left out: an input error naming it.
    engine::CandidateOutputs missing = good;
    missing.final_state_parts.pop_back();
    CHECK_THROWS_WITH(check::check(p, ref, missing, {}), Catch::Contains("final state lacks state."));
  }
}

TEST_CASE("final state: a state-difference kernel's F = S·C − G passes its class, judged by its magnitude", "[state][final]") {
  const BatchProblem p = batch_with_state(normalized(Variant::hla2), 1, 2, 200, 8, 8, 3, false);
  const engine::Reference ref = engine::compute_reference(p);
  engine::CandidateOutputs c = f32_kernel_with_state(p);
  const auto bases = engine::state_baselines(p, engine::Precision::f32, engine::FormClass::state_difference);
  REQUIRE(bases.back().first == "paper state (S*C - G)");
  c.final_state = bases.back().second;  // our subtracting order as the kernel's
  check::CheckOptions opt;
  opt.form_class = engine::FormClass::state_difference;
  const check::Report r = check::check(p, ref, c, opt);
  INFO(r.text());
  CHECK(r.pass);
  size_t larger = 0;
  for (size_t k = 0; k < ref.final_state.mag.size(); ++k) larger += ref.final_state.mag_sd[k] > ref.final_state.mag[k];
  CHECK(larger > 0);
}

TEST_CASE("final state: a fixture's state.<part> tensors are proven on read", "[state][final][io]") {
  const BatchProblem p = batch_with_state(normalized(Variant::hla3), 1, 2, 30, 4, 3, 9, false);
  const io::Fixture f = check::make_fixture(p, engine::compute_reference(p), {});
  REQUIRE(!f.final_state.empty());
  check::verify_fixture(f);
  io::Fixture forged = f;
  forged.final_state[3] += 1e-6 * forged.mag_final_state[3] + 1e-300;
  CHECK_THROWS_WITH(check::verify_fixture(forged), Catch::Contains("does not match its inputs") && Catch::Contains("state[3]"));
  forged = f;
  forged.mag_final_state[5] *= 2;
  CHECK_THROWS_WITH(check::verify_fixture(forged), Catch::Contains("mag_state[5]"));
}

TEST_CASE("state: initial_state.<part> tensors round-trip through inputs and fixtures, and bad ones are refused", "[state][io]") {
  Options o;
  o.variant = Variant::hla2;
  o.gamma = Rational(1, 2);
  BatchProblem p = batch_with_state(o, 1, 2, 6, 3, 2, 11, true);
  const auto st = io::state_tensors(p);
  std::set<std::string> names;
  for (const auto& [k, t] : st) names.insert(k);
  // Masked hla2 without ridge: S, F, f required; C, m optional (written, as they are given).
  CHECK(names == std::set<std::string>{"initial_state.C", "initial_state.F", "initial_state.S", "initial_state.f", "initial_state.m"});
  std::map<std::string, io::Tensor> t = st;
  t["q"] = io::float_tensor(DType::f32, {1, 2, 6, 3}, p.q, "q");
  t["k"] = io::float_tensor(DType::f32, {1, 2, 6, 3}, p.k, "k");
  t["v"] = io::float_tensor(DType::f32, {1, 2, 6, 2}, p.v, "v");
  t["cu_seqlens"] = io::i64_tensor({3}, p.offsets);
  const BatchProblem back = io::problem_from_tensors(t, o, io::Layout::bhtd, "test");
  CHECK(back.state == p.state);
  // Through a fixture (the digest covers the state).
  const io::Fixture f = check::make_fixture(p, engine::compute_reference(p), {});
  const io::Fixture g = io::fixture_from_safetensors(io::fixture_to_safetensors(f), "test");
  CHECK(g.problem.state == p.state);
  // Optional parts may be left out (zero); required ones may not; unknown or unused ones are refused.
  auto without = [&](const std::string& name) {
    auto u = t;
    u.erase(name);
    return u;
  };
  const BatchProblem no_c = io::problem_from_tensors(without("initial_state.C"), o, io::Layout::bhtd, "test");
  CHECK(no_c.has_state());
  CHECK_THROWS_WITH(io::problem_from_tensors(without("initial_state.F"), o, io::Layout::bhtd, "test"),
                    Catch::Contains("without 'initial_state.F'"));
  Options un = o;
  un.masked = false;
  CHECK_THROWS_WITH(io::problem_from_tensors(t, un, io::Layout::bhtd, "test"), Catch::Contains("'initial_state.F', which is not part"));
  auto bad_shape = t;
  bad_shape["initial_state.S"] = io::float_tensor(DType::f32, {1, 2, 3, 3}, std::vector<double>(18, 0.0), "S");
  CHECK_THROWS_WITH(io::problem_from_tensors(bad_shape, o, io::Layout::bhtd, "test"), Catch::Contains("initial_state.S has shape"));
  auto unknown = t;
  unknown["initial_state.G"] = t.at("initial_state.F");
  CHECK_THROWS_WITH(io::problem_from_tensors(unknown, o, io::Layout::bhtd, "test"), Catch::Contains("initial_state.G"));
  Options paper = o;
  paper.variant = Variant::hla3_paper, paper.gamma = 1;
  CHECK_THROWS_WITH(io::problem_from_tensors(t, paper, io::Layout::bhtd, "test"), Catch::Contains("no streaming state"));
}

TEST_CASE("state gradient: our state-difference backward (hla2, hla3) from a state passes its class and a moved element fails",
          "[state][gradients]") {
  for (const Variant v : {Variant::hla2, Variant::hla3})
    for (const bool packed : {false, true}) {
      Options o = normalized(v);
      o.normalize = !packed;  // (normalized in bf16, f16: Gaussian den's error bound covers |den|, nothing scored)
      const BatchProblem p = batch_with_state(o, 2, 2, v == Variant::hla3 ? 14 : 24, 4, 3, 7, packed);
      const Upstream u = upstream_of(p, 3);
      engine::Reference ref = engine::compute_reference(p);
      ref.grad = engine::compute_gradient_reference(p, ref, u.dout, u.dden);
      for (const auto& [prec, dt] : {std::pair{engine::Precision::f64, DType::f64}, std::pair{engine::Precision::f32, DType::f32},
                                     std::pair{engine::Precision::bf16, DType::bf16}, std::pair{engine::Precision::f16, DType::f16}}) {
        if (o.normalize && (prec == engine::Precision::bf16 || prec == engine::Precision::f16)) continue;
        // Our subtracting order as the kernel's gradients (the forward: our streaming order in prec).
        engine::CandidateOutputs c = engine::ours(p, prec, Form::streaming, 1, dt);
        const engine::CandidateOutputs g = engine::paper_state_gradients(p, prec, u.dout, u.dden);
        c.dq = g.dq, c.dk = g.dk, c.dv = g.dv, c.dstate = g.dstate;
        c.dq_dtype = c.dk_dtype = c.dv_dtype = c.dstate_dtype = dt;
        for (const StatePart& m : state_layout(o, p.d, p.dv))
          if (m.role != StatePart::Role::unused)
            for (const std::string& name : {m.name, m.ones})
              if (!name.empty()) c.dstate_parts.push_back(name);
        check::CheckOptions opt{.precision = prec, .form_class = engine::FormClass::state_difference, .require_gradients = true};
        const check::Report r = check::check(p, ref, c, opt);
        INFO(to_string(v) << (packed ? " packed" : "") << " in " << to_string(prec) << ":\n" << r.text());
        CHECK(r.pass);
        size_t ours = 0;
        for (const auto& row : r.gradients) {
          CHECK((row.checked && row.scored > 0 && row.baseline_applied));
          ours += row.baseline_worst_form.rfind("paper state", 0) == 0;
        }
        CHECK(ours > 0);  // our subtracting order is among rule 3's, and the worst somewhere
        // One element of dk and one of dstate.F moved beyond the a priori bound: FAIL, each.
        const check::GradientYardstick y =
            check::gradient_yardstick(p, ref, *ref.grad, engine::FormClass::state_difference, engine::unit_roundoff(prec));
        engine::CandidateOutputs bad = c;
        bad.dk_dtype = DType::f64;
        bad.dk[1] += 4 * (r.gradient_bound + 4) * engine::unit_roundoff(prec) * y.k[1];
        CHECK_FALSE(check::check(p, ref, bad, opt).pass);
        bad = c;
        bad.dstate_dtype = DType::f64;
        const size_t at = p.state_view(0, 0).start[2] + 1;  // F (layout S, C|P, F)
        bad.dstate[at] += 4 * (r.gradient_bound + 4) * engine::unit_roundoff(prec) * y.state[at];
        CHECK_FALSE(check::check(p, ref, bad, opt).pass);
      }
    }
}

TEST_CASE("state gradient: ahla declared state_difference is judged as masked, and the report says so", "[state][gradients]") {
  const Options o = normalized(Variant::ahla);
  const BatchProblem p = batch_with_state(o, 1, 2, 16, 4, 3, 5, false);
  const Upstream u = upstream_of(p, 2);
  const auto [ref, c] = f32_with_gradients(p, u);
  const check::Report m = check::check(p, ref, c, {.precision = engine::Precision::f32});
  const check::Report s = check::check(p, ref, c, {.precision = engine::Precision::f32, .form_class = engine::FormClass::state_difference});
  INFO(s.text());
  CHECK(s.pass);
  CHECK(s.gradients_note.find("judged as masked") != std::string::npos);
  REQUIRE(s.gradients.size() == m.gradients.size());
  for (size_t i = 0; i < s.gradients.size(); ++i) {  // the same orders and magnitudes: the same scores and bar
    CHECK(s.gradients[i].max_score == m.gradients[i].max_score);
    CHECK(s.gradients[i].baseline_max_score == m.gradients[i].baseline_max_score);
    CHECK(s.gradients[i].baseline_applied);
  }
}
