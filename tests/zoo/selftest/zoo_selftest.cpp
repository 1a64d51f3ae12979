// zoo_selftest — the bug zoo's own sanity test, not the fuzzer's.
//
//   zoo_selftest ZOO_JSON ZOO_PATHS_JSON
//
// Runs every C ABI member of the zoo (dlopen, in a forked child: crashes and
// hangs are outcomes) on hand-made problems (n = 37 across chunk boundaries,
// γ = 7/8, d = 8, …) and compares its outputs with the reference
// (hla::evaluate, naive form, in double) within a loose tolerance relative to
// the SPEC §7 magnitude. Asserts that
//   - correct members match on every problem, and declare what is needed to run it
//     (a member declaring form_class STATE_DIFFERENCE is held to the unmasked
//     magnitude, which its subtraction of partial sums errs against);
//   - each buggy member shows its bug (differs / leaks a NaN into earlier
//     outputs / crashes / hangs) on every problem designed to expose it, and
//     matches on problems where its bug cannot show;
//   - the table below, zoo.json and zoo_paths.json name the same members, and
//     each library declares the form_class zoo.json gives it (default masked);
//   - the zoo's F16/BF16 bit conversions agree with the compiler's and Eigen's.
// The reference library is used here only, never by a zoo member.

#include "hla/batch.hpp"
#include "hla/evaluate.hpp"
#include "hla_impl.h"
#include "ref_half.hpp"
#include "zoo_bits.hpp"

#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <new>
#include <vector>

