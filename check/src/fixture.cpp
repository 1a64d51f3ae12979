#include "hla/check/fixture.hpp"

namespace hla::check {

io::Fixture make_fixture(const BatchProblem& p, const Reference& ref, const FixtureMeta& meta) {
  io::Fixture f;
  f.problem = p;
  f.ref_out = ref.out;
  f.ref_den = ref.den;
  f.mag_num = ref.mag_num;
  f.mag_den = ref.mag_den;
  if (p.opt.normalize) f.ref_num = ref.num;
  if (has_state_difference_magnitude(p.opt)) {
    f.mag_num_unmasked = ref.mag_num_sd;
    f.mag_den_unmasked = ref.mag_den_sd;
  }
  auto any = [](const std::vector<uint8_t>& v) {
    for (auto x : v)
      if (x) return true;
    return false;
  };
  if (any(ref.flags)) f.flags = ref.flags;
  if (any(ref.den_flags)) f.den_flags = ref.den_flags;
  if (ref.grad) {
    const GradientReference& g = *ref.grad;
    f.gradients = true;
    f.dout = g.dout, f.dden = g.dden;
    f.ref_dq = g.dq, f.ref_dk = g.dk, f.ref_dv = g.dv;
    f.mag_dq = g.mag_dq, f.mag_dk = g.mag_dk, f.mag_dv = g.mag_dv;
    if (any(g.dq_flags)) f.dq_flags = g.dq_flags;
    if (any(g.dk_flags)) f.dk_flags = g.dk_flags;
    if (any(g.dv_flags)) f.dv_flags = g.dv_flags;
    f.ref_dstate = g.dstate, f.mag_dstate = g.mag_dstate;
    if (any(g.dstate_flags)) f.dstate_flags = g.dstate_flags;
  }
  f.suite = meta.suite;
  f.case_name = meta.case_name;
  f.seed = meta.seed;
  f.generator_version = kGeneratorVersion;
  f.reference_bits = ref.bits;
  f.exact_tier = meta.exact_tier;
  return f;
}

Reference reference_of(const io::Fixture& f) {
  const BatchProblem& p = f.problem;
  Reference r;
  r.out = f.ref_out;
  r.den = f.ref_den;
  r.mag_num = f.mag_num;
  r.mag_den = f.mag_den;
  r.num = f.ref_num;
  r.mag_num_sd = f.mag_num_unmasked;
  r.mag_den_sd = f.mag_den_unmasked;
  complete_reference(p, r);  // version 1 files, and problems where format 2 stores neither
  r.flags = f.flags.empty() ? std::vector<uint8_t>(f.ref_out.size(), 0) : f.flags;
  r.den_flags = f.den_flags.empty() ? std::vector<uint8_t>(f.ref_den.size(), 0) : f.den_flags;
  r.bits = f.reference_bits;
  if (f.gradients) {
    GradientReference& g = r.grad.emplace();
    g.dout = f.dout, g.dden = f.dden;
    g.dq = f.ref_dq, g.dk = f.ref_dk, g.dv = f.ref_dv;
    g.mag_dq = f.mag_dq, g.mag_dk = f.mag_dk, g.mag_dv = f.mag_dv;
    auto flags = [](const std::vector<uint8_t>& x, size_t n) { return x.empty() ? std::vector<uint8_t>(n, 0) : x; };
    g.dq_flags = flags(f.dq_flags, g.dq.size()), g.dk_flags = flags(f.dk_flags, g.dk.size()), g.dv_flags = flags(f.dv_flags, g.dv.size());
    g.dstate = f.ref_dstate, g.mag_dstate = f.mag_dstate, g.dstate_flags = flags(f.dstate_flags, g.dstate.size());
    g.bits = f.reference_bits;
  }
  return r;
}

CandidateOutputs outputs_of(const io::Candidate& c) {
  CandidateOutputs o{c.out, c.den.value_or(std::vector<double>{}), c.out_dtype, c.den ? c.den_dtype : DType::f64};
  if (c.dq) o.dq = *c.dq, o.dq_dtype = c.dq_dtype;
  if (c.dk) o.dk = *c.dk, o.dk_dtype = c.dk_dtype;
  if (c.dv) o.dv = *c.dv, o.dv_dtype = c.dv_dtype;
  o.dstate = c.dstate, o.dstate_parts = c.dstate_parts, o.dstate_dtype = c.dstate_dtype;
  return o;
}

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
  return k;
}

Report check_fixture(const io::Fixture& f, const io::Candidate& c, CheckOptions opt) {
  if (opt.progress) verify_fixture(f, [&](double done, double total) { opt.progress("verifying", done, total); });
  else verify_fixture(f);
  opt.exact_tier = opt.exact_tier || f.exact_tier;
  return check(f.problem, reference_of(f), outputs_of(c), opt);
}

void dump_case(const std::filesystem::path& stem, const io::Fixture& f, const CandidateOutputs& c) {
  io::write_fixture(stem.string() + ".safetensors", f);
  io::write_candidate(stem.string() + ".candidate.safetensors", candidate_of(c), f);
}

}  // namespace hla::check
