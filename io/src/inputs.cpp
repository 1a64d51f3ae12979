#include "hla/io/inputs.hpp"

#include "hla/backward.hpp"
#include "hla/io/printable.hpp"
#include "hla/io/state.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <tuple>

namespace hla::io {

OptionText::OptionText() {
  for (const OptionInfo& r : kOptions) (*this)[r.id] = r.default_text;
}

bool OptionText::set(const std::string& key, const std::string& value) {
  auto old_spelling = [](const std::string& old, std::string_view now) { warn_old_spelling(old + "=", std::string(now) + "="); };
  if (key == "unmasked") {  // masked=false's old spelling
    old_spelling(key, "masked");
    (*this)[Option::masked] = value == "true" ? "false" : value == "false" ? "true" : value;
    return true;
  }
  const OptionInfo* r = find_option(key);
  if (!r) return false;
  if (key != r->name) old_spelling(key, r->name);
  (*this)[r->id] = value;
  return true;
}

Options OptionText::options() const {
  Options o;
  for (const OptionInfo& r : kOptions) set_option(o, r, text[static_cast<size_t>(r.id)]);
  o.validate();
  return o;
}

Layout parse_layout(std::string_view s) {
  if (s == "bhtd") return Layout::bhtd;
  if (s == "bthd") return Layout::bthd;
  throw InputError("--layout '" + printable(std::string(s)) + "' is not bhtd ([B,H,T,D]) or bthd (FLA's [B,T,H,D])");
}

std::vector<int64_t> offsets_of(const Tensor& t, const std::string& name) {
  if (t.shape.size() != 1) throw InputError(name + " has shape " + shape_string(t.shape) + "; expected one dimension [m+1]");
  if (t.dtype == StDType::I64) return i64_values(t, name);
  if (t.dtype == StDType::I32) {
    std::vector<int64_t> out(t.bytes.size() / 4);
    for (size_t i = 0; i < out.size(); ++i) {
      uint32_t u = 0;
      for (int b = 3; b >= 0; --b) u = (u << 8) | static_cast<unsigned char>(t.bytes[4 * i + static_cast<size_t>(b)]);
      out[i] = static_cast<int32_t>(u);
    }
    return out;
  }
  throw InputError(name + " has dtype " + to_string(t.dtype) + "; expected I64 or I32");
}

namespace {

// [B, H, T, W] values of a [B, T, H, W] array (rows of W moved whole).
std::vector<double> bthd_to_bhtd(const std::vector<double>& x, Index batch, Index n, Index heads, Index width) {
  std::vector<double> y(x.size());
  for (Index b = 0; b < batch; ++b)
    for (Index tt = 0; tt < n; ++tt)
      for (Index h = 0; h < heads; ++h)
        if (width > 0)
          std::memcpy(&y[static_cast<size_t>(((b * heads + h) * n + tt) * width)],
                      &x[static_cast<size_t>(((b * n + tt) * heads + h) * width)], static_cast<size_t>(width) * sizeof(double));
  return y;
}

}  // namespace

BatchProblem problem_from_tensors(const std::map<std::string, Tensor>& tensors, const Options& opt, Layout layout,
                                  const std::string& source) {
  const bool fla = layout == Layout::bthd;
  const std::string src = "'" + printable(source) + "'";
  for (const auto& [name, t] : tensors) {
    if (name == "q" || name == "k" || name == "v" || name == "offsets" || name == "cu_seqlens" || name == "do" || name == "dden" ||
        is_initial_state_tensor(name))
      continue;
    if (name.find("state") != std::string::npos || name == "h0")
      throw InputError(src + " holds '" + printable(name) + "': an initial state goes in tensors named initial_state.<part> " +
                       "(docs/using.md \"Initial states\"; the parts of each variant's state are listed there)");
    throw InputError(src + " holds a tensor '" + printable(name) +
                     "'; expected q, k, v and optionally offsets or cu_seqlens, initial_state.<part>, and the upstream gradients do, dden");
  }
  for (const char* name : {"q", "k", "v"})
    if (!tensors.count(name)) throw InputError(src + " has no tensor '" + std::string(name) + "' (it needs q, k and v)");
  if (tensors.count("offsets") && tensors.count("cu_seqlens")) throw InputError(src + " holds both offsets and cu_seqlens; give one");
  const Tensor &q = tensors.at("q"), &k = tensors.at("k"), &v = tensors.at("v");
  const auto dq = float_dtype(q.dtype), dk = float_dtype(k.dtype), dv = float_dtype(v.dtype);
  for (const auto& [name, t, d] : {std::tuple{"q", &q, dq}, std::tuple{"k", &k, dk}, std::tuple{"v", &v, dv}}) {
    if (!d) throw InputError(std::string(name) + " has dtype " + to_string(t->dtype) + "; expected F64, F32, BF16 or F16");
    if (t->shape.size() != 4)
      throw InputError(std::string(name) + " has shape " + shape_string(t->shape) + "; expected 4 dimensions " +
                       (fla ? "[B,T,H,D] (--layout bthd)" : "[B,H,T,D] (or FLA's [B,T,H,D] with --layout bthd)"));
  }
  if (*dq != *dk || *dq != *dv)
    throw InputError("q, k and v must have one dtype; got " + to_string(q.dtype) + ", " + to_string(k.dtype) + ", " + to_string(v.dtype));
  // [B, H, T, D] dims of each, whatever the layout.
  auto dims = [&](const Tensor& t) {
    return fla ? std::array<int64_t, 4>{t.shape[0], t.shape[2], t.shape[1], t.shape[3]}
               : std::array<int64_t, 4>{t.shape[0], t.shape[1], t.shape[2], t.shape[3]};
  };
  const auto sq = dims(q), sk = dims(k), sv = dims(v);
  const std::string lay = fla ? "[B,T,H,D]" : "[B,H,T,D]";
  if (sk[0] != sq[0] || sv[0] != sq[0]) throw InputError("q, k, v disagree on the batch size B (layout " + lay + ")");
  if (sk[2] != sq[2] || sv[2] != sq[2]) throw InputError("q, k, v disagree on the number of tokens T (layout " + lay + ")");
  if (sk[3] != sq[3]) throw InputError("q and k disagree on the head dimension D (layout " + lay + ")");
  if (sk[1] != sv[1]) throw InputError("k and v disagree on the number of K/V heads (layout " + lay + ")");
  BatchProblem p;
  p.opt = opt;
  p.dtype = *dq;
  p.batch = sq[0], p.heads = sq[1], p.kv_heads = sk[1], p.n = sq[2], p.d = sq[3], p.dv = sv[3];
  if (p.heads < 1 || p.kv_heads < 1 || p.heads % p.kv_heads != 0)
    throw InputError("q has " + std::to_string(p.heads) + " heads and k, v " + std::to_string(p.kv_heads) +
                     ": the query heads must be a positive multiple of the K/V heads");
  auto load = [&](const Tensor& t, const char* name, Index heads, Index width) {
    std::vector<double> x = float_values(t, name);
    return fla ? bthd_to_bhtd(x, p.batch, p.n, heads, width) : x;
  };
  p.q = load(q, "q", p.heads, p.d);
  p.k = load(k, "k", p.kv_heads, p.d);
  p.v = load(v, "v", p.kv_heads, p.dv);
  for (const char* name : {"offsets", "cu_seqlens"})
    if (tensors.count(name)) p.offsets = offsets_of(tensors.at(name), name);
  p.validate(/*allow_nonfinite=*/true);  // the dims and offsets the state's shape follows
  read_state(tensors, p, source);
  if (p.has_state()) p.validate(/*allow_nonfinite=*/true);
  return p;
}

std::vector<double> head_values(const Tensor& t, const std::string& name, const BatchProblem& p, Layout layout, Index heads,
                                Index width, const std::string& dims) {
  const bool fla = layout == Layout::bthd;
  std::vector<int64_t> want = fla ? std::vector<int64_t>{p.batch, p.n, heads} : std::vector<int64_t>{p.batch, heads, p.n};
  if (width > 0) want.push_back(width);
  if (!float_dtype(t.dtype)) throw InputError(name + " has dtype " + to_string(t.dtype) + "; expected F64, F32, BF16 or F16");
  if (t.shape != want) {
    std::vector<int64_t> other = want;  // the same tensor in the other layout
    std::swap(other[1], other[2]);
    const std::string in = fla ? "[B,T,H" : "[B,H,T", out = fla ? "[B,H,T" : "[B,T,H", w = width > 0 ? "," + dims + "]" : "]";
    throw InputError(name + " has shape " + shape_string(t.shape) + "; expected " + shape_string(want) + " (" + in + w + ")" +
                     (t.shape == other && other != want ? ": that is the " + out + w + " layout, but the inputs are read as " + in +
                                                              ",D] (layout " + (fla ? "bthd" : "bhtd") + "); every tensor must be in one layout"
                                                        : ""));
  }
  std::vector<double> x = float_values(t, name);
  return fla ? bthd_to_bhtd(x, p.batch, p.n, heads, width > 0 ? width : 1) : x;
}

std::vector<double> output_values(const Tensor& t, const std::string& name, const BatchProblem& p, Layout layout, bool den) {
  return head_values(t, name, p, layout, p.heads, den ? 0 : p.dv, "dv");
}

namespace {

std::string shortest(double x) {  // the shortest text that reads back as x
  char buf[40];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);
}

// "name[b, h, t, c]" of element i of [B,heads,n,width] values (width 0: no c),
// in the order of the tensor as given (layout).
std::string element_name(const std::string& name, size_t i, const BatchProblem& p, Layout layout, Index heads, Index width) {
  const auto w = static_cast<size_t>(std::max<Index>(width, 1)), n = static_cast<size_t>(p.n), hs = static_cast<size_t>(heads);
  const size_t c = i % w, t = i / w % n, h = i / w / n % hs, b = i / w / n / hs;
  const auto [x1, x2] = layout == Layout::bthd ? std::pair{t, h} : std::pair{h, t};
  return name + "[" + std::to_string(b) + ", " + std::to_string(x1) + ", " + std::to_string(x2) +
         (width > 0 ? ", " + std::to_string(c) : "") + "]";
}

// One upstream tensor's [B,H,n,width] values, each finite and a value of p.dtype.
std::vector<double> upstream_values(const Tensor& t, const std::string& name, const BatchProblem& p, Layout layout, Index width) {
  std::vector<double> x = head_values(t, name, p, layout, p.heads, width, "dv");
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]))
      throw InputError(element_name(name, i, p, layout, p.heads, width) + " = " + shortest(x[i]) +
                       " is not finite: a reference gradient needs finite upstream (a NaN upstream is for hla fuzz's "
                       "grad_nan_causality probe, which judges where it may reach, and has no reference to store)");
    if (!representable(p.dtype, x[i]))
      throw InputError(element_name(name, i, p, layout, p.heads, width) + " = " + shortest(x[i]) + " (" + to_string(t.dtype) +
                       ") is not representable in " + to_string(p.dtype) + ", the inputs' dtype: the upstream may come in any float dtype, "
                       "but its values must be the inputs' dtype's (the reference differentiates for them and the fixture stores them "
                       "so); round " + name + " to " + to_string(p.dtype));
  }
  return x;
}

}  // namespace

std::optional<Upstream> upstream_from_tensors(const std::map<std::string, Tensor>& tensors, const BatchProblem& p, Layout layout,
                                              const std::string& source) {
  const bool has_do = tensors.count("do") > 0, has_dden = tensors.count("dden") > 0;
  const std::string src = "'" + printable(source) + "'";
  if (has_dden && !has_do)
    throw InputError(src + " holds dden but no do: dden is the upstream of den next to do, the upstream of the output (L = Σ⟨do, o⟩ + "
                     "Σ dden·den); give do too (zeros where the loss does not read o)");
  if (!has_do) return std::nullopt;
  if (!has_backward(p.opt.variant))
    throw InputError(src + " holds the upstream do, but variant " + to_string(p.opt.variant) + " has no backward form (SPEC §9)");
  try {
    p.validate(/*allow_nonfinite=*/false);
  } catch (const InputError& e) {
    throw InputError(std::string("gradients (do given) need finite inputs: ") + e.what());
  }
  Upstream u;
  u.dout = upstream_values(tensors.at("do"), "do", p, layout, p.dv);
  if (has_dden) u.dden = upstream_values(tensors.at("dden"), "dden", p, layout, 0);
  return u;
}

}  // namespace hla::io