namespace {

using hla::Index;
using hla::Rational;

// Loose for float: the correct members err by ~2e-7 x magnitude on these problems, half-precision
// accumulation by ~2e-4 x magnitude.
constexpr double kRtol = 1e-5;
// The problems take milliseconds: only `hang` should reach the timeout. Where a
// timeout is the expected outcome it is short (the wait is the whole cost).
constexpr int kTimeoutS = 5, kExpectedTimeoutS = 1;

// ---------------------------------------------------------------------------
// Problems and their reference outputs.

struct Case {
  std::string name;
  hla::BatchProblem bp;
  Index split = 0;  // > 0: run as [0, split) with state_out, then [split, n) with it as state_in
  std::vector<double> ref_out, ref_den, tol_out, tol_den;  // [B][H][n][dv], [B][H][n]
  std::vector<double> tol_out_sd, tol_den_sd;  // the same against the unmasked magnitude (state_difference)
};

double unit_roundoff(hla::DType t) {
  switch (t) {
    case hla::DType::f64: return 0;  // the candidate's f32 error dominates
    case hla::DType::f32: return 0x1p-24;
    case hla::DType::bf16: return 0x1p-8;
    case hla::DType::f16: return 0x1p-11;
  }
  return 0;
}

hla::BatchProblem problem(hla::Variant v, Index n) {
  hla::BatchProblem bp;
  bp.opt.variant = v;
  bp.opt.gamma = Rational(7, 8);
  bp.dtype = hla::DType::f32;
  bp.batch = 1, bp.heads = 2, bp.kv_heads = 1, bp.n = n, bp.d = 8, bp.dv = 8;
  return bp;
}

// Uniform values in [-1, 1), rounded to the dtype; optionally NaN at one token.
void fill(hla::BatchProblem& bp, uint64_t seed, Index nan_token = -1) {
  std::mt19937_64 rng(seed);
  auto draw = [&](std::vector<double>& x, size_t size) {
    x.resize(size);
    for (auto& e : x) e = hla::round_to(bp.dtype, static_cast<double>(rng() >> 11) * 0x1p-52 - 1.0);
  };
  const auto B = static_cast<size_t>(bp.batch), n = static_cast<size_t>(bp.n);
  draw(bp.q, B * bp.heads * n * bp.d);
  draw(bp.k, B * bp.kv_heads * n * bp.d);
  draw(bp.v, B * bp.kv_heads * n * bp.dv);
  if (nan_token >= 0) {
    for (Index b = 0; b < bp.batch; ++b)
      for (Index h = 0; h < bp.heads; ++h) {
        for (Index c = 0; c < bp.d; ++c) bp.q[bp.q_index(b, h, nan_token, c)] = NAN;
        for (Index c = 0; c < bp.d; ++c) bp.k[bp.k_index(b, h, nan_token, c)] = NAN;
        for (Index c = 0; c < bp.dv; ++c) bp.v[bp.v_index(b, h, nan_token, c)] = NAN;
      }
  }
}

// Reference outputs and per-element tolerances: kRtol x the SPEC §7 magnitude
// (normalized: first-order propagation through num / D), plus the rounding of
// the output to its dtype.
void reference(Case& c) {
  const auto& bp = c.bp;
  const auto size_out = static_cast<size_t>(bp.batch * bp.heads * bp.n * bp.dv);
  c.ref_out.assign(size_out, 0), c.tol_out.assign(size_out, 0);
  c.ref_den.assign(size_out / bp.dv, 0), c.tol_den.assign(size_out / bp.dv, 0);
  c.tol_out_sd.assign(size_out, 0), c.tol_den_sd.assign(size_out / bp.dv, 0);
  const double eps = hla::to_double(bp.opt.eps), u = unit_roundoff(bp.dtype);
  for (Index b = 0; b < bp.batch; ++b)
    for (Index h = 0; h < bp.heads; ++h)
      for (auto [t0, t1] : bp.sequences()) {
        const auto p = bp.head<double>(b, h, t0, t1);
        const auto r = hla::evaluate(p, hla::Form::naive);
        const auto m = hla::magnitude(p), mu = hla::magnitude(p, /*unmasked_order=*/true);
        for (Index t = 0; t < t1 - t0; ++t) {
          const size_t id = static_cast<size_t>((b * bp.heads + h) * bp.n + t0 + t);
          const double den = r.den(t);
          c.ref_den[id] = den, c.tol_den[id] = kRtol * m.den(t), c.tol_den_sd[id] = kRtol * mu.den(t);
          double D = 1;
          if (bp.opt.normalize)
            D = bp.opt.eps_mode == hla::EpsMode::add ? den + eps : (den < 0 ? -1 : 1) * std::max(std::abs(den), eps);
          for (Index x = 0; x < bp.dv; ++x) {
            const size_t io = id * static_cast<size_t>(bp.dv) + static_cast<size_t>(x);
            const double out = r.out(t, x);
            auto tol = [&](const hla::Output<double>& mag) {
              return (bp.opt.normalize ? kRtol * (mag.num(t, x) + std::abs(out) * mag.den(t)) / std::abs(D)
                                       : kRtol * mag.num(t, x)) +
                     2 * u * std::abs(out) + 1e-300;
            };
            c.ref_out[io] = out;
            c.tol_out[io] = tol(m), c.tol_out_sd[io] = tol(mu);
          }
        }
      }
}

Case make(std::string name, hla::BatchProblem bp, uint64_t seed, Index nan_token = -1, Index split = 0) {
  Case c{std::move(name), std::move(bp), split, {}, {}, {}, {}, {}, {}};
  fill(c.bp, seed, nan_token);
  if (nan_token < 0) c.bp.validate();
  reference(c);
  return c;
}

std::vector<Case> cases() {
  using V = hla::Variant;
  std::vector<Case> cs;
  uint64_t seed = 20261129;
  auto add = [&](std::string name, hla::BatchProblem bp, Index nan_token = -1, Index split = 0) {
    cs.push_back(make(std::move(name), std::move(bp), seed++, nan_token, split));
  };
  {
    auto bp = problem(V::hla2, 16);  // no decay, one full chunk, one head: where most bugs cannot show
    bp.opt.gamma = 1, bp.heads = 1;
    add("hla2_g1_n16", bp);
  }
  add("hla2_n20", problem(V::hla2, 20));
  add("hla2_n37", problem(V::hla2, 37));
  add("hla2_n64", problem(V::hla2, 64));
  add("la1_n37", problem(V::la1, 37));
  add("ahla_n37", problem(V::ahla, 37));
  {
    auto bp = problem(V::hla2, 37);
    bp.opt.masked = false;
    add("hla2_unmasked_n37", bp);
    bp.opt.lambda = Rational(1, 4);
    add("hla2_unmasked_ridge_n37", bp);
  }
  {
    auto bp = problem(V::hla2, 37);
    bp.opt.lambda = Rational(1, 4), bp.opt.normalize = true;
    add("hla2_ridge_add_n37", bp);
    bp.opt.eps_mode = hla::EpsMode::clamp;
    add("hla2_ridge_clamp_n37", bp);
  }
  {
    auto bp = problem(V::hla3, 37);
    bp.d = 4, bp.dv = 4;
    add("hla3_n37", bp);
    bp.opt.masked = false, bp.n = 20;
    add("hla3_unmasked_n20", bp);
  }
  {
    auto bp = problem(V::hla2, 37);
    bp.opt.scale = Rational(7, 8);
    add("hla2_scale_n37", bp);
  }
  {
    auto bp = problem(V::la1, 37);
    bp.opt.normalize = true, bp.opt.eps_mode = hla::EpsMode::clamp;
    add("la1_clamp_n37", bp);
    bp.opt.variant = V::ahla;
    add("ahla_clamp_n37", bp);
  }
  {
    auto bp = problem(V::hla2, 37);
    bp.batch = 2, bp.heads = 4, bp.kv_heads = 2;
    add("hla2_gqa_n37", bp);
  }
  {
    auto bp = problem(V::hla2, 37);
    bp.offsets = {0, 10, 25, 37};
    add("hla2_varlen_n37", bp);
    bp.opt.variant = V::ahla, bp.n = 40, bp.kv_heads = 2, bp.offsets = {0, 17, 18, 40};
    add("ahla_varlen_n40", bp);
  }
  add("hla2_state_n37", problem(V::hla2, 37), -1, 20);
  add("ahla_state_n37", problem(V::ahla, 37), -1, 20);
  add("la1_state_n37", problem(V::la1, 37), -1, 20);
  for (auto t : {hla::DType::f64, hla::DType::bf16, hla::DType::f16}) {
    auto bp = problem(V::hla2, 37);
    bp.dtype = t, bp.opt.normalize = true;
    add("hla2_add_" + hla::to_string(t) + "_n37", bp);
  }
  add("hla2_nan20_n37", problem(V::hla2, 37), 20);
  add("la1_nan20_n37", problem(V::la1, 37), 20);
  add("ahla_nan20_n37", problem(V::ahla, 37), 20);
  add("la1_n45", problem(V::la1, 45));
  add("la1_n42", problem(V::la1, 42));
  return cs;
}

// ---------------------------------------------------------------------------
// Running one member on one case, in this (child) process.

enum class Outcome { match, differ, leak, unsupported, error, crash, timeout };
const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::match: return "match";
    case Outcome::differ: return "differ";
    case Outcome::leak: return "leak";
    case Outcome::unsupported: return "unsupported";
    case Outcome::error: return "error";
    case Outcome::crash: return "crash";
    case Outcome::timeout: return "timeout";
  }
  return "?";
}

