#include "hla/io/state.hpp"

#include "hla/io/printable.hpp"

#include <optional>

namespace hla::io {

namespace {

// Where part `name` lives in the layout: member index and column (the ones column: width − 1).
struct Slot {
  size_t member;
  bool ones;
};
std::optional<Slot> slot_of(const std::vector<StatePart>& layout, const std::string& name) {
  for (size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].name == name) return Slot{i, false};
    if (!layout[i].ones.empty() && layout[i].ones == name) return Slot{i, true};
  }
  return std::nullopt;
}

std::vector<int64_t> shape_of(const BatchProblem& p, const StatePart& part, bool ones) {
  std::vector<int64_t> s{p.sequence_count(), p.heads, part.rows};
  if (!ones) s.push_back(part.cols);
  return s;
}

// Calls f(index into p.state, index into the part's [N, H, rows(, cols)] tensor) for every entry.
template <class F> void for_each_entry(const BatchProblem& p, const Slot& s, F&& f) {
  size_t k = 0;
  for (Index seq = 0; seq < p.sequence_count(); ++seq)
    for (Index h = 0; h < p.heads; ++h) {
      const BatchProblem::StateView X = p.state_view(seq, h);
      const StatePart& part = X.layout[s.member];
      for (Index r = 0; r < part.rows; ++r)
        for (Index c = 0; c < (s.ones ? 1 : part.cols); ++c)
          f(X.start[s.member] + static_cast<size_t>(r * part.width() + (s.ones ? part.cols : c)), k++);
    }
}

}  // namespace

void read_state(const std::map<std::string, Tensor>& tensors, BatchProblem& p, const std::string& source) {
  const std::string src = "'" + printable(source) + "'";
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : tensors)
    if (is_initial_state_tensor(name)) given[name.substr(kInitialStatePrefix.size())] = &t;
  p.state.clear();
  if (given.empty()) return;
  if (!has_state(p.opt.variant))
    throw InputError(src + " holds an initial state, but " + to_string(p.opt.variant) + " has no streaming state");
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  std::string names;
  for (const StatePart& part : layout)
    if (part.role != StatePart::Role::unused) names += " initial_state." + part.name + (part.ones.empty() ? "" : " initial_state." + part.ones);
  std::optional<DType> dtype;
  for (const auto& [name, t] : given) {
    const auto s = slot_of(layout, name);
    if (!s || layout[s->member].role == StatePart::Role::unused)
      throw InputError(src + " holds 'initial_state." + printable(name) + "', which is not part of the " + p.opt.describe() +
                       " state; its parts are" + names);
    const auto d = float_dtype(t->dtype);
    if (!d) throw InputError("initial_state." + printable(name) + " has dtype " + to_string(t->dtype) + "; expected F64, F32, BF16 or F16");
    if (dtype && *dtype != *d) throw InputError("the initial_state.* tensors must have one dtype; got " + to_string(*dtype) + " and " + to_string(*d));
    dtype = d;
    const auto want = shape_of(p, layout[s->member], s->ones);
    if (t->shape != want)
      throw InputError("initial_state." + printable(name) + " has shape " + shape_string(t->shape) + "; expected " + shape_string(want) +
                       (s->ones ? " [N, H, d]" : " [N, H, rows, cols]") + " for " + std::to_string(p.sequence_count()) +
                       " sequences and " + std::to_string(p.heads) + " query heads");
  }
  for (const StatePart& part : layout) {
    if (part.role != StatePart::Role::required) continue;
    for (const std::string& name : {part.name, part.ones})
      if (!name.empty() && !given.count(name))
        throw InputError(src + " holds an initial state without 'initial_state." + name + "'; the " + p.opt.describe() +
                         " state needs" + names);
  }
  p.state_dtype = *dtype;
  p.state.assign(static_cast<size_t>(p.sequence_count() * p.heads * state_size(layout)), 0);
  for (const auto& [name, t] : given) {
    const auto s = *slot_of(layout, name);
    const std::vector<double> x = float_values(*t, "initial_state." + name);
    for_each_entry(p, s, [&](size_t to, size_t from) { p.state[to] = x[from]; });
  }
}

std::map<std::string, Tensor> state_tensors(const BatchProblem& p) {
  std::map<std::string, Tensor> out;
  if (!p.has_state()) return out;
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  for (size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].role == StatePart::Role::unused) continue;
    for (const bool ones : {false, true}) {
      if (ones && layout[i].ones.empty()) continue;
      const Slot s{i, ones};
      const auto shape = shape_of(p, layout[i], ones);
      std::vector<double> x(static_cast<size_t>(p.sequence_count() * p.heads * layout[i].rows * (ones ? 1 : layout[i].cols)));
      for_each_entry(p, s, [&](size_t from, size_t to) { x[to] = p.state[from]; });
      const std::string name = std::string(kInitialStatePrefix) + (ones ? layout[i].ones : layout[i].name);
      out.emplace(name, float_tensor(p.state_dtype, shape, x, name));
    }
  }
  return out;
}

}  // namespace hla::io
