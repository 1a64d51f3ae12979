// The HLA_FEAT_* bits of include/hla_impl.h by name, and the features a
// problem needs: one table for `hla fuzz --features`, `hla select` and the
// shrinker's report of what a finding still needs.
#pragma once

#include "hla/batch.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace hla::fuzz {

std::vector<std::string> split_list(const std::string& s);  // "a,b,,c" -> {a, b, c}
// "unmasked,normalize,…" or "all"; throws InputError naming an unknown feature.
uint32_t parse_features(const std::string& s);
std::string feature_names(uint32_t features);  // "decay, normalize" ("none" for 0)
// The features a candidate must support to run p (den and state excepted).
uint32_t required_features(const BatchProblem& p);

}  // namespace hla::fuzz