hla_dtype abi_dtype(hla::DType t) {
  switch (t) {
    case hla::DType::f64: return HLA_F64;
    case hla::DType::f32: return HLA_F32;
    case hla::DType::bf16: return HLA_BF16;
    case hla::DType::f16: return HLA_F16;
  }
  return HLA_F32;
}

// What the case needs that the member does not declare, or "".
std::string unsupported(const hla_impl_info& in, const Case& c) {
  const auto& bp = c.bp;
  const auto& o = bp.opt;
  const auto v = static_cast<hla_variant>(static_cast<int>(o.variant));
  std::string why;
  auto need = [&](bool used, uint32_t feature, const char* what) {
    if (used && !(in.features & feature)) why += std::string(why.empty() ? "" : ", ") + what;
  };
  if (!(in.variants >> v & 1u)) why = "variant";
  if (!(in.dtypes >> abi_dtype(bp.dtype) & 1u)) why += std::string(why.empty() ? "" : ", ") + "dtype";
  need(!o.masked, HLA_FEAT_UNMASKED, "unmasked");
  need(o.normalize && o.eps_mode == hla::EpsMode::add, HLA_FEAT_NORMALIZE, "normalize");
  need(o.normalize && o.eps_mode == hla::EpsMode::clamp, HLA_FEAT_CLAMP, "clamp");
  need(o.gamma != 1, HLA_FEAT_DECAY, "decay");
  need(o.lambda != 0, HLA_FEAT_RIDGE, "ridge");
  need(o.scale != 1, HLA_FEAT_SCALE, "scale");
  need(bp.kv_heads < bp.heads, HLA_FEAT_GQA, "gqa");
  need(!bp.offsets.empty(), HLA_FEAT_VARLEN, "varlen");
  need(c.split > 0, HLA_FEAT_STATE, "state");
  if ((in.max_n && bp.n > in.max_n) || (in.max_d && bp.d > in.max_d) || (in.max_dv && bp.dv > in.max_dv))
    why += std::string(why.empty() ? "" : ", ") + "size";
  return why;
}

// The harness hands every buffer over 64-byte aligned (hla_impl.h) and the zoo
// members check it, so the self-test's buffers are aligned the same way.
template <class T> struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U> Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  bool operator==(const Aligned64&) const { return true; }
};
template <class T> using AlignedVector = std::vector<T, Aligned64<T>>;

