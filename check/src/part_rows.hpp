// Scoring a state-shaped tensor part by part (gradient_check.cpp): the
// rows of a state's gradient (dstate.<part>) and of a final state
// (state.<part>, state_check.cpp), each part judged by rules 2 and 3.
#pragma once

#include "internal.hpp"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace hla::check {

using Bases = std::vector<std::pair<std::string, CandidateOutputs>>;

// What a row's elements are scored with.
struct Judge {
  const BatchProblem& p;
  const Report& r;
  const Bases& bases;
  bool exact_tier;
  double tiny;
  // A flat class (no flat backward order of ours): rule 3's bar is our nested
  // backward orders' worst times the class's path ratio (flat_path_ratio).
  double path_ratio = 1;
  // Rule 2's bound (gradients: K_g + 1; a final state: the outputs' K + 1),
  // its name in reasons, and where the rows go (Report::gradients, states).
  double bound = 0;
  const char* bound_name = "gradient bound";
  std::vector<GradientRow> Report::*rows = &Report::gradients;
  const char* ours_name = "backward forms";
};

// A tensor laid out as BatchProblem::state: the candidate's values and parts,
// the reference, the yardstick (magnitude), and our orders' values of it (a
// member of CandidateOutputs in Judge::bases). symmetric: judged along
// symmetric directions ((G + Gᵀ)/2 of the symmetric members: a state's
// gradient). no_rule3: the parts rule 3 does not judge (none of our orders
// is of the candidate's class there).
struct PartTensor {
  std::string prefix;
  const std::vector<double>& cand;
  const std::vector<std::string>& parts;
  DType dtype;
  const std::vector<double>& ref;
  const std::vector<double>& mag;
  std::vector<double> CandidateOutputs::*ours;
  bool symmetric = false;
  std::function<bool(const StatePart&)> no_rule3 = {};
};

// One row per part into r.*j.rows (its reasons and map into r); a required
// part the candidate lacks is appended to `missing`.
void part_rows(const Judge& j, const CheckOptions& opt, const PartTensor& x, Report& r, std::vector<std::string>& missing);

}  // namespace hla::check
