// FFRational arithmetic (hla/ffrational.hpp): GMP's mpn layer on limbs held
// inline, no gcd, no allocation below kInline limbs.
#include "hla/ffrational.hpp"

#include <atomic>
#include <cstring>
#include <ostream>
#include <stdexcept>

namespace hla {

// ---------------------------------------------------------------- context

struct FFContext::State {
  uint32_t tag = 0;
  mp::mpz_int base{1};
  std::vector<mp::mpz_int> pow{mp::mpz_int(1)};  // pow[j] = B^j
  // pow[j]'s limbs and their count (moving an mpz keeps its limbs where they are)
  std::vector<std::pair<const mp_limb_t*, int>> limbs{{nullptr, 0}};
  const mp::mpz_int& power(int j) {
    while (static_cast<int>(pow.size()) <= j) {
      pow.push_back(pow.back() * base);
      limbs.clear();
      for (const auto& x : pow) limbs.emplace_back(x.backend().data()->_mp_d, std::abs(x.backend().data()->_mp_size));
    }
    return pow[static_cast<size_t>(j)];
  }
};

namespace {

thread_local FFContext::State* current = nullptr;
std::atomic<uint32_t> next_tag{1};

[[noreturn]] void foreign(const char* what) {
  throw std::logic_error(std::string("FFRational: ") + what +
                         ": a value with a power of the base was used outside the FFContext it was made in");
}

// The context whose base a value with k > 0 and tag `tag` needs.
FFContext::State& context_for(uint32_t tag, const char* what) {
  if (!current || current->tag != tag) foreign(what);
  return *current;
}

// Limbs of x (the magnitude of an mpz).
const mp_limb_t* limbs_of(const mp::mpz_int& x) { return x.backend().data()->_mp_d; }
int size_of(const mp::mpz_int& x) { return std::abs(x.backend().data()->_mp_size); }

// Removes every factor that d shares with b (d, b > 0).
mp::mpz_int strip_common(mp::mpz_int d, const mp::mpz_int& b) {
  for (;;) {
    const mp::mpz_int g = mp::gcd(d, b);
    if (g == 1) return d;
    d /= g;
  }
}

// Adds d (odd, > 1) to a coprime basis.
void add_to_basis(std::vector<mp::mpz_int>& basis, const mp::mpz_int& d) {
  basis.push_back(d);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < basis.size() && !changed; ++i)
      for (size_t j = i + 1; j < basis.size() && !changed; ++j) {
        const mp::mpz_int g = mp::gcd(basis[i], basis[j]);
        if (g == 1) continue;
        changed = true;
        if (basis[i] == basis[j]) {
          basis.erase(basis.begin() + static_cast<std::ptrdiff_t>(j));
          break;
        }
        mp::mpz_int a = basis[i] / g, b = basis[j] / g;
        basis.erase(basis.begin() + static_cast<std::ptrdiff_t>(j));
        basis.erase(basis.begin() + static_cast<std::ptrdiff_t>(i));
        for (mp::mpz_int* x : {&a, &b, const_cast<mp::mpz_int*>(&g)})
          if (*x != 1) basis.push_back(*x);
      }
  }
}

mp::mpz_int odd_part(const mp::mpz_int& x) {
  if (x == 0) return x;
  return x >> static_cast<unsigned>(mp::lsb(x));
}

}  // namespace

FFContext::FFContext(const std::vector<Rational>& values) : state_(std::make_unique<State>()), outer_(current) {
  std::vector<mp::mpz_int> odd, basis;
  for (const Rational& x : values) {
    const mp::mpz_int d = odd_part(mp::denominator(x));
    if (d == 1) continue;
    bool seen = false;
    for (const auto& o : odd) seen = seen || o == d;
    if (!seen) odd.push_back(d);
  }
  for (const auto& d : odd) add_to_basis(basis, d);
  for (const auto& p : basis) state_->base *= p;
  state_->tag = next_tag.fetch_add(1);
  current = state_.get();
}

