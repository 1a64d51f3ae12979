#include "hla/check/fixture.hpp"

namespace hla::check {

const char* generator_version() { return "hla-oracle " HLA_VERSION; }  // HLA_VERSION: check/CMakeLists.txt

using engine::has_state_difference_magnitude;

io::Fixture make_fixture(BatchProblem p, Reference ref, const FixtureMeta& meta) {
  io::Fixture f;
  const bool normalize = p.opt.normalize, sd = has_state_difference_magnitude(p.opt);
  f.problem = std::move(p);
  f.ref_out = std::move(ref.out);
  f.ref_den = std::move(ref.den);
  f.mag_num = std::move(ref.mag_num);
  f.mag_den = std::move(ref.mag_den);
  if (normalize) f.ref_num = std::move(ref.num);
  if (sd) {
    f.mag_num_unmasked = std::move(ref.mag_num_sd);
    f.mag_den_unmasked = std::move(ref.mag_den_sd);
  }
  auto any = [](const std::vector<uint8_t>& v) {
    for (auto x : v)
      if (x) return true;
    return false;
  };
  if (any(ref.flags)) f.flags = std::move(ref.flags);
  if (any(ref.den_flags)) f.den_flags = std::move(ref.den_flags);
  if (ref.grad) {
    GradientReference& g = *ref.grad;
    f.gradients = true;
    f.dout = std::move(g.dout), f.dden = std::move(g.dden);
    f.ref_dq = std::move(g.dq), f.ref_dk = std::move(g.dk), f.ref_dv = std::move(g.dv);
    f.mag_dq = std::move(g.mag_dq), f.mag_dk = std::move(g.mag_dk), f.mag_dv = std::move(g.mag_dv);
    if (any(g.dq_flags)) f.dq_flags = std::move(g.dq_flags);
    if (any(g.dk_flags)) f.dk_flags = std::move(g.dk_flags);
    if (any(g.dv_flags)) f.dv_flags = std::move(g.dv_flags);
    f.ref_dstate = std::move(g.dstate), f.mag_dstate = std::move(g.mag_dstate);
    if (any(g.dstate_flags)) f.dstate_flags = std::move(g.dstate_flags);
  }
  if (!ref.final_state.values.empty()) {
    engine::StateReference& st = ref.final_state;
    f.final_state = std::move(st.values), f.mag_final_state = std::move(st.mag);
    if (any(st.flags)) f.final_state_flags = std::move(st.flags);
  }
  f.suite = meta.suite;
  f.case_name = meta.case_name;
  f.seed = meta.seed;
  f.generator_version = generator_version();
  f.reference_bits = ref.bits;
  f.exact_tier = meta.exact_tier;
  return f;
}

namespace {
// The fixture's reference tensors, copied (F a const lvalue) or moved (an rvalue).
template <class F> Reference reference_from(F&& f) {
  const BatchProblem& p = f.problem;
  Reference r;
  r.out = std::forward<F>(f).ref_out;
  r.den = std::forward<F>(f).ref_den;
  r.mag_num = std::forward<F>(f).mag_num;
  r.mag_den = std::forward<F>(f).mag_den;
  r.num = std::forward<F>(f).ref_num;
  r.mag_num_sd = std::forward<F>(f).mag_num_unmasked;
  r.mag_den_sd = std::forward<F>(f).mag_den_unmasked;
  if (!f.final_state.empty()) {
    engine::StateReference& st = r.final_state;
    st.values = std::forward<F>(f).final_state, st.mag = std::forward<F>(f).mag_final_state;
    // mag_sd: derived from the (proven) mag by complete_reference.
    st.flags = f.final_state_flags.empty() ? std::vector<uint8_t>(st.values.size(), 0) : std::forward<F>(f).final_state_flags;
  }
  complete_reference(p, r);  // version 1 files, and problems where format 2 stores neither
  r.flags = f.flags.empty() ? std::vector<uint8_t>(r.out.size(), 0) : std::forward<F>(f).flags;
  r.den_flags = f.den_flags.empty() ? std::vector<uint8_t>(r.den.size(), 0) : std::forward<F>(f).den_flags;
  r.bits = f.reference_bits;
  if (f.gradients) {
    GradientReference& g = r.grad.emplace();
    g.dout = std::forward<F>(f).dout, g.dden = std::forward<F>(f).dden;
    g.dq = std::forward<F>(f).ref_dq, g.dk = std::forward<F>(f).ref_dk, g.dv = std::forward<F>(f).ref_dv;
    g.mag_dq = std::forward<F>(f).mag_dq, g.mag_dk = std::forward<F>(f).mag_dk, g.mag_dv = std::forward<F>(f).mag_dv;
    auto flags = [](auto&& x, size_t n) { return x.empty() ? std::vector<uint8_t>(n, 0) : std::vector<uint8_t>(std::forward<decltype(x)>(x)); };
    g.dq_flags = flags(std::forward<F>(f).dq_flags, g.dq.size()), g.dk_flags = flags(std::forward<F>(f).dk_flags, g.dk.size());
    g.dv_flags = flags(std::forward<F>(f).dv_flags, g.dv.size());
    g.dstate = std::forward<F>(f).ref_dstate, g.mag_dstate = std::forward<F>(f).mag_dstate;
    g.dstate_flags = flags(std::forward<F>(f).dstate_flags, g.dstate.size());
    g.bits = f.reference_bits;
  }
  return r;
}

template <class C> CandidateOutputs outputs_from(C&& c) {
  CandidateOutputs o{std::forward<C>(c).out, c.den ? std::vector<double>(*std::forward<C>(c).den) : std::vector<double>{}, c.out_dtype,
                     c.den ? c.den_dtype : DType::f64};
  if (c.dq) o.dq = *std::forward<C>(c).dq, o.dq_dtype = c.dq_dtype;
  if (c.dk) o.dk = *std::forward<C>(c).dk, o.dk_dtype = c.dk_dtype;
  if (c.dv) o.dv = *std::forward<C>(c).dv, o.dv_dtype = c.dv_dtype;
  o.dstate = std::forward<C>(c).dstate, o.dstate_parts = std::forward<C>(c).dstate_parts, o.dstate_dtype = c.dstate_dtype;
  o.final_state = std::forward<C>(c).final_state, o.final_state_parts = std::forward<C>(c).final_state_parts;
  o.final_state_dtype = c.final_state_dtype;
  return o;
}

// What check() reads: the unmasked-order magnitudes for that class, and for gradients.
bool reads_unmasked(const io::Fixture& f, const CheckOptions& opt) {
  return opt.form_class == FormClass::state_difference || f.gradients;
}

// Verifies what the check of f reads; the options with the fixture's exact tier.
CheckOptions verified(const io::Fixture& f, CheckOptions opt) {
  if (opt.progress) verify_fixture(f, [&](double done, double total) { opt.progress("verifying", done, total); }, reads_unmasked(f, opt));
  else verify_fixture(f, {}, reads_unmasked(f, opt));
  opt.exact_tier = opt.exact_tier || f.exact_tier;
  return opt;
}
}  // namespace

Reference reference_of(const io::Fixture& f) { return reference_from(f); }
Reference reference_of(io::Fixture&& f) { return reference_from(std::move(f)); }

CandidateOutputs outputs_of(const io::Candidate& c) { return outputs_from(c); }

io::Candidate candidate_of(const CandidateOutputs& c) {
  io::Candidate k;
  k.out = c.out;
  k.out_dtype = c.out_dtype;
  if (!c.den.empty()) {
    k.den = c.den;
    k.den_dtype = c.den_dtype;
  }
  if (!c.dq.empty()) k.dq = c.dq, k.dq_dtype = c.dq_dtype;
  if (!c.dk.empty()) k.dk = c.dk, k.dk_dtype = c.dk_dtype;
  if (!c.dv.empty()) k.dv = c.dv, k.dv_dtype = c.dv_dtype;
  k.dstate = c.dstate, k.dstate_parts = c.dstate_parts, k.dstate_dtype = c.dstate_dtype;
  k.final_state = c.final_state, k.final_state_parts = c.final_state_parts, k.final_state_dtype = c.final_state_dtype;
  return k;
}

Report check_fixture(const io::Fixture& f, const io::Candidate& c, CheckOptions opt) {
  const CheckOptions o = verified(f, std::move(opt));
  return check(f.problem, reference_of(f), outputs_of(c), o);
}

Report check_fixture(io::Fixture&& f, io::Candidate&& c, CheckOptions opt) {
  const CheckOptions o = verified(f, std::move(opt));
  return check(f.problem, reference_of(std::move(f)), outputs_from(std::move(c)), o);
}

void dump_case(const std::filesystem::path& stem, const io::Fixture& f, const CandidateOutputs& c) {
  io::write_fixture(stem.string() + ".safetensors", f);
  io::write_candidate(stem.string() + ".candidate.safetensors", candidate_of(c), f);
}

}  // namespace hla::check