// q, k, v of tokens [t0, t1) in the case's dtype.
AlignedVector<unsigned char> encode(const hla::BatchProblem& bp, const std::vector<double>& x, Index rows, Index t0,
                                  Index t1, Index width) {
  const size_t es = hla::dtype_size(bp.dtype);
  AlignedVector<unsigned char> bytes(static_cast<size_t>(bp.batch * rows * (t1 - t0) * width) * es);
  size_t at = 0;
  for (Index br = 0; br < bp.batch * rows; ++br)
    for (Index t = t0; t < t1; ++t)
      for (Index c = 0; c < width; ++c, at += es) {
        const double e = x[static_cast<size_t>((br * bp.n + t) * width + c)];
        if (bp.dtype == hla::DType::f64) {
          std::memcpy(&bytes[at], &e, 8);
        } else if (bp.dtype == hla::DType::f32) {
          const auto f = static_cast<float>(e);
          std::memcpy(&bytes[at], &f, 4);
        } else if (bp.dtype == hla::DType::bf16) {
          const auto bits = static_cast<uint16_t>(zoo::float_bits(static_cast<float>(e)) >> 16);  // exact
          std::memcpy(&bytes[at], &bits, 2);
        } else {
          const auto h = static_cast<ref_half>(e);  // exact: e is an f16 value
          std::memcpy(&bytes[at], &h, 2);
        }
      }
  return bytes;
}

double decode(hla::DType t, const unsigned char* p) {
  switch (t) {
    case hla::DType::f64: { double x; std::memcpy(&x, p, 8); return x; }
    case hla::DType::f32: { float x; std::memcpy(&x, p, 4); return x; }
    case hla::DType::bf16: { uint16_t b; std::memcpy(&b, p, 2); return zoo::bits_float(static_cast<uint32_t>(b) << 16); }
    case hla::DType::f16: { ref_half h; std::memcpy(&h, p, 2); return static_cast<double>(h); }
  }
  return NAN;
}

struct Api {
  decltype(&hla_impl_info_get) info = nullptr;
  decltype(&hla_impl_run) run = nullptr;
  decltype(&hla_impl_state_size) state_size = nullptr;
};

struct Strings {
  std::string gamma, eps, lambda, scale;
};

// Runs tokens [t0, t1) of the case (all of it when it has offsets) and writes
// the outputs into out / den at their global token positions.
int call(const Api& api, const Case& c, Index t0, Index t1, const double* state_in, AlignedVector<double>* state_out,
         std::vector<double>& out, std::vector<double>& den, bool want_den, std::string& err) {
  const auto& bp = c.bp;
  const Index m = t1 - t0;
  static Strings s;
  s = {hla::to_string(bp.opt.gamma), hla::to_string(bp.opt.eps), hla::to_string(bp.opt.lambda),
       hla::to_string(bp.opt.scale)};
  const auto q = encode(bp, bp.q, bp.heads, t0, t1, bp.d), k = encode(bp, bp.k, bp.kv_heads, t0, t1, bp.d),
             v = encode(bp, bp.v, bp.kv_heads, t0, t1, bp.dv);
  const size_t es = hla::dtype_size(bp.dtype);
  AlignedVector<unsigned char> o(static_cast<size_t>(bp.batch * bp.heads * m * bp.dv) * es, 0);
  AlignedVector<double> dn(static_cast<size_t>(bp.batch * bp.heads * m), NAN);
  const AlignedVector<int64_t> offsets(bp.offsets.begin(), bp.offsets.end());
  hla_problem p{};
  p.abi_version = HLA_IMPL_ABI_VERSION;
  p.variant = static_cast<int32_t>(bp.opt.variant);
  p.masked = bp.opt.masked, p.normalize = bp.opt.normalize;
  p.eps_mode = bp.opt.eps_mode == hla::EpsMode::add ? HLA_EPS_ADD : HLA_EPS_CLAMP;
  p.gamma = hla::to_double(bp.opt.gamma), p.eps = hla::to_double(bp.opt.eps);
  p.lambda = hla::to_double(bp.opt.lambda), p.scale = hla::to_double(bp.opt.scale);
  p.gamma_exact = s.gamma.c_str(), p.eps_exact = s.eps.c_str(), p.lambda_exact = s.lambda.c_str();
  p.scale_exact = s.scale.c_str();
  p.batch = bp.batch, p.heads = bp.heads, p.kv_heads = bp.kv_heads, p.n = m, p.d = bp.d, p.dv = bp.dv;
  p.dtype = abi_dtype(bp.dtype);
  p.q = q.data(), p.k = k.data(), p.v = v.data();
  if (!bp.offsets.empty()) p.offsets = offsets.data(), p.num_offsets = static_cast<int64_t>(offsets.size());
  p.state_in = state_in;
  if (state_out) {
    const int64_t size = api.state_size(&p) * bp.batch * bp.heads * (bp.offsets.empty() ? 1 : p.num_offsets - 1);
    state_out->assign(static_cast<size_t>(size), NAN);
    p.state_out = state_out->data();
  }
  p.out = o.data();
  p.den = want_den ? dn.data() : nullptr;
  char msg[512] = "";
  if (const int rc = api.run(&p, msg, sizeof msg); rc != 0) {
    err = "rc " + std::to_string(rc) + ": " + msg;
    return rc;
  }
  for (Index bh = 0; bh < bp.batch * bp.heads; ++bh)
    for (Index t = 0; t < m; ++t) {
      const size_t g = static_cast<size_t>(bh * bp.n + t0 + t), l = static_cast<size_t>(bh * m + t);
      den[g] = dn[l];
      for (Index x = 0; x < bp.dv; ++x)
        out[g * static_cast<size_t>(bp.dv) + static_cast<size_t>(x)] =
            decode(bp.dtype, &o[(l * static_cast<size_t>(bp.dv) + static_cast<size_t>(x)) * es]);
    }
  return 0;
}

