// The C ABI adapter: every call forks a child that dlopen()s the library and
// runs it on inputs inherited through fork; outputs come back in shared memory.
#include "adapter.hpp"
#include "hla_impl.h"
#include "process.hpp"

#include "hla/io/float_bits.hpp"
#include "hla/io/safetensors.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace hla::fuzz {

std::string to_string(RunResult::Status s) {
  switch (s) {
    case RunResult::Status::ok: return "ok";
    case RunResult::Status::error: return "error";
    case RunResult::Status::crash: return "crash";
    case RunResult::Status::timeout: return "timeout";
    case RunResult::Status::bad_output: return "bad_output";
  }
  return "?";
}

namespace {

// The variant and dtype codes are the tables' (variants.hpp, dtype.hpp take
// them from include/hla_impl.h and assert that they equal the enumerators).

constexpr size_t kMsg = 1024;

// An abi_version as major.minor: the headers before ABI 1.2 declared 1 (1.0) and 2 (1.1).
int32_t abi_major(int32_t v) { return HLA_IMPL_ABI_MAJOR_OF(v); }
int32_t abi_minor(int32_t v) { return HLA_IMPL_ABI_MINOR_OF(v); }
std::string abi_string(int32_t v) {
  return v >= 1 ? std::to_string(abi_major(v)) + "." + std::to_string(abi_minor(v)) : std::to_string(v);
}
// Versions this harness reads: 1 and 2 (the old encoding), and 1.0 to its own minor.
bool abi_supported(int32_t v) {
  if (v == 1 || v == 2) return true;
  return v >= 0x10000 && abi_major(v) == HLA_IMPL_ABI_VERSION_MAJOR && abi_minor(v) <= HLA_IMPL_ABI_VERSION_MINOR;
}

struct InfoCopy {  // hla_impl_info, flattened for shared memory
  int32_t abi_version;
  uint32_t variants, dtypes, features;
  int64_t max_n, max_d, max_dv;
  int32_t form_class;
  char name[128], precision[16], precision_by_dtype[128];
};

struct Entry {
  decltype(&hla_impl_info_get) info = nullptr;
  decltype(&hla_impl_run) run = nullptr;
  decltype(&hla_impl_state_size) state_size = nullptr;
};

// In the child: load the library; on failure write the reason to msg.
bool load(const std::string& path, Entry& e, char* msg) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::snprintf(msg, kMsg, "dlopen: %s", dlerror());
    return false;
  }
  e.info = reinterpret_cast<decltype(e.info)>(dlsym(h, "hla_impl_info_get"));
  e.run = reinterpret_cast<decltype(e.run)>(dlsym(h, "hla_impl_run"));
  e.state_size = reinterpret_cast<decltype(e.state_size)>(dlsym(h, "hla_impl_state_size"));
  if (!e.info || !e.run) {
    std::snprintf(msg, kMsg, "%s does not export hla_impl_info_get and hla_impl_run", path.c_str());
    return false;
  }
  return true;
}

// The bytes of x stored in dtype t (little-endian), as the library reads them.
std::string encode(const std::vector<double>& x, DType t) {
  return io::float_tensor(t, {static_cast<int64_t>(x.size())}, x, "candidate input").bytes;
}

// Every buffer a library gets is 64-byte aligned (hla_impl.h): what a
// vectorized or GPU kernel may assume, and what UBSan checks of typed loads.
constexpr size_t kAlign = 64;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// A 64-byte aligned copy of some bytes (never a null pointer, also when empty).
class AlignedBytes {
 public:
  AlignedBytes(const void* data, size_t size)
      : p_(static_cast<unsigned char*>(std::aligned_alloc(kAlign, align_up(std::max<size_t>(size, 1))))) {
    if (!p_) throw std::bad_alloc();
    if (size) std::memcpy(p_.get(), data, size);
  }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(p_.get()); }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> p_;
};

class CabiAdapter final : public Adapter {
 public:
  CabiAdapter(std::string path, double timeout_s) : path_(std::move(path)), timeout_(timeout_s) { query(); }
  const Supports& supports() const override { return s_; }