namespace {
std::vector<Rational> context_values(const Options& o, const std::vector<std::span<const Rational>>& inputs) {
  std::vector<Rational> v{o.gamma, o.lambda, o.eps, o.scale};
  for (const auto& m : inputs)
    for (const Rational& x : m) {
      mpz_srcptr den = mpq_denref(x.backend().data());
      if (mpz_sizeinbase(den, 2) - 1 != mpz_scan1(den, 0)) v.push_back(x);  // not a power of two
    }
  return v;
}
}  // namespace

FFContext::FFContext(const Options& o, const std::vector<std::span<const Rational>>& inputs)
    : FFContext(context_values(o, inputs)) {}

FFContext::~FFContext() { current = outer_; }

const mp::mpz_int& FFContext::base() {
  static const mp::mpz_int one(1);
  return current ? current->base : one;
}

// ---------------------------------------------------------------- values

// Limb routines: inline loops on the few limbs most values have (a call into
// GMP costs more than the work there), GMP's above kSmall limbs.
namespace limb {

using L = mp_limb_t;
using W = unsigned __int128;
constexpr int kSmall = 8;

// r[0..na] = a + b (na >= nb >= 1); returns the carry. r may be a.
inline L add(L* r, const L* a, int na, const L* b, int nb) {
  if (na > kSmall) return mpn_add(r, a, na, b, nb);
  W c = 0;
  int i = 0;
  for (; i < nb; ++i) {
    c += static_cast<W>(a[i]) + b[i];
    r[i] = static_cast<L>(c);
    c >>= 64;
  }
  for (; i < na; ++i) {
    c += a[i];
    r[i] = static_cast<L>(c);
    c >>= 64;
  }
  return static_cast<L>(c);
}
// r = a - b (a >= b, na >= nb >= 1).
inline void sub(L* r, const L* a, int na, const L* b, int nb) {
  if (na > kSmall) {
    mpn_sub(r, a, na, b, nb);
    return;
  }
  L borrow = 0;
  int i = 0;
  for (; i < nb; ++i) {
    const W t = static_cast<W>(a[i]) - b[i] - borrow;
    r[i] = static_cast<L>(t);
    borrow = static_cast<L>(t >> 64) & 1;
  }
  for (; i < na; ++i) {
    const W t = static_cast<W>(a[i]) - borrow;
    r[i] = static_cast<L>(t);
    borrow = static_cast<L>(t >> 64) & 1;
  }
}
// r = a << sh (0 < sh < 64); returns the bits shifted out. r >= a may overlap.
inline L lshift(L* r, const L* a, int n, unsigned sh) {
  if (n > kSmall) return mpn_lshift(r, a, n, sh);
  const L out = a[n - 1] >> (64 - sh);
  for (int i = n - 1; i > 0; --i) r[i] = (a[i] << sh) | (a[i - 1] >> (64 - sh));
  r[0] = a[0] << sh;
  return out;
}
// r = a · m; returns the high limb.
inline L mul_1(L* r, const L* a, int n, L m) {
  if (n > kSmall) return mpn_mul_1(r, a, n, m);
  W c = 0;
  for (int i = 0; i < n; ++i) {
    c += static_cast<W>(a[i]) * m;
    r[i] = static_cast<L>(c);
    c >>= 64;
  }
  return static_cast<L>(c);
}
// r[0..na+nb) = a · b (na >= nb >= 1; r overlaps neither).
inline void mul(L* r, const L* a, int na, const L* b, int nb) {
  if (na > kSmall) {
    mpn_mul(r, a, na, b, nb);
    return;
  }
  r[na] = mul_1(r, a, na, b[0]);
  for (int j = 1; j < nb; ++j) {
    W c = 0;
    L* rj = r + j;
    for (int i = 0; i < na; ++i) {
      c += static_cast<W>(a[i]) * b[j] + rj[i];
      rj[i] = static_cast<L>(c);
      c >>= 64;
    }
    rj[na] = static_cast<L>(c);
  }
}
inline int cmp(const L* a, int na, const L* b, int nb) {
  if (na != nb) return na < nb ? -1 : 1;
  for (int i = na - 1; i >= 0; --i)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

// A buffer on the stack up to 48 limbs.
struct Buf {
  L small[48];
  std::unique_ptr<L[]> big;
  L* get(int n) {
    if (n <= 48) return small;
    big.reset(new L[static_cast<size_t>(n)]);
    return big.get();
  }
};

}  // namespace limb

struct FFOps {
  using F = FFRational;
  using L = mp_limb_t;

