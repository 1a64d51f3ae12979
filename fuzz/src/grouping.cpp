// Findings grouped by cause (campaign.hpp Group): the signature is the kind
// and the cause — the differential diagnosis of the failing check when it
// names a known mistake, otherwise its error profile (the failing parts and
// the kinds of hint: periodic, growing, at sequence starts, in some heads) —
// never the dtype, the options, the rules failed or the head count, through
// which one bug shows in many ways. Examples keep a group's variety: a finding
// whose variety (rules, tensor, what its case needs) its group's examples
// already show takes no more than all slots but one.
#include "hla/fuzz/campaign.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace hla::fuzz {
namespace {

// A hint's kind: its part and its text up to the first colon, digits as '#'
// ("out: periodic at width #").
std::string hint_kind(const std::string& h) {
  const size_t part = h.find(": ");
  const size_t end = h.find(':', part == std::string::npos ? 0 : part + 2);
  std::string k = h.substr(0, end);
  std::string out;
  for (char c : k)
    if (!std::isdigit(static_cast<unsigned char>(c))) out += c;
    else if (out.empty() || out.back() != '#') out += '#';
  return out;
}

std::string variety(const Finding& f) { return f.rules + "|" + f.tensor + "|" + f.needs; }

}  // namespace

std::string cause_of(const check::Report& r) {
  if (!r.diagnosis.empty()) return "matches " + r.diagnosis.front().id;
  std::string parts;
  for (const check::ScoreMap& m : r.maps)
    if (m.fails) parts += (parts.empty() ? "" : ",") + m.name;
  std::set<std::string> kinds;
  for (const std::string& h : r.hints) kinds.insert(hint_kind(h));
  std::string s = "profile " + (parts.empty() ? std::string("-") : parts);
  for (const std::string& k : kinds) s += "; " + k;
  return s;
}

std::string Group::signature() const { return kind + "|" + cause; }

size_t group_finding(std::vector<Group>& groups, Finding& f) {
  Group key{f.kind, f.rules, f.tensor, f.needs, "", 0, {}};
  key.cause = f.cause;
  size_t g = 0;
  while (g < groups.size() && groups[g].signature() != key.signature()) ++g;
  if (g == groups.size()) {
    key.dir = f.kind + "-" + std::to_string(g);
    groups.push_back(std::move(key));
  }
  return f.group = g;
}

bool takes_example(const Group& g, const std::vector<Finding>& findings, const Finding& f, size_t limit) {
  if (g.examples.size() >= limit) return false;
  const bool seen = std::any_of(g.examples.begin(), g.examples.end(), [&](size_t e) { return variety(findings.at(e)) == variety(f); });
  return !seen || g.examples.size() + 1 < limit;
}

void add_causes(const Summary& s, nlohmann::json& j) {
  for (size_t i = 0; i < s.findings.size(); ++i) j["findings"][i]["cause"] = s.findings[i].cause;
  for (size_t i = 0; i < s.groups.size(); ++i) j["groups"][i]["cause"] = s.groups[i].cause;
}

}  // namespace hla::fuzz
