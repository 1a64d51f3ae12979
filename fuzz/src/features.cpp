#include "hla/fuzz/features.hpp"

#include "hla_impl.h"

#include <algorithm>
#include <sstream>

namespace hla::fuzz {
namespace {

const std::vector<std::pair<std::string, uint32_t>>& names() {
  static const std::vector<std::pair<std::string, uint32_t>> n{
      {"unmasked", HLA_FEAT_UNMASKED}, {"normalize", HLA_FEAT_NORMALIZE}, {"clamp", HLA_FEAT_CLAMP},
      {"decay", HLA_FEAT_DECAY},       {"ridge", HLA_FEAT_RIDGE},         {"scale", HLA_FEAT_SCALE},
      {"gqa", HLA_FEAT_GQA},           {"varlen", HLA_FEAT_VARLEN},       {"state", HLA_FEAT_STATE},
      {"den", HLA_FEAT_DEN},           {"backward", HLA_FEAT_BACKWARD}};
  return n;
}

}  // namespace

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

uint32_t parse_features(const std::string& s) {
  uint32_t f = 0;
  for (const auto& x : split_list(s)) {
    if (x == "all") {
      for (const auto& [n, b] : names())
        if (b != HLA_FEAT_STATE && b != HLA_FEAT_BACKWARD) f |= b;  // state only when named: it changes the exec protocol
      continue;
    }
    auto it = std::find_if(names().begin(), names().end(), [&](const auto& p) { return p.first == x; });
    if (it == names().end())
      throw InputError("unknown feature '" + x + "' (expected unmasked, normalize, clamp, decay, ridge, scale, gqa, varlen, den, state, backward or all)");
    f |= it->second;
  }
  return f;
}

std::string feature_names(uint32_t features) {
  std::string s;
  for (const auto& [n, b] : names())
    if (features & b) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

uint32_t required_features(const BatchProblem& p) {
  const Options& o = p.opt;
  uint32_t f = 0;
  if (!o.masked) f |= HLA_FEAT_UNMASKED;
  if (o.normalize) f |= o.eps_mode == EpsMode::add ? HLA_FEAT_NORMALIZE : HLA_FEAT_CLAMP;
  if (o.gamma != 1) f |= HLA_FEAT_DECAY;
  if (o.lambda != 0) f |= HLA_FEAT_RIDGE;
  if (o.scale != 1) f |= HLA_FEAT_SCALE;
  if (p.kv_heads < p.heads) f |= HLA_FEAT_GQA;
  if (!p.offsets.empty()) f |= HLA_FEAT_VARLEN;
  return f;
}

}  // namespace hla::fuzz