  static void reserve(F& r, int n) {  // r: zero, no rational
    if (n > r.cap_) {
      delete[] r.heap_;
      r.heap_ = new L[static_cast<size_t>(n)];
      r.cap_ = n;
    }
  }
  static void set_shifted(F& r, const L* p, int n, mp_bitcnt_t tz, int sign) {
    const int off = static_cast<int>(tz / 64);
    const unsigned sh = static_cast<unsigned>(tz % 64);
    n -= off;
    reserve(r, n);
    if (sh > 0) mpn_rshift(r.d(), p + off, n, sh);
    else std::memcpy(r.d(), p + off, static_cast<size_t>(n) * sizeof(L));
    if (r.d()[n - 1] == 0) --n;
    r.size_ = sign < 0 ? -n : n;
  }
  static F fallback(Rational x) {
    F r;
    r.rat_ = new Rational(std::move(x));
    return r;
  }
  static uint32_t ctx_of(const F& a, const F& b, const char* what) {
    if (a.k_ > 0 && b.k_ > 0 && a.ctx_ != b.ctx_) foreign(what);
    return a.k_ > 0 ? a.ctx_ : b.ctx_;
  }
  // Sets r's size from its n limbs (top ones possibly zero); moves trailing
  // zero bits of N into e.
  static void normalize(F& r, int n, bool negative) {
    L* p = r.d();
    while (n > 0 && p[n - 1] == 0) --n;
    if (n == 0) {
      r.size_ = 0, r.e_ = 0, r.k_ = 0, r.ctx_ = 0;
      return;
    }
    if ((p[0] & 1) == 0) {
      int z = 0;
      while (p[z] == 0) ++z;
      const int bits = __builtin_ctzl(p[z]);
      if (z > 0) std::memmove(p, p + z, static_cast<size_t>(n - z) * sizeof(L));
      n -= z;
      if (bits > 0) mpn_rshift(p, p, n, static_cast<unsigned>(bits));
      if (p[n - 1] == 0) --n;
      r.e_ += z * GMP_NUMB_BITS + bits;
    }
    r.size_ = negative ? -n : n;
  }

  // B^j's limbs (the context of tag ctx).
  struct Power {
    const L* p = nullptr;
    int n = 0;
  };
  static Power power(uint32_t ctx, int j, const char* what) {
    FFContext::State& st = context_for(ctx, what);
    if (__builtin_expect(j >= static_cast<int>(st.limbs.size()), 0)) st.power(j);
    const auto& [p, n] = st.limbs[static_cast<size_t>(j)];
    return {p, n};
  }
  // Limbs |N_x| · B^dk · 2^de needs.
  static int aligned_size(const F& x, int dk, int de, Power bk) { return x.limbs() + (dk > 0 ? bk.n : 0) + de / 64 + 1; }
  // |N_x| · B^dk · 2^de into out; its size.
  static int align(const F& x, int dk, int de, Power bk, L* out) {
    const L* src = x.d();
    int n = x.limbs();
    const int off = de / 64;
    const unsigned sh = static_cast<unsigned>(de % 64);
    L* dst = out + off;
    if (dk > 0) {
      if (bk.n == 1 && sh > 0 && static_cast<unsigned>(__builtin_clzl(bk.p[0])) >= sh) {  // B^dk · 2^sh in one limb
        dst[n] = limb::mul_1(dst, src, n, bk.p[0] << sh);
        ++n;
        if (dst[n - 1] == 0) --n;
        for (int i = 0; i < off; ++i) out[i] = 0;
        return n + off;
      }
      if (bk.n == 1) {
        dst[n] = limb::mul_1(dst, src, n, bk.p[0]);
        ++n;
      } else {
        if (n >= bk.n) limb::mul(dst, src, n, bk.p, bk.n);
        else limb::mul(dst, bk.p, bk.n, src, n);
        n += bk.n;
      }
      if (dst[n - 1] == 0) --n;
      if (sh > 0) {
        dst[n] = limb::lshift(dst, dst, n, sh);
        ++n;
      }
    } else if (sh > 0) {
      dst[n] = limb::lshift(dst, src, n, sh);
      ++n;
    } else {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(L));
    }
    for (int i = 0; i < off; ++i) out[i] = 0;
    n += off;
    while (out[n - 1] == 0) --n;  // N ≠ 0
    return n;
  }

