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

// Calls f(index in the state layout, index into the part's [N, H, rows(, cols)] tensor) for every entry of slot s.
template <class F> void for_each_entry(const BatchProblem& p, const Slot& s, F&& f) {
  size_t k = 0;
  const Index cols = state_layout(p.opt, p.d, p.dv)[s.member].cols;
  p.for_each_state_entry([&](Index, Index, size_t i, Index, Index c, size_t at) {
    if (i == s.member && (c == cols) == s.ones) f(at, k++);
  });
}

}  // namespace

StateParts read_state_parts(const std::map<std::string, Tensor>& tensors, const BatchProblem& p, std::string_view prefix,
                            const std::string& source, bool required, PartKind kind) {
  const std::string src = "'" + printable(source) + "'", pre(prefix);
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : tensors)
    if (has_prefix(name, prefix)) given[name.substr(prefix.size())] = &t;
  StateParts out;
  if (given.empty()) return out;
  const std::string what = pre == kInitialStatePrefix ? "an initial state" : "'" + pre + "*' tensors";
  if (!has_state(p.opt.variant)) throw InputError(src + " holds " + what + ", but " + to_string(p.opt.variant) + " has no streaming state");
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  std::string names;
  for (const StatePart& part : layout)
    if (part.role != StatePart::Role::unused) names += " " + pre + part.name + (part.ones.empty() ? "" : " " + pre + part.ones);
  std::optional<DType> dtype;
  for (const auto& [name, t] : given) {
    const auto s = slot_of(layout, name);
    if (!s || layout[s->member].role == StatePart::Role::unused)
      throw InputError(src + " holds '" + pre + printable(name) + "', which is not part of the " + p.opt.describe() +
                       " state; its parts are" + names);
    if (kind == PartKind::flags) {
      if (t->dtype != StDType::U8) throw InputError(pre + printable(name) + " has dtype " + to_string(t->dtype) + "; expected U8");
    } else {
      const auto d = float_dtype(t->dtype);
      if (!d) throw InputError(pre + printable(name) + " has dtype " + to_string(t->dtype) + "; expected F64, F32, BF16 or F16");
      if (dtype && *dtype != *d) throw InputError("the " + pre + "* tensors must have one dtype; got " + to_string(*dtype) + " and " + to_string(*d));
      dtype = d;
    }
    const auto want = shape_of(p, layout[s->member], s->ones);
    if (t->shape != want)
      throw InputError(pre + printable(name) + " has shape " + shape_string(t->shape) + "; expected " + shape_string(want) +
                       (s->ones ? " [N, H, d]" : " [N, H, rows, cols]") + " for " + std::to_string(p.sequence_count()) +
                       " sequences and " + std::to_string(p.heads) + " query heads");
  }
  if (required)
    for (const StatePart& part : layout) {
      if (part.role != StatePart::Role::required) continue;
      for (const std::string& name : {part.name, part.ones})
        if (!name.empty() && !given.count(name))
          throw InputError(src + " holds " + what + " without '" +
                           pre + name + "'; the " + p.opt.describe() + " state needs" + names);
    }
  if (dtype) out.dtype = *dtype;
  out.values.assign(static_cast<size_t>(p.sequence_count() * p.heads * state_size(layout)), 0);
  for (const StatePart& part : layout)
    for (const std::string& name : {part.name, part.ones}) {
      const auto it = name.empty() ? given.end() : given.find(name);
      if (it == given.end()) continue;
      out.given.push_back(name);
      std::vector<double> x;
      if (kind == PartKind::flags)
        for (uint8_t b : u8_values(*it->second, pre + name)) x.push_back(b);
      else
        x = float_values(*it->second, pre + name);
      for_each_entry(p, *slot_of(layout, name), [&](size_t to, size_t from) { out.values[to] = x[from]; });
    }
  return out;
}

std::map<std::string, Tensor> state_part_tensors(const BatchProblem& p, const std::vector<double>& values, std::string_view prefix,
                                                 DType dtype, PartKind kind) {
  std::map<std::string, Tensor> out;
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  for (size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].role == StatePart::Role::unused) continue;
    for (const bool ones : {false, true}) {
      if (ones && layout[i].ones.empty()) continue;
      const auto shape = shape_of(p, layout[i], ones);
      std::vector<double> x(static_cast<size_t>(p.sequence_count() * p.heads * layout[i].rows * (ones ? 1 : layout[i].cols)));
      for_each_entry(p, Slot{i, ones}, [&](size_t from, size_t to) { x[to] = values[from]; });
      const std::string name = std::string(prefix) + (ones ? layout[i].ones : layout[i].name);
      out.emplace(name, kind == PartKind::flags ? u8_tensor(shape, std::vector<uint8_t>(x.begin(), x.end()))
                                                : float_tensor(dtype, shape, x, name));
    }
  }
  return out;
}

void read_state(const std::map<std::string, Tensor>& tensors, BatchProblem& p, const std::string& source) {
  StateParts s = read_state_parts(tensors, p, kInitialStatePrefix, source, true);
  p.state = std::move(s.values);
  if (!s.given.empty()) p.state_dtype = s.dtype;
}

std::map<std::string, Tensor> state_tensors(const BatchProblem& p) {
  if (!p.has_state()) return {};
  return state_part_tensors(p, p.state, kInitialStatePrefix, p.state_dtype);
}

}  // namespace hla::io