  RunResult run(const BatchProblem& p, const check::Reference*, const std::vector<double>* state_in, bool want_state) override {
    const std::vector<std::string> exact{hla::to_string(p.opt.gamma), hla::to_string(p.opt.eps), hla::to_string(p.opt.lambda),
                                         hla::to_string(p.opt.scale)};
    hla_problem hp{};
    hp.abi_version = abi_;
    hp.variant = static_cast<int32_t>(p.opt.variant);
    hp.masked = p.opt.masked;
    hp.normalize = p.opt.normalize;
    hp.eps_mode = p.opt.eps_mode == EpsMode::add ? HLA_EPS_ADD : HLA_EPS_CLAMP;
    hp.gamma = to_double(p.opt.gamma), hp.eps = to_double(p.opt.eps), hp.lambda = to_double(p.opt.lambda),
    hp.scale = to_double(p.opt.scale);
    hp.gamma_exact = exact[0].c_str(), hp.eps_exact = exact[1].c_str(), hp.lambda_exact = exact[2].c_str(),
    hp.scale_exact = exact[3].c_str();
    hp.batch = p.batch, hp.heads = p.heads, hp.kv_heads = p.kv_heads, hp.n = p.n, hp.d = p.d, hp.dv = p.dv;
    hp.dtype = static_cast<int32_t>(p.dtype);
    const auto qb = encode(p.q, p.dtype), kb = encode(p.k, p.dtype), vb = encode(p.v, p.dtype);
    const AlignedBytes q(qb.data(), qb.size()), k(kb.data(), kb.size()), v(vb.data(), vb.size()),
        offsets(p.offsets.data(), p.offsets.size() * sizeof(int64_t)),
        state(state_in ? state_in->data() : nullptr, state_in ? state_in->size() * sizeof(double) : 0);
    hp.q = q.as<void>(), hp.k = k.as<void>(), hp.v = v.as<void>();
    hp.offsets = p.offsets.empty() ? nullptr : offsets.as<int64_t>();
    hp.num_offsets = static_cast<int64_t>(p.offsets.size());
    hp.state_in = state_in ? state.as<double>() : nullptr;

    RunResult r;
    size_t state_doubles = 0;
    if (want_state) {
      SharedMemory shm(sizeof(int64_t) + kMsg);
      const auto o = run_in_child([&] {
        Entry e;
        if (!load(path_, e, reinterpret_cast<char*>(shm.data()) + sizeof(int64_t))) return 2;
        if (!e.state_size) return 3;
        const int64_t s = e.state_size(&hp);
        std::memcpy(shm.data(), &s, sizeof s);
        return 0;
      }, timeout_);
      if (o.kind != ChildOutcome::Kind::exited || o.code != 0)
        return fail(o.kind == ChildOutcome::Kind::timed_out ? RunResult::Status::timeout : RunResult::Status::crash,
                    "hla_impl_state_size " + o.describe());
      int64_t s;
      std::memcpy(&s, shm.data(), sizeof s);
      if (s < 0) return fail(RunResult::Status::bad_output, "hla_impl_state_size returned " + std::to_string(s));
      state_doubles = static_cast<size_t>(s) * static_cast<size_t>(p.batch * p.heads) * p.sequences().size();
    }
    const size_t nout = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nden = static_cast<size_t>(p.batch * p.heads * p.n);
    const size_t w = dtype_size(p.dtype);
    // Shared memory is page aligned; each region starts on a 64-byte boundary.
    const size_t at_out = align_up(kMsg), at_den = align_up(at_out + nout * w), at_state = align_up(at_den + nden * sizeof(double));
    SharedMemory shm(at_state + state_doubles * sizeof(double) + kAlign);
    // Sentinels: NaN everywhere the candidate must write, so "not written" shows.
    std::vector<double> nan_out(nout, std::nan("")), nan_den(nden, std::nan(""));
    const auto nan_bits = encode(nan_out, p.dtype);
    if (!nan_bits.empty()) std::memcpy(shm.data() + at_out, nan_bits.data(), nan_bits.size());
    if (nden) std::memcpy(shm.data() + at_den, nan_den.data(), nden * sizeof(double));
    hp.out = shm.data() + at_out;
    hp.den = s_.has(HLA_FEAT_DEN) ? reinterpret_cast<double*>(shm.data() + at_den) : nullptr;
    hp.state_out = want_state ? reinterpret_cast<double*>(shm.data() + at_state) : nullptr;
    char* msg = reinterpret_cast<char*>(shm.data());
    const auto o = run_in_child([&] {
      Entry e;
      if (!load(path_, e, msg)) return 2;
      const int rc = e.run(&hp, msg, kMsg);
      msg[kMsg - 1] = 0;
      return rc == 0 ? 0 : 1;
    }, timeout_);
    if (o.kind == ChildOutcome::Kind::timed_out)
      return fail(RunResult::Status::timeout, "no result within " + std::to_string(timeout_) + " s");
    if (o.kind == ChildOutcome::Kind::signaled) return fail(RunResult::Status::crash, o.describe());
    if (o.code != 0) return fail(RunResult::Status::error, "hla_impl_run failed (" + o.describe() + "): " + std::string(msg));
    r.out.out_dtype = p.dtype;
    r.out.out.resize(nout);
    for (size_t i = 0; i < nout; ++i) {
      uint64_t bits = 0;
      std::memcpy(&bits, shm.data() + at_out + i * w, w);
      r.out.out[i] = io::decode_float(p.dtype, bits);
    }
    if (hp.den) r.out.den.assign(reinterpret_cast<double*>(shm.data() + at_den), reinterpret_cast<double*>(shm.data() + at_den) + nden);
    if (want_state)
      r.state_out.assign(reinterpret_cast<double*>(shm.data() + at_state),
                         reinterpret_cast<double*>(shm.data() + at_state) + state_doubles);
    return r;
  }