// Compares candidate values with the reference: the outcome and a short detail.
void compare(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& tol,
             const char* what, Index per_token, Outcome& outcome, std::string& detail, double& worst) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool rf = std::isfinite(ref[i]), gf = std::isfinite(got[i]);
    std::ostringstream at;
    at << what << "[" << i / static_cast<size_t>(per_token) << "," << i % static_cast<size_t>(per_token) << "] = " << got[i]
       << ", reference " << ref[i];
    if (rf && !gf) {
      if (outcome != Outcome::leak) detail = "non-finite where the reference is finite: " + at.str();
      outcome = Outcome::leak;
      continue;
    }
    if (!rf) {
      if (gf && outcome == Outcome::match) outcome = Outcome::differ, detail = "finite where the reference is not: " + at.str();
      continue;
    }
    const double ratio = std::abs(got[i] - ref[i]) / tol[i];
    if (ratio > worst) worst = ratio;
    if (ratio > 1 && outcome == Outcome::match) {
      outcome = Outcome::differ;
      detail = at.str();
    }
  }
}

// In the child: "outcome detail" on one line. form_class: what zoo.json says the member declares.
std::string run_case(const std::string& lib, const Case& c, int32_t form_class) {
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return std::string("error dlopen: ") + dlerror();
  Api api{reinterpret_cast<decltype(&hla_impl_info_get)>(dlsym(h, "hla_impl_info_get")),
          reinterpret_cast<decltype(&hla_impl_run)>(dlsym(h, "hla_impl_run")),
          reinterpret_cast<decltype(&hla_impl_state_size)>(dlsym(h, "hla_impl_state_size"))};
  // hla_impl_state_size only with HLA_FEAT_STATE (hla_impl.h)
  if (!api.info || !api.run || (!api.state_size && api.info() && (api.info()->features & HLA_FEAT_STATE)))
    return "error missing an entry point";
  const hla_impl_info* in = api.info();
  if (!in || in->abi_version != HLA_IMPL_ABI_VERSION) return "error bad hla_impl_info";
  if (in->form_class != form_class)
    return "error declares form_class " + std::to_string(in->form_class) + ", zoo.json says " + std::to_string(form_class);
  if (auto why = unsupported(*in, c); !why.empty()) return "unsupported " + why;
  const bool want_den = in->features & HLA_FEAT_DEN;
  std::vector<double> out(c.ref_out.size(), NAN), den(c.ref_den.size(), NAN);
  AlignedVector<double> state;
  std::string err;
  if (c.split > 0) {
    if (call(api, c, 0, c.split, nullptr, &state, out, den, want_den, err) ||
        call(api, c, c.split, c.bp.n, state.data(), nullptr, out, den, want_den, err))
      return "error " + err;
  } else if (call(api, c, 0, c.bp.n, nullptr, nullptr, out, den, want_den, err)) {
    return "error " + err;
  }
  Outcome o = Outcome::match;
  std::string detail;
  double worst = 0;
  const bool sd = in->form_class == HLA_CLASS_STATE_DIFFERENCE;
  compare(out, c.ref_out, sd ? c.tol_out_sd : c.tol_out, "out", c.bp.dv, o, detail, worst);
  if (want_den) compare(den, c.ref_den, sd ? c.tol_den_sd : c.tol_den, "den", 1, o, detail, worst);
  std::ostringstream line;
  line << to_string(o) << " worst err/tol " << worst << (detail.empty() ? "" : "; first: ") << detail;
  return line.str();
}

