// host.cpp — validation, state sizes and launch parameters (no CUDA needed).
#include "host.hpp"

#include <cmath>
#include <string>

namespace hla_cuda {

using detail::Plan;

int64_t state_size(Variant v, int64_t D, int64_t Dv) {
  const int64_t w = Dv + 1;
  switch (v) {
    case Variant::la1: return D * w;
    case Variant::hla2: return D * D + 2 * D * w;
    case Variant::ahla: return 2 * D * w;
    case Variant::hla3: return D * D + 2 * D * w;
  }
  return 0;
}

std::string validate(const Options& o, const Args& a) {
  const auto v = static_cast<int32_t>(o.variant);
  if (v < 0 || v > 3) return "variant must be la1, hla2, ahla or hla3 (code " + std::to_string(v) + ")";
  const auto t = static_cast<int32_t>(a.dtype);
  if (t < 1 || t > 3) return "dtype must be f32, bf16 or f16 (code " + std::to_string(t) + ")";
  if (!(o.gamma > 0 && o.gamma <= 1)) return "gamma must be in (0, 1]";
  if (!(o.lambda >= 0) || !std::isfinite(o.lambda)) return "lambda must be finite and >= 0";
  if (o.lambda > 0 && o.variant != Variant::hla2) return "lambda > 0 (ridge) exists for hla2 only";
  if (!std::isfinite(o.scale)) return "scale must be finite";
  if (o.normalize && !(o.eps > 0 && std::isfinite(o.eps))) return "eps must be finite and > 0";
  if (o.eps_mode != EpsMode::add && o.eps_mode != EpsMode::clamp) return "eps_mode must be add or clamp";
  if (o.precision != Precision::f32 && o.precision != Precision::bf16) return "precision must be f32 or bf16";
  if (o.chunk != 0 && o.chunk != 16 && o.chunk != 32 && o.chunk != 64) return "chunk must be 0 (automatic), 16, 32 or 64";
  if (a.B < 1 || a.T < 0 || a.H < 1 || a.Hkv < 1 || a.D < 1 || a.Dv < 1)
    return "shapes must have B, H, Hkv, D, Dv >= 1 and T >= 0";
  if (a.H % a.Hkv != 0) return "H must be a multiple of Hkv (grouped heads)";
  if (a.D > 256 || a.Dv > 256) return "D and Dv must be at most 256";
  // Every index the kernel forms fits int64; tokens x heads x dims below 2^62.
  if (a.T > (int64_t(1) << 40) || a.B > (int64_t(1) << 20) || a.H > (int64_t(1) << 16))
    return "shapes too large (B <= 2^20, T <= 2^40, H <= 2^16)";
  if (a.cu_seqlens) {
    if (a.B != 1) return "cu_seqlens (packed sequences) needs B == 1";
    if (a.num_seqs < 1) return "cu_seqlens needs num_seqs >= 1";
    if (a.num_seqs * a.H > (int64_t(1) << 31) - 1) return "too many sequences x heads for one launch";
  } else if (a.B * a.H > (int64_t(1) << 31) - 1) {
    return "too many batch entries x heads for one launch";
  }
  if (a.T > 0 && (!a.q || !a.k || !a.v || !a.out)) return "q, k, v and out must be given";
  return "";
}

size_t workspace_bytes(const Options& o, const Args& a) {
  const Plan p = detail::make_plan(o.variant, a.D, a.Dv, 16);
  return static_cast<size_t>(detail::block_count(a)) * static_cast<size_t>(p.state) * sizeof(float);
}

namespace detail {

int order_of(Variant v) { return v == Variant::la1 ? 1 : v == Variant::hla3 ? 3 : 2; }

int64_t block_count(const Args& a) { return (a.cu_seqlens ? a.num_seqs : a.B) * a.H; }

Plan make_plan(Variant v, int64_t D, int64_t Dv, int W) {
  Plan p;
  p.W = W;
  p.dp = static_cast<int>((D + 15) / 16 * 16);
  p.wp = static_cast<int>((Dv + 1 + 15) / 16 * 16);
  int off = 0;
  auto alloc = [&](int n) {
    const int at = off;
    off += (n + 3) / 4 * 4;  // 16-byte aligned
    return at;
  };
  p.q = alloc(W * p.dp), p.k = alloc(W * p.dp), p.v = alloc(W * p.wp);
  p.a = alloc(W * W), p.o = alloc(W * p.wp), p.x = alloc(W * p.dp);
  p.pw = alloc(3 * W + 4), p.flag = alloc(4), p.vx = alloc(p.dp), p.vy = alloc(p.wp);
  if (v == Variant::hla2 || v == Variant::hla3) p.a1 = alloc(W * W), p.h = alloc(W * W), p.u = alloc(W * p.dp);
  if (v == Variant::hla2) p.r = alloc(W * W);
  if (v == Variant::ahla || v == Variant::hla3) p.g = alloc(W * p.wp);
  p.total = off;
  const int sq = p.dp * p.dp, sv = p.dp * p.wp;
  switch (v) {
    case Variant::la1: p.s1 = 0, p.state = sv; break;
    case Variant::ahla: p.s1 = 0, p.s2 = sv, p.state = 2 * sv; break;
    default: p.s0 = 0, p.s1 = sq, p.s2 = sq + sv, p.state = sq + 2 * sv; break;
  }
  return p;
}

Params make_params(const Options& o, const Args& a, size_t smem_limit) {
  Params P;
  P.variant = static_cast<int32_t>(o.variant);
  P.dtype = static_cast<int32_t>(a.dtype);
  if (o.precision == Precision::f32) {
    P.parts_raw = a.dtype == DType::bf16 ? 1 : a.dtype == DType::f16 ? 2 : 3;
    P.parts_int = 3;
  } else {
    P.parts_raw = P.parts_int = 1;
  }
  P.gamma_is_one = o.gamma == 1.0;
  P.normalize = o.normalize;
  P.clamp = o.eps_mode == EpsMode::clamp;
  P.B = a.B, P.T = a.T, P.H = a.H, P.Hkv = a.Hkv, P.D = a.D, P.Dv = a.Dv;
  P.nseq = a.cu_seqlens ? a.num_seqs : a.B;
  P.cu = a.cu_seqlens;
  P.q = a.q, P.k = a.k, P.v = a.v, P.out = a.out, P.den = a.den;
  P.init = a.initial_state, P.fin = a.final_state;
  P.state_size = state_size(o.variant, a.D, a.Dv);
  P.lambda = static_cast<float>(o.lambda);
  P.eps = static_cast<float>(o.eps);
  // scale multiplies q; every term of num and den has `order` factors q: applied once at the end.
  P.out_scale = static_cast<float>(std::pow(o.scale, order_of(o.variant)));
  for (int W : {64, 32, 16}) {
    if (o.chunk != 0 && W != o.chunk) continue;
    const Plan p = make_plan(o.variant, a.D, a.Dv, W);
    if (static_cast<size_t>(p.total) * sizeof(float) <= smem_limit) {
      P.plan = p;
      break;
    }
  }
  for (int e = 0; e < kMaxPowers; ++e) P.powers[e] = static_cast<float>(std::pow(o.gamma, e));
  return P;
}

}  // namespace detail
}  // namespace hla_cuda
