// The verdict on a candidate's final state (SPEC §8; check.hpp
// Report::states) and the proof of a fixture's stored one (verify_fixture).
// Each part is scored as the outputs are: |candidate − reference| / (u·M), M
// the part's magnitude in the candidate's class (the state-difference one for
// F and f of masked hla2 and hla3), rule 2's bound the outputs' K + 1 (a
// state entry is a nested sum no deeper than an output's), rule 3 against our
// own orders' final states in the candidate's precision.
#include "part_rows.hpp"

namespace hla::check {

void check_final_state(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, Report& r) {
  if (cand.final_state_parts.empty()) return;
  const engine::StateReference& s = ref.final_state;
  if (s.values.empty())
    throw InputError("the candidate returns a final state (state.<part>), but the reference carries none" +
                     std::string(has_state(p.opt.variant) ? " (a fixture written before final states were judged: regenerate it)"
                                                          : ": " + to_string(p.opt.variant) + " has no streaming state"));
  if (cand.final_state.size() != s.values.size())
    throw InputError("candidate final state holds " + std::to_string(cand.final_state.size()) + " values, expected " +
                     std::to_string(s.values.size()));
  const bool sd = opt.form_class == FormClass::state_difference && engine::has_state_difference_magnitude(p.opt);
  // Our orders, as CandidateOutputs holding only a final state (the Judge's bases).
  Bases bases;
  for (auto& [name, x] : engine::state_baselines(p, r.precision, opt.form_class)) {
    CandidateOutputs o;
    o.final_state = std::move(x);
    bases.emplace_back(name, std::move(o));
  }
  // Where the class changes the magnitude (F, f) rule 3 needs a subtracting order of ours.
  const bool subtracting = std::any_of(bases.begin(), bases.end(), [](const auto& b) { return b.first.rfind("paper state", 0) == 0; });
  // No exact tier: its inputs keep the outputs' magnitudes below 2^24, not the state's. A flat
  // class: no flat order of ours for a state, so our nested orders' worst times the class's path
  // ratio sets rule 3's bar, as for gradients (a state entry is a sum no deeper than an output).
  const double path_ratio = engine::flat_path_ratio(p.opt, longest_sequence(p), p.d, opt.form_class);
  Judge j{p, r, bases, false, info(r.precision).smallest_normal(), path_ratio, r.bound, "bound", &Report::states, "orders"};
  std::vector<std::string> missing;
  PartTensor x{"state.", cand.final_state,      cand.final_state_parts,        cand.final_state_dtype,
               s.values, sd ? s.mag_sd : s.mag, &CandidateOutputs::final_state};
  if (sd && !subtracting) x.no_rule3 = [](const StatePart& m) { return m.name == "F"; };
  // Flagged entries (not certified) are judged as the outputs' are: the reference's own bound is far below u·M.
  part_rows(j, opt, x, r, missing);
  if (!missing.empty())
    throw InputError("the candidate's final state lacks " + join(missing, ", ", ", ") +
                     " (a final state gives every part its variant needs)");
}

void verify_final_state(const io::Fixture& f, const std::function<void(const std::string&, const std::string&)>& add) {
  if (f.final_state.empty()) return;
  const BatchProblem& p = f.problem;
  const engine::StateCheck ours = engine::double_final_state(p);
  for (size_t i = 0; i < f.final_state_flags.size(); ++i)
    if (f.final_state_flags[i] & io::kFlagIllConditioned)
      add("state_flags", "state_flags[" + std::to_string(i) + "] says ill-conditioned, which only a normalized output can be");
  for (size_t i = 0; i < ours.values.size(); ++i) {
    auto compare = [&](const char* tensor, double stored, double x, double tol) {
      const bool same =
          std::isfinite(stored) && std::isfinite(x) ? std::fabs(stored - x) <= tol : !std::isfinite(stored) && !std::isfinite(x);
      if (!same)
        add(tensor, std::string(tensor) + "[" + std::to_string(i) + "] = " + num(stored) + ", but the inputs give " + num(x) +
                        " (allowed difference " + num(tol) + ")");
    };
    compare("state", f.final_state[i], ours.values[i], ours.tol[i]);
    compare("mag_state", f.mag_final_state[i], ours.mag[i], ours.tol[i]);
  }
}

}  // namespace hla::check