  // The magnitudes of a and b (both nonzero, no Rational) at common
  // exponents (K, E): pointers and sizes, aligned in the buffers if needed.
  struct Aligned {
    limb::Buf ba, bb;
    const L* pa;
    const L* pb;
    int na, nb, K, E;
    uint32_t ctx;
    Aligned(const F& a, const F& b, const char* what) {
      ctx = ctx_of(a, b, what);
      K = std::max(a.k_, b.k_);
      E = std::min(a.e_, b.e_);
      const int dka = K - a.k_, dkb = K - b.k_, dea = a.e_ - E, deb = b.e_ - E;
      Power bk;
      if (dka > 0 || dkb > 0) bk = power(ctx, dka > 0 ? dka : dkb, what);
      if (dka == 0 && dea == 0) {
        pa = a.d(), na = a.limbs();
      } else {
        L* p = ba.get(aligned_size(a, dka, dea, bk));
        na = align(a, dka, dea, bk, p);
        pa = p;
      }
      if (dkb == 0 && deb == 0) {
        pb = b.d(), nb = b.limbs();
      } else {
        L* p = bb.get(aligned_size(b, dkb, deb, bk));
        nb = align(b, dkb, deb, bk, p);
        pb = p;
      }
    }
  };

  // r = ±|a| ± |b| (nonzero, no Rational) where every magnitude fits the
  // buffers on the stack and the result r's inline limbs; false otherwise.
  static bool small_add(F& r, const F& a, const F& b, bool a_neg, bool b_neg) {
    constexpr int kTmp = 24;
    if (__builtin_expect(a.ctx_ != b.ctx_ && a.ctx_ != 0 && b.ctx_ != 0, 0)) foreign("+");
    const int K = a.k_ > b.k_ ? a.k_ : b.k_, E = a.e_ < b.e_ ? a.e_ : b.e_;
    const int dka = K - a.k_, dkb = K - b.k_, dea = a.e_ - E, deb = b.e_ - E;
    Power bk;
    if (dka | dkb) bk = power(a.ctx_ | b.ctx_, dka | dkb, "+");  // one of them is 0
    const int ca = a.limbs() + (dka ? bk.n : 0) + dea / 64 + 1, cb = b.limbs() + (dkb ? bk.n : 0) + deb / 64 + 1;
    if (ca > kTmp || cb > kTmp || ca + 1 > F::kInline || cb + 1 > F::kInline) return false;
    L ta[kTmp], tb[kTmp];
    const L* pa = a.d();
    const L* pb = b.d();
    int na = a.limbs(), nb = b.limbs();
    if (dka | dea) na = align(a, dka, dea, bk, ta), pa = ta;
    if (dkb | deb) nb = align(b, dkb, deb, bk, tb), pb = tb;
    r.e_ = E;
    r.k_ = K;
    r.ctx_ = a.ctx_ | b.ctx_;
    L* p = r.buf_;
    if (a_neg == b_neg) {
      if (na >= nb) p[na] = limb::add(p, pa, na, pb, nb), normalize(r, na + 1, a_neg);
      else p[nb] = limb::add(p, pb, nb, pa, na), normalize(r, nb + 1, a_neg);
    } else {
      const int c = limb::cmp(pa, na, pb, nb);
      if (c == 0) r.e_ = 0, r.k_ = 0, r.ctx_ = 0;
      else if (c > 0) limb::sub(p, pa, na, pb, nb), normalize(r, na, a_neg);
      else limb::sub(p, pb, nb, pa, na), normalize(r, nb, b_neg);
    }
    return true;
  }