struct Result {
  Outcome outcome;
  std::string detail;
};

Result run_isolated(const std::string& lib, const Case& c, int32_t form_class, int timeout_s) {
  int fd[2];
  if (pipe(fd) != 0) return {Outcome::error, "pipe failed"};
  const pid_t pid = fork();
  if (pid < 0) return {Outcome::error, "fork failed"};
  if (pid == 0) {
    close(fd[0]);
    const std::string line = run_case(lib, c, form_class) + "\n";
    ssize_t at = 0;
    while (at < static_cast<ssize_t>(line.size())) {
      const ssize_t w = write(fd[1], line.data() + at, line.size() - static_cast<size_t>(at));
      if (w <= 0) break;
      at += w;
    }
    _exit(0);
  }
  close(fd[1]);
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pf{fd[0], POLLIN, 0};
    if (poll(&pf, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t r = read(fd[0], buf, sizeof buf);
    if (r <= 0) break;
    text.append(buf, static_cast<size_t>(r));
  }
  close(fd[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) return {Outcome::timeout, "no result after " + std::to_string(timeout_s) + " s"};
  if (WIFSIGNALED(status)) return {Outcome::crash, std::string("signal ") + strsignal(WTERMSIG(status))};
  if (!text.empty() && text.back() == '\n') text.pop_back();
  const auto sp = text.find(' ');
  const std::string word = text.substr(0, sp), rest = sp == std::string::npos ? "" : text.substr(sp + 1);
  for (auto o : {Outcome::match, Outcome::differ, Outcome::leak, Outcome::unsupported, Outcome::error})
    if (word == to_string(o)) return {o, rest};
  return {Outcome::error, "child said: " + text};
}

// ---------------------------------------------------------------------------
// What each member must do.

struct Expect {
  bool correct;
  std::vector<std::string> exposed_by;  // buggy: every one of these shows `kind`
  Outcome kind = Outcome::differ;
  std::vector<std::string> clean_on;    // buggy: these match
  std::set<std::string> may_skip;       // correct: cases it need not declare
};

std::map<std::string, Expect> expectations() {
  const std::set<std::string> hla3 = {"hla3_n37", "hla3_unmasked_n20"};
  std::set<std::string> not_hla2 = {"la1_n37",         "ahla_n37",       "la1_clamp_n37",  "ahla_clamp_n37",
                                    "ahla_varlen_n40", "ahla_state_n37", "la1_state_n37",  "la1_nan20_n37",
                                    "ahla_nan20_n37",  "la1_n45",        "la1_n42"};
  not_hla2.insert(hla3.begin(), hla3.end());
  std::set<std::string> no_f64 = hla3;
  no_f64.insert("hla2_add_f64_n37");
  const std::string base = "hla2_g1_n16", n37 = "hla2_n37";
  // zoo_backward.cpp: la1 and masked hla2, f32/f64, no ridge or state.
  const std::set<std::string> not_backward = {
      "ahla_n37",         "hla2_unmasked_n37", "hla2_unmasked_ridge_n37", "hla2_ridge_add_n37", "hla2_ridge_clamp_n37",
      "ahla_clamp_n37",    "ahla_varlen_n40",         "hla2_state_n37",     "ahla_state_n37",
      "la1_state_n37",    "hla2_add_bf16_n37", "hla2_add_f16_n37",        "ahla_nan20_n37",     "hla3_n37",
      "hla3_unmasked_n20"};
  std::set<std::string> with_state = not_backward;  // its state members continue la1 and hla2
  with_state.erase("hla2_state_n37"), with_state.erase("la1_state_n37");

  return {
      {"correct_streaming", {true, {}, Outcome::match, {}, {}}},
      {"correct_chunked", {true, {}, Outcome::match, {}, hla3}},
      {"correct_f32_on_half", {true, {}, Outcome::match, {}, no_f64}},
      {"correct_state_difference", {true, {}, Outcome::match, {}, not_hla2}},
      {"correct_state_difference_f64", {true, {}, Outcome::match, {}, not_hla2}},
      {"e1_decay", {false, {n37}, Outcome::differ, {base}, {}}},
      {"e2_scan", {false, {"hla2_n20", n37, "hla2_n64"}, Outcome::differ, {base}, {}}},
      {"e5_chunk", {false, {n37, "hla2_n64"}, Outcome::differ, {base}, {}}},
      {"strict_mask", {false, {base, n37, "la1_n37", "ahla_n37"}, Outcome::differ, {}, {}}},
      {"wrong_decay_power", {false, {n37}, Outcome::differ, {base}, {}}},
      {"future_leak", {false, {"hla2_nan20_n37", "la1_nan20_n37", "ahla_nan20_n37"}, Outcome::leak, {n37, "la1_n37", "ahla_n37"}, {}}},
      {"ragged_dropped", {false, {n37, "la1_n37", "ahla_n37"}, Outcome::differ, {base, "hla2_n64"}, {}}},
      {"state_not_reset", {false, {"hla2_varlen_n37"}, Outcome::differ, {n37, "la1_n37"}, {}}},
      {"f16_accum", {false, {n37, "ahla_n37"}, Outcome::differ, {}, {}}},
      {"transposed_k", {false, {n37, "la1_n37"}, Outcome::differ, {}, {}}},
      {"ignore_scale", {false, {"hla2_scale_n37"}, Outcome::differ, {n37}, {}}},
      {"clamp_no_sign", {false, {"la1_clamp_n37", "ahla_clamp_n37"}, Outcome::differ, {n37}, {}}},
      {"gqa_wrong_group", {false, {"hla2_gqa_n37"}, Outcome::differ, {n37}, {}}},
      {"state_incomplete", {false, {"hla2_state_n37", "ahla_state_n37"}, Outcome::differ, {n37}, {}}},
      // The backward members' forward is right everywhere; `hla fuzz` judges their gradients (hla_fuzz_zoo_*).
      {"correct_backward", {true, {}, Outcome::match, {}, not_backward}},
      {"backward_dk_no_cross", {false, {}, Outcome::differ, {n37, "la1_n37"}, {}}},
      {"backward_decay_power", {false, {}, Outcome::differ, {n37, "la1_n37"}, {}}},
      {"backward_gqa_unsummed", {false, {}, Outcome::differ, {n37, "hla2_gqa_n37"}, {}}},
      {"backward_nan_leak", {false, {}, Outcome::differ, {n37, "hla2_nan20_n37"}, {}}},
      // With a state (ABI 1.4): the forward continues from it; dropping the state's gradient shows in `hla fuzz` only.
      {"correct_backward_state", {true, {}, Outcome::match, {}, with_state}},
      {"backward_state_dropped", {false, {}, Outcome::differ, {n37, "hla2_state_n37", "la1_state_n37"}, {}}},
      // The tracker-reported gradient bugs: each member's forward is right where its backward bug lives.
      {"backward_varlen_leak", {false, {}, Outcome::differ, {n37, "hla2_varlen_n37"}, {}}},
      {"backward_pad_nan", {false, {}, Outcome::differ, {n37, "la1_clamp_n37"}, {}}},
      {"backward_dstate_next_seq", {false, {}, Outcome::differ, {n37, "hla2_state_n37", "la1_state_n37"}, {}}},
      {"backward_dstate_next_packed", {false, {}, Outcome::differ, {n37, "hla2_state_n37", "la1_state_n37"}, {}}},
      {"backward_dq_chunk_carry", {false, {}, Outcome::differ, {n37, "la1_n37"}, {}}},
      {"backward_bf16_accum", {false, {}, Outcome::differ, {n37, "hla2_add_bf16_n37"}, {}}},
      {"crash_long", {false, {"la1_n45", "la1_n42"}, Outcome::crash, {n37}, {}}},
      {"hang", {false, {"la1_n42"}, Outcome::timeout, {n37, "la1_n45"}, {}}},
  };
}

Outcome outcome_of_finding(const std::string& f) {
  if (f == "crash") return Outcome::crash;
  if (f == "timeout") return Outcome::timeout;
  if (f == "nan_causality") return Outcome::leak;
  return Outcome::differ;
}

// ---------------------------------------------------------------------------
// The zoo's bit conversions against the compiler's _Float16 (or Eigen's half) and Eigen's bfloat16.
int check_bits() {
  int bad = 0;
  auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || zoo::float_bits(a) == zoo::float_bits(b); };
  for (uint32_t hb = 0; hb < 0x10000u; ++hb) {
    ref_half h;
    const auto b16 = static_cast<uint16_t>(hb);
    std::memcpy(&h, &b16, 2);
    if (!same(zoo::f16_to_float(b16), static_cast<float>(h)) && bad++ < 5)
      std::cerr << "f16_to_float(0x" << std::hex << hb << std::dec << ") wrong\n";
  }
  std::mt19937 rng(7);
  for (uint64_t i = 0; i < 4000000; ++i) {
    // Every 2147th float pattern, plus random ones near the f16 range edges.
    const uint32_t u = i < 2000000 ? static_cast<uint32_t>(i * 2147u) : (rng() & 0x80000000u) | (0x33000000u + rng() % 0x14ffffffu);
    const float x = zoo::bits_float(u);
    const auto h = static_cast<ref_half>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    const uint16_t got = zoo::float_to_f16(x);
    const bool nan = std::isnan(x);
    if ((nan ? !std::isnan(zoo::f16_to_float(got)) : got != want) && bad++ < 5)
      std::cerr << "float_to_f16(" << x << ") = 0x" << std::hex << got << ", expected 0x" << want << std::dec << "\n";
    const float eb = static_cast<float>(Eigen::bfloat16(x));
    if (!same(zoo::bf16_to_float(zoo::float_to_bf16(x)), eb) && bad++ < 5)
      std::cerr << "float_to_bf16(" << x << ") wrong\n";
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: zoo_selftest ZOO_JSON ZOO_PATHS_JSON\n";
    return 2;
  }
  nlohmann::json zoo, paths;
  try {
    std::ifstream(argv[1]) >> zoo;
    std::ifstream(argv[2]) >> paths;
  } catch (const std::exception& e) {
    std::cerr << "cannot read " << argv[1] << " or " << argv[2] << ": " << e.what() << "\n";
    return 2;
  }
  int failures = 0;
  auto fail = [&](const std::string& why) {
    ++failures;
    std::cout << "FAIL " << why << "\n";
  };

  if (int bad = check_bits(); bad) fail("zoo_bits.hpp conversions disagree in " + std::to_string(bad) + " cases");
  else std::cout << "ok   zoo_bits.hpp F16/BF16 conversions agree with " << ref_half_name << " and Eigen::bfloat16\n";

  const auto expect = expectations();
  std::set<std::string> in_manifest;
  for (const auto& m : zoo.at("members")) {
    if (m.at("adapter") != "cabi") continue;
    const std::string name = m.at("name");
    in_manifest.insert(name);
    auto e = expect.find(name);
    if (e == expect.end()) fail(name + ": in zoo.json but not in the self-test's table");
    else if (e->second.correct != m.at("correct").get<bool>()) fail(name + ": zoo.json and the table disagree on 'correct'");
    else if (!e->second.correct && outcome_of_finding(m.at("expected_finding")) != e->second.kind)
      fail(name + ": zoo.json expected_finding does not fit the outcome the table expects");
    if (!paths.contains(name)) fail(name + ": missing from zoo_paths.json");
  }
  for (const auto& [name, e] : expect)
    if (!in_manifest.count(name)) fail(name + ": in the self-test's table but not a cabi member of zoo.json");

  std::map<std::string, int32_t> form_class;  // what zoo.json says each cabi member declares (hla_impl.h codes)
  for (const auto& m : zoo.at("members"))
    if (m.at("adapter") == "cabi") {
      const std::string c = m.value("form_class", std::string("masked"));
      form_class[m.at("name")] = c == "state_difference"    ? HLA_CLASS_STATE_DIFFERENCE
                                 : c.rfind("flat:", 0) == 0 ? HLA_CLASS_FLAT_CHUNKS(std::stoi(c.substr(5)))
                                 : c == "flat"              ? HLA_CLASS_FLAT
                                                            : HLA_CLASS_MASKED;
    }

  const auto cs = cases();
  std::cout << cs.size() << " problems, " << in_manifest.size() << " members\n";
  for (const auto& name : in_manifest) {
    auto e = expect.find(name);
    if (e == expect.end() || !paths.contains(name)) continue;
    const std::string lib = paths.at(name);
    const Expect& x = e->second;
    std::set<std::string> wanted(x.exposed_by.begin(), x.exposed_by.end());
    wanted.insert(x.clean_on.begin(), x.clean_on.end());
    std::cout << "== " << name << "\n";
    for (const auto& c : cs) {
      if (!x.correct && !wanted.count(c.name)) continue;
      Outcome want = Outcome::match;
      if (!x.correct && std::count(x.exposed_by.begin(), x.exposed_by.end(), c.name)) want = x.kind;
      const Result r = run_isolated(lib, c, form_class.at(name), want == Outcome::timeout ? kExpectedTimeoutS : kTimeoutS);
      bool ok = r.outcome == want;
      if (x.correct && r.outcome == Outcome::unsupported && x.may_skip.count(c.name)) ok = true;
      std::cout << (ok ? "  ok   " : "  FAIL ") << c.name << ": " << to_string(r.outcome) << " (want " << to_string(want)
                << ") " << r.detail << "\n";
      if (!ok) ++failures;
    }
  }
  std::cout << (failures ? "FAILED: " + std::to_string(failures) + " failure(s)" : std::string("all ok")) << "\n";
  return failures ? 1 : 0;
}