 private:
  static RunResult fail(RunResult::Status s, std::string m) {
    RunResult r;
    r.status = s;
    r.message = std::move(m);
    return r;
  }

  void query() {
    SharedMemory shm(sizeof(InfoCopy) + kMsg);
    auto* info = reinterpret_cast<InfoCopy*>(shm.data());
    char* msg = reinterpret_cast<char*>(shm.data() + sizeof(InfoCopy));
    const auto o = run_in_child([&] {
      Entry e;
      if (!load(path_, e, msg)) return 2;
      const hla_impl_info* i = e.info();
      if (!i) return 3;
      info->abi_version = i->abi_version, info->variants = i->variants, info->dtypes = i->dtypes,
      info->features = i->features, info->max_n = i->max_n, info->max_d = i->max_d, info->max_dv = i->max_dv;
      std::snprintf(info->name, sizeof info->name, "%s", i->name ? i->name : "");
      std::snprintf(info->precision, sizeof info->precision, "%s", i->precision ? i->precision : "f32");
      // form_class and precision_by_dtype exist from ABI 1.1 on.
      const bool has_1_1 = abi_supported(i->abi_version) && abi_minor(i->abi_version) >= 1;
      info->form_class = has_1_1 ? i->form_class : HLA_CLASS_MASKED;
      std::snprintf(info->precision_by_dtype, sizeof info->precision_by_dtype, "%s",
                    has_1_1 && i->precision_by_dtype ? i->precision_by_dtype : "");
      return 0;
    }, timeout_);
    if (o.kind != ChildOutcome::Kind::exited || o.code != 0)
      throw InputError("cannot load candidate library " + path_ + ": " + (o.code == 2 ? std::string(msg) : o.describe()));
    if (!abi_supported(info->abi_version))
      throw InputError(path_ + " implements hla_impl ABI version " + abi_string(info->abi_version) + " (abi_version " +
                       std::to_string(info->abi_version) + "), expected 1.0 to " + abi_string(HLA_IMPL_ABI_VERSION));
    abi_ = info->abi_version;
    s_.name = info->name[0] ? info->name : path_;
    for (Variant v : all_variants())
      if (info->variants & (1u << static_cast<unsigned>(v))) s_.variants.push_back(v);
    for (DType t : {DType::f64, DType::f32, DType::bf16, DType::f16})
      if (info->dtypes & (1u << static_cast<unsigned>(t))) s_.dtypes.push_back(t);
    if (s_.variants.empty() || s_.dtypes.empty()) throw InputError(path_ + " declares no variant or no dtype");
    s_.features = info->features;
    if (info->max_n > 0) s_.max_n = info->max_n;
    if (info->max_d > 0) s_.max_d = std::min<Index>(s_.max_d, info->max_d);
    if (info->max_dv > 0) s_.max_dv = std::min<Index>(s_.max_dv, info->max_dv);
    s_.precision = check::parse_precision_map(info->precision_by_dtype);
    if (!s_.precision.all) s_.precision.all = check::parse_precision(info->precision);
    if (info->form_class != HLA_CLASS_MASKED && info->form_class != HLA_CLASS_STATE_DIFFERENCE)
      throw InputError(path_ + " declares an unknown form_class " + std::to_string(info->form_class));
    s_.form_class = info->form_class == HLA_CLASS_MASKED ? check::FormClass::masked : check::FormClass::state_difference;
  }

  std::string path_;
  double timeout_;
  int32_t abi_ = HLA_IMPL_ABI_VERSION;
  Supports s_;
};

}  // namespace

std::unique_ptr<Adapter> make_cabi_adapter(const std::string& path, double timeout_s) {
  return std::make_unique<CabiAdapter>(path, timeout_s);
}

}  // namespace hla::fuzz