  // r (a fresh zero) = a ± b, a · b: one named result (returned in place).
  static void add_into(F& r, const F& a, const F& b, bool neg_b) {
    if (a.rat_ || b.rat_) {
      r.rat_ = new Rational(neg_b ? a.to_rational() - b.to_rational() : a.to_rational() + b.to_rational());
      return;
    }
    if (b.size_ == 0) {
      r = a;
      return;
    }
    if (a.size_ == 0) {
      r = b;
      if (neg_b) r.size_ = -r.size_;
      return;
    }
    const bool na_neg = a.size_ < 0, nb_neg = (b.size_ < 0) != neg_b;
    if (small_add(r, a, b, na_neg, nb_neg)) return;
    const Aligned x(a, b, "+");
    r.e_ = x.E;
    r.k_ = x.K;
    r.ctx_ = x.K > 0 ? x.ctx : 0;
    if (na_neg == nb_neg) {
      const bool a_big = x.na >= x.nb;
      const L* p = a_big ? x.pa : x.pb;
      const L* q = a_big ? x.pb : x.pa;
      const int np = a_big ? x.na : x.nb, nq = a_big ? x.nb : x.na;
      reserve(r, np + 1);
      r.d()[np] = limb::add(r.d(), p, np, q, nq);
      normalize(r, np + 1, na_neg);
    } else {
      const int c = limb::cmp(x.pa, x.na, x.pb, x.nb);
      if (c == 0) {
        r.e_ = 0, r.k_ = 0, r.ctx_ = 0;
        return;
      }
      const bool a_big = c > 0;
      const L* p = a_big ? x.pa : x.pb;
      const L* q = a_big ? x.pb : x.pa;
      const int np = a_big ? x.na : x.nb, nq = a_big ? x.nb : x.na;
      reserve(r, np);
      limb::sub(r.d(), p, np, q, nq);
      normalize(r, np, a_big ? na_neg : nb_neg);
    }
  }
  static F add(const F& a, const F& b, bool neg_b) {
    F r;
    add_into(r, a, b, neg_b);
    return r;
  }

  static void mul_into(F& r, const F& a, const F& b) {
    if (__builtin_expect(a.rat_ != nullptr || b.rat_ != nullptr, 0)) {
      r.rat_ = new Rational(a.to_rational() * b.to_rational());
      return;
    }
    const int sa = a.size_, sb = b.size_;
    if (sa == 0 || sb == 0) return;
    // ctx_ is 0 exactly when k_ is: the product's is either one's.
    if (__builtin_expect(a.ctx_ != b.ctx_ && a.ctx_ != 0 && b.ctx_ != 0, 0)) foreign("*");
    r.ctx_ = a.ctx_ | b.ctx_;
    r.k_ = a.k_ + b.k_;
    r.e_ = a.e_ + b.e_;
    const int na = sa < 0 ? -sa : sa, nb = sb < 0 ? -sb : sb;
    const bool negative = (sa ^ sb) < 0;
    L* p = r.buf_;  // r is fresh: inline
    if (na == 1 && nb == 1) {  // the inputs' products: one or two limbs, no loop
      const limb::W x = static_cast<limb::W>(a.d()[0]) * b.d()[0];
      p[0] = static_cast<L>(x);
      p[1] = static_cast<L>(x >> 64);
      const int n = 1 + (p[1] != 0);
      r.size_ = negative ? -n : n;
      return;
    }
    if (na + nb > F::kInline) {
      reserve(r, na + nb);
      p = r.d();
    }
    if (na >= nb) limb::mul(p, a.d(), na, b.d(), nb);
    else limb::mul(p, b.d(), nb, a.d(), na);
    const int n = na + nb - (p[na + nb - 1] == 0);
    r.size_ = negative ? -n : n;  // odd · odd: N stays odd
  }
  static F mul(const F& a, const F& b) {
    F r;
    mul_into(r, a, b);
    return r;
  }

  static F div(const F& a, const F& b) {
    if (b.is_zero() || (b.rat_ && *b.rat_ == 0)) throw std::overflow_error("Division by zero.");
    if (!a.rat_ && !b.rat_ && b.limbs() == 1 && b.d()[0] == 1) {  // b = ±2^e / B^k
      F r;
      if (a.size_ == 0) return r;
      const uint32_t ctx = ctx_of(a, b, "/");
      if (a.k_ >= b.k_) {
        r = a;
        r.k_ = a.k_ - b.k_;
      } else {
        const Power bk = power(ctx, b.k_ - a.k_, "/");
        reserve(r, aligned_size(a, b.k_ - a.k_, 0, bk));
        const int n = align(a, b.k_ - a.k_, 0, bk, r.d());
        r.size_ = a.size_ < 0 ? -n : n;
        r.k_ = 0;
      }
      r.e_ = a.e_ - b.e_;
      r.ctx_ = r.k_ > 0 ? ctx : 0;
      if (b.size_ < 0) r.negate();
      return r;
    }
    return F::from(a.to_rational() / b.to_rational());
  }

  static int compare(const F& a, const F& b) {
    if (a.rat_ || b.rat_) {
      const Rational x = a.to_rational(), y = b.to_rational();
      return x < y ? -1 : (y < x ? 1 : 0);
    }
    const int sa = a.sign(), sb = b.sign();
    if (sa != sb) return sa < sb ? -1 : 1;
    if (sa == 0) return 0;
    if (a.k_ == b.k_ && (a.k_ == 0 || a.ctx_ == b.ctx_)) {  // N odd: equal values have equal e and N
      if (a.e_ == b.e_ && a.size_ == b.size_ && limb::cmp(a.d(), a.limbs(), b.d(), b.limbs()) == 0) return 0;
    }
    const Aligned x(a, b, "compare");
    return sa * limb::cmp(x.pa, x.na, x.pb, x.nb);
  }
};

void FFRational::negate() {
  if (rat_) *rat_ = -*rat_;
  else size_ = -size_;
}

int FFRational::sign() const {
  if (rat_) return rat_->sign();
  return (size_ > 0) - (size_ < 0);
}

void FFRational::copy_from(const FFRational& o) {
  if (o.rat_) {
    if (rat_) *rat_ = *o.rat_;
    else rat_ = new Rational(*o.rat_);
    size_ = 0, e_ = 0, k_ = 0, ctx_ = 0;
    return;
  }
  if (rat_) {
    delete rat_;
    rat_ = nullptr;
  }
  const int n = o.limbs();
  if (n <= kInline) {
    // Both hold at least kInline limbs: a copy of fixed size (no call).
    std::memcpy(d(), o.d(), sizeof buf_);
  } else {
    if (n > cap_) {
      delete[] heap_;
      heap_ = new mp_limb_t[static_cast<size_t>(n)];
      cap_ = n;
    }
    std::memcpy(d(), o.d(), static_cast<size_t>(n) * sizeof(mp_limb_t));
  }
  size_ = o.size_, e_ = o.e_, k_ = o.k_, ctx_ = o.ctx_;
}

void FFRational::release_slow() noexcept {
  delete[] heap_;
  delete rat_;
  heap_ = nullptr;
  rat_ = nullptr;
  cap_ = kInline;
}

FFRational operator+(const FFRational& a, const FFRational& b) { return FFOps::add(a, b, false); }
FFRational operator-(const FFRational& a, const FFRational& b) { return FFOps::add(a, b, true); }
FFRational operator*(const FFRational& a, const FFRational& b) { return FFOps::mul(a, b); }
FFRational operator/(const FFRational& a, const FFRational& b) { return FFOps::div(a, b); }
FFRational& FFRational::operator+=(const FFRational& o) { return *this = FFOps::add(*this, o, false); }
FFRational& FFRational::operator-=(const FFRational& o) { return *this = FFOps::add(*this, o, true); }
int compare(const FFRational& a, const FFRational& b) { return FFOps::compare(a, b); }

std::ostream& operator<<(std::ostream& os, const FFRational& a) { return os << a.to_rational(); }

FFRational FFRational::from(double x) {
  if (!std::isfinite(x)) throw std::domain_error("non-finite value has no rational value");
  FFRational r;
  if (x == 0) return r;
  int exp = 0;
  const double m = std::frexp(std::fabs(x), &exp);  // m in [0.5, 1)
  uint64_t mant = static_cast<uint64_t>(std::ldexp(m, 64 - 11));  // exact: 53 bits
  int e = exp - (64 - 11);
  const int tz = __builtin_ctzll(mant);
  mant >>= tz;
  r.buf_[0] = static_cast<mp_limb_t>(mant);
  r.size_ = x < 0 ? -1 : 1;
  r.e_ = e + tz;
  return r;
}

// N = |limbs| >> tz (the limbs of an mpz; tz < its bit length) into r.
FFRational FFRational::from(const Rational& x) {
  FFRational r;
  mpq_srcptr q = x.backend().data();
  mpz_srcptr num = mpq_numref(q), den = mpq_denref(q);
  const int sign = mpz_sgn(num);
  if (sign == 0) return r;
  const mp_bitcnt_t s = mpz_scan1(den, 0);
  if (mpz_sizeinbase(den, 2) - 1 == s) {  // dyadic: no allocation
    const mp_bitcnt_t tz = mpz_scan1(num, 0);
    FFOps::set_shifted(r, num->_mp_d, std::abs(num->_mp_size), tz, sign);
    r.e_ = static_cast<int32_t>(static_cast<long>(tz) - static_cast<long>(s));
    return r;
  }
  const mp::mpz_int odd = mp::denominator(x) >> static_cast<unsigned>(s);
  if (!current || current->base == 1 || strip_common(odd, current->base) != 1) return FFOps::fallback(x);
  // The least k with odd | B^k.
  int k = 1;
  while (current->power(k) % odd != 0) ++k;
  const mp::mpz_int N = mp::abs(mp::numerator(x)) * (current->power(k) / odd);
  const mp_bitcnt_t tz = mpz_scan1(N.backend().data(), 0);
  FFOps::set_shifted(r, limbs_of(N), size_of(N), tz, sign);
  r.e_ = static_cast<int32_t>(static_cast<long>(tz) - static_cast<long>(s));
  r.k_ = k;
  r.ctx_ = current->tag;
  return r;
}

Rational FFRational::to_rational() const {
  if (rat_) return *rat_;
  Rational r;
  if (size_ == 0) return r;
  mpq_ptr q = r.backend().data();
  mpz_t n;
  mpz_roinit_n(n, d(), size_);  // signed size: the sign too
  mpz_set(mpq_numref(q), n);
  if (e_ > 0) mpz_mul_2exp(mpq_numref(q), mpq_numref(q), static_cast<mp_bitcnt_t>(e_));
  if (k_ > 0) mpz_set(mpq_denref(q), context_for(ctx_, "to_rational").power(k_).backend().data());
  else mpz_set_ui(mpq_denref(q), 1);
  if (e_ < 0) mpz_mul_2exp(mpq_denref(q), mpq_denref(q), static_cast<mp_bitcnt_t>(-e_));
  if (k_ > 0) {
    // N is odd, so only B's primes can be common factors: none when
    // gcd(N, B) = 1 (a remainder by B), else the canonical form takes a gcd.
    const mp::mpz_int& B = context_for(ctx_, "to_rational").base;
    const bool coprime = mpz_fits_ulong_p(B.backend().data()) ? mpz_gcd_ui(nullptr, n, mpz_get_ui(B.backend().data())) == 1
                                                              : mp::gcd(mp::mpz_int(n), B) == 1;
    if (!coprime) mpq_canonicalize(q);
  }
  return r;
}

// The scalar interface of the reference (scalar.hpp).
template <> FFRational from_rational<FFRational>(const Rational& x) { return FFRational::from(x); }
template <> Rational to_rational<FFRational>(const FFRational& x) { return x.to_rational(); }

}  // namespace hla
