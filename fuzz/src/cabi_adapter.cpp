// The C ABI adapter: the library runs in a child process (a Worker) that
// dlopen()s it once and serves calls until it crashes, hangs or reports an
// error (then the next call starts a fresh one), or, in fork mode, in a fresh
// child per call. Inputs and outputs travel in shared memory (an Arena).
#include "hla/fuzz/adapter.hpp"
#include "hla_impl.h"
#include "process.hpp"
#include "state_backward.hpp"

#include "hla/io/float_bits.hpp"
#include "hla/io/safetensors.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <tuple>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

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

RunResult Adapter::run_backward(const BatchProblem&, const std::vector<double>&, const std::vector<double>&) {
  RunResult r;
  r.status = RunResult::Status::error;
  r.message = "this adapter computes no gradients";
  return r;
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
  int32_t has_backward;  // exports hla_impl_run_backward
  int32_t has_backward_state;  // exports hla_impl_run_backward_state
  char name[128], precision[16], precision_by_dtype[128];
};

// In the child: load the library; on failure write the reason to msg.
bool load(const std::string& path, CabiEntryPoints& e, char* msg) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::snprintf(msg, kMsg, "dlopen: %s", dlerror());
    return false;
  }
  e.info = reinterpret_cast<decltype(e.info)>(dlsym(h, "hla_impl_info_get"));
  e.run = reinterpret_cast<decltype(e.run)>(dlsym(h, "hla_impl_run"));
  e.state_size = reinterpret_cast<decltype(e.state_size)>(dlsym(h, "hla_impl_state_size"));
  e.backward = reinterpret_cast<decltype(e.backward)>(dlsym(h, "hla_impl_run_backward"));
  e.backward_state = reinterpret_cast<decltype(e.backward_state)>(dlsym(h, "hla_impl_run_backward_state"));
  if (!e.info || !e.run) {
    std::snprintf(msg, kMsg, "%s does not export hla_impl_info_get and hla_impl_run", path.c_str());
    return false;
  }
  return true;
}

// One call into the library. The problem's pointers are offsets into the
// arena plus one (0: NULL); the child rebases them onto its own mapping.
enum class Op : int32_t { info, state_size, run, backward, backward_state };
struct Request {
  Op op;
  uint64_t arena_bytes;
  hla_problem hp;
  const void* dout = nullptr;  // backward only (arena offsets + 1, as hp's)
  const double* dden = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  const double* dstate_out = nullptr;  // backward_state only
  double* dstate_in = nullptr;
};
enum Code : int32_t { kOk = 0, kRunFailed = 1, kLoadFailed = 2, kNoInfo = 3, kNoStateSize = 4, kNoArena = 5 };
struct Reply {
  int32_t code = kOk;
  int64_t value = 0;  // hla_impl_state_size
  InfoCopy info{};
  char msg[kMsg] = {};
};

// The child's side: loads the library on its first request. In process
// (a linked library): its entry points, and the arena as the caller mapped it.
class Server {
 public:
  Server(std::string path, Arena* arena) : path_(std::move(path)), arena_(arena) {}
  Server(const CabiEntryPoints& e, Arena* arena) : arena_(arena), e_(e), loaded_(true), in_process_(true) {}
  void operator()(const std::string& request, std::string& reply_bytes) {
    Reply reply;
    Request rq;
    std::memcpy(&rq, request.data(), std::min(request.size(), sizeof rq));
    if (!loaded_ && !(loaded_ = load(path_, e_, reply.msg))) return answer(reply, kLoadFailed, reply_bytes);
    if (rq.op == Op::info) {
      const hla_impl_info* i = e_.info();
      if (!i) return answer(reply, kNoInfo, reply_bytes);
      InfoCopy& c = reply.info;
      c.abi_version = i->abi_version, c.variants = i->variants, c.dtypes = i->dtypes, c.features = i->features,
      c.max_n = i->max_n, c.max_d = i->max_d, c.max_dv = i->max_dv;
      std::snprintf(c.name, sizeof c.name, "%s", i->name ? i->name : "");
      std::snprintf(c.precision, sizeof c.precision, "%s", i->precision ? i->precision : "f32");
      // form_class and precision_by_dtype exist from ABI 1.1 on.
      const bool has_1_1 = abi_supported(i->abi_version) && abi_minor(i->abi_version) >= 1;
      c.form_class = has_1_1 ? i->form_class : HLA_CLASS_MASKED;
      c.has_backward = e_.backward != nullptr;
      c.has_backward_state = e_.backward_state != nullptr;
      std::snprintf(c.precision_by_dtype, sizeof c.precision_by_dtype, "%s",
                    has_1_1 && i->precision_by_dtype ? i->precision_by_dtype : "");
      return answer(reply, kOk, reply_bytes);
    }
    unsigned char* base = in_process_ ? arena_->data() : arena_->map(rq.arena_bytes);
    if (!base) return answer(reply, kNoArena, reply_bytes);
    hla_problem hp = rq.hp;
    auto at = [&]<class T>(T* off) { return off ? reinterpret_cast<T*>(base + (reinterpret_cast<uintptr_t>(off) - 1)) : nullptr; };
    hp.gamma_exact = at(hp.gamma_exact), hp.eps_exact = at(hp.eps_exact), hp.lambda_exact = at(hp.lambda_exact),
    hp.scale_exact = at(hp.scale_exact);
    hp.q = at(hp.q), hp.k = at(hp.k), hp.v = at(hp.v), hp.offsets = at(hp.offsets), hp.state_in = at(hp.state_in),
    hp.state_out = at(hp.state_out), hp.out = at(hp.out), hp.den = at(hp.den);
    if (rq.op == Op::state_size) {
      if (!e_.state_size) return answer(reply, kNoStateSize, reply_bytes);
      reply.value = e_.state_size(&hp);
      return answer(reply, kOk, reply_bytes);
    }
    if ((rq.op == Op::backward && !e_.backward) || (rq.op == Op::backward_state && !e_.backward_state)) {
      std::snprintf(reply.msg, kMsg, "the library does not export %s",
                    rq.op == Op::backward ? "hla_impl_run_backward" : "hla_impl_run_backward_state");
      return answer(reply, kRunFailed, reply_bytes);
    }
    const int rc = rq.op == Op::backward ? e_.backward(&hp, at(rq.dout), at(rq.dden), at(rq.dq), at(rq.dk), at(rq.dv), reply.msg, kMsg)
                   : rq.op == Op::backward_state
                       ? e_.backward_state(&hp, at(rq.dout), at(rq.dden), at(rq.dstate_out), at(rq.dq), at(rq.dk), at(rq.dv),
                                           at(rq.dstate_in), reply.msg, kMsg)
                       : e_.run(&hp, reply.msg, kMsg);
    reply.msg[kMsg - 1] = 0;
    answer(reply, rc == 0 ? kOk : kRunFailed, reply_bytes);
  }

 private:
  static void answer(Reply& r, int32_t code, std::string& bytes) {
    r.code = code;
    bytes.assign(reinterpret_cast<const char*>(&r), sizeof r);
  }
  std::string path_;
  Arena* arena_;
  CabiEntryPoints e_;
  bool loaded_ = false, in_process_ = false;
};

// The bytes of x stored in dtype t (little-endian), as the library reads them.
std::string encode(const std::vector<double>& x, DType t) {
  return io::float_tensor(t, {static_cast<int64_t>(x.size())}, x, "candidate input").bytes;
}

// Every buffer a library gets is 64-byte aligned (hla_impl.h).
constexpr size_t kAlign = 64;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Where each piece of a call goes in the arena (64-byte aligned regions).
class Layout {
 public:
  size_t add(size_t bytes) {
    const size_t at = end_;
    end_ = align_up(end_ + std::max<size_t>(bytes, 1));
    return at;
  }
  size_t size() const { return end_; }

 private:
  size_t end_ = 0;
};

// A pointer field of the request: offset + 1 into the arena (0 is NULL).
template <class T> T* offset_ptr(size_t at) { return reinterpret_cast<T*>(static_cast<uintptr_t>(at) + 1); }

class CabiAdapter final : public Adapter, public StateBackward {
 public:
  CabiAdapter(std::string path, double timeout_s, bool persistent, const Supports* sizes)
      : path_(std::move(path)), timeout_(timeout_s), persistent_(persistent), worker_(Server(path_, &arena_)) {
    query();
    if (sizes) narrow(*sizes);
  }
  // In process: every call goes straight to the library's entry points.
  CabiAdapter(const CabiEntryPoints& e, Index max_n)
      : path_("the linked library"), timeout_(0), persistent_(true), worker_(nullptr), in_process_(Server(e, &arena_)) {
    query();
    if (max_n > 0) s_.max_n = std::min(s_.max_n, max_n);
    s_.validate();
  }
  const Supports& supports() const override { return s_; }
  void allow_startup() override { startup_.allow(); }

  RunResult run(const BatchProblem& p, const engine::Reference*, const std::vector<double>* state_in, bool want_state) override {
    const std::string exact[4] = {hla::to_string(p.opt.gamma), hla::to_string(p.opt.eps), hla::to_string(p.opt.lambda),
                                  hla::to_string(p.opt.scale)};
    const auto qb = encode(p.q, p.dtype), kb = encode(p.k, p.dtype), vb = encode(p.v, p.dtype);
    const size_t nout = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nden = static_cast<size_t>(p.batch * p.heads * p.n);
    const size_t w = dtype_size(p.dtype);

    Request rq = request_of(p);
    hla_problem& hp = rq.hp;

    // Inputs first; every buffer 64-byte aligned (hla_impl.h): what a
    // vectorized or GPU kernel may assume, and what UBSan checks of typed loads.
    Layout l;
    size_t at_exact[4];
    for (int i = 0; i < 4; ++i) at_exact[i] = l.add(exact[i].size() + 1);
    const size_t at_q = l.add(qb.size()), at_k = l.add(kb.size()), at_v = l.add(vb.size()),
                 at_offsets = l.add(p.offsets.size() * sizeof(int64_t)),
                 at_state_in = l.add(state_in ? state_in->size() * sizeof(double) : 0);
    rq.op = Op::state_size;
    RunResult r;
    size_t state_doubles = 0;
    if (want_state) {
      fill_inputs(rq, l.size(), at_exact, exact, at_q, qb, at_k, kb, at_v, vb, at_offsets, p, at_state_in, state_in);
      Reply rep;
      const ChildOutcome o = call(rq, rep);
      if (o.kind != ChildOutcome::Kind::exited || o.code != 0 || rep.code != kOk)
        return fail(o.kind == ChildOutcome::Kind::timed_out ? RunResult::Status::timeout : RunResult::Status::crash,
                    "hla_impl_state_size " + (o.kind == ChildOutcome::Kind::exited && o.code == 0 ? reply_failure(rep) : o.describe()));
      if (rep.value < 0) return fail(RunResult::Status::bad_output, "hla_impl_state_size returned " + std::to_string(rep.value));
      state_doubles = static_cast<size_t>(rep.value) * static_cast<size_t>(p.batch * p.heads) * p.sequences().size();
    }
    const size_t at_out = l.add(nout * w), at_den = l.add(nden * sizeof(double)), at_state_out = l.add(state_doubles * sizeof(double));
    unsigned char* base = fill_inputs(rq, l.size(), at_exact, exact, at_q, qb, at_k, kb, at_v, vb, at_offsets, p, at_state_in, state_in);
    // Sentinels: NaN everywhere the candidate must write, so "not written" shows.
    const auto nan_bits = encode(std::vector<double>(nout, std::nan("")), p.dtype);
    if (!nan_bits.empty()) std::memcpy(base + at_out, nan_bits.data(), nan_bits.size());
    const double nan = std::nan("");
    for (size_t i = 0; i < nden; ++i) std::memcpy(base + at_den + i * sizeof(double), &nan, sizeof nan);
    rq.op = Op::run;
    hp.out = offset_ptr<void>(at_out);
    hp.den = s_.has(HLA_FEAT_DEN) ? offset_ptr<double>(at_den) : nullptr;
    hp.state_out = want_state ? offset_ptr<double>(at_state_out) : nullptr;
    Reply rep;
    const ChildOutcome o = call(rq, rep);
    if (auto failed = failure(o, rep, "hla_impl_run")) return *failed;
    base = arena_.data();
    r.out.out_dtype = p.dtype;
    r.out.out = decode(p.dtype, base + at_out, nout);
    if (hp.den) {
      r.out.den.resize(nden);
      if (nden) std::memcpy(r.out.den.data(), base + at_den, nden * sizeof(double));
    }
    if (want_state) {
      r.state_out.resize(state_doubles);
      if (state_doubles) std::memcpy(r.state_out.data(), base + at_state_out, state_doubles * sizeof(double));
    }
    return r;
  }

  RunResult run_backward(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden) override {
    if (!s_.has(HLA_FEAT_BACKWARD)) return Adapter::run_backward(p, dout, dden);
    return backward(p, dout, dden, nullptr, nullptr, false, false);
  }

  RunResult run_backward_state(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden,
                               const std::vector<double>* state_in, const std::vector<double>* dstate_out, bool want_dstate_in) override {
    if (!s_.has(HLA_FEAT_BACKWARD_STATE)) return fail(RunResult::Status::error, "the library declares no HLA_FEAT_BACKWARD_STATE");
    return backward(p, dout, dden, state_in, dstate_out, want_dstate_in, true);
  }

 private:
  // hla_impl_run_backward, or (with_state) hla_impl_run_backward_state from
  // state_in with the upstream dstate_out, ∂L/∂state_in into r.state_out.
  RunResult backward(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden,
                     const std::vector<double>* state_in, const std::vector<double>* dstate_out, bool want_dstate_in, bool with_state) {
    const std::string exact[4] = {hla::to_string(p.opt.gamma), hla::to_string(p.opt.eps), hla::to_string(p.opt.lambda),
                                  hla::to_string(p.opt.scale)};
    const auto qb = encode(p.q, p.dtype), kb = encode(p.k, p.dtype), vb = encode(p.v, p.dtype), ob = encode(dout, p.dtype);
    const size_t nq = static_cast<size_t>(p.batch * p.heads * p.n * p.d), nk = static_cast<size_t>(p.batch * p.kv_heads * p.n * p.d),
                 nv = static_cast<size_t>(p.batch * p.kv_heads * p.n * p.dv), w = dtype_size(p.dtype);
    Request rq = request_of(p);
    Layout l;
    size_t at_exact[4];
    for (int i = 0; i < 4; ++i) at_exact[i] = l.add(exact[i].size() + 1);
    const size_t at_q = l.add(qb.size()), at_k = l.add(kb.size()), at_v = l.add(vb.size()),
                 at_offsets = l.add(p.offsets.size() * sizeof(int64_t)),
                 at_state_in = l.add(state_in ? state_in->size() * sizeof(double) : 0), at_dout = l.add(ob.size()),
                 at_dden = l.add(dden.size() * sizeof(double)), at_dq = l.add(nq * w), at_dk = l.add(nk * w), at_dv = l.add(nv * w),
                 at_dstate_out = l.add(dstate_out ? dstate_out->size() * sizeof(double) : 0);
    size_t state_doubles = 0;
    if (want_dstate_in) {
      rq.op = Op::state_size;
      fill_inputs(rq, l.size(), at_exact, exact, at_q, qb, at_k, kb, at_v, vb, at_offsets, p, at_state_in, state_in);
      Reply rep;
      const ChildOutcome o = call(rq, rep);
      if (auto failed = failure(o, rep, "hla_impl_state_size")) return *failed;
      if (rep.value < 0) return fail(RunResult::Status::bad_output, "hla_impl_state_size returned " + std::to_string(rep.value));
      state_doubles = static_cast<size_t>(rep.value) * static_cast<size_t>(p.batch * p.heads) * p.sequences().size();
    }
    const size_t at_dstate_in = l.add(state_doubles * sizeof(double));
    unsigned char* base = fill_inputs(rq, l.size(), at_exact, exact, at_q, qb, at_k, kb, at_v, vb, at_offsets, p, at_state_in, state_in);
    if (!ob.empty()) std::memcpy(base + at_dout, ob.data(), ob.size());
    if (!dden.empty()) std::memcpy(base + at_dden, dden.data(), dden.size() * sizeof(double));
    if (dstate_out && !dstate_out->empty()) std::memcpy(base + at_dstate_out, dstate_out->data(), dstate_out->size() * sizeof(double));
    for (auto [at, count] : {std::pair{at_dq, nq}, std::pair{at_dk, nk}, std::pair{at_dv, nv}}) {  // NaN: "not written" shows
      const auto nan_bits = encode(std::vector<double>(count, std::nan("")), p.dtype);
      if (!nan_bits.empty()) std::memcpy(base + at, nan_bits.data(), nan_bits.size());
    }
    const double nan = std::nan("");
    for (size_t i = 0; i < state_doubles; ++i) std::memcpy(base + at_dstate_in + i * sizeof(double), &nan, sizeof nan);
    rq.op = with_state ? Op::backward_state : Op::backward;
    rq.dout = offset_ptr<const void>(at_dout);
    rq.dden = dden.empty() ? nullptr : offset_ptr<const double>(at_dden);
    rq.dq = offset_ptr<void>(at_dq), rq.dk = offset_ptr<void>(at_dk), rq.dv = offset_ptr<void>(at_dv);
    rq.dstate_out = dstate_out ? offset_ptr<const double>(at_dstate_out) : nullptr;
    rq.dstate_in = want_dstate_in ? offset_ptr<double>(at_dstate_in) : nullptr;
    Reply rep;
    const ChildOutcome o = call(rq, rep);
    if (auto failed = failure(o, rep, with_state ? "hla_impl_run_backward_state" : "hla_impl_run_backward")) return *failed;
    base = arena_.data();
    RunResult r;
    r.out.dq = decode(p.dtype, base + at_dq, nq), r.out.dk = decode(p.dtype, base + at_dk, nk), r.out.dv = decode(p.dtype, base + at_dv, nv);
    r.out.dq_dtype = r.out.dk_dtype = r.out.dv_dtype = p.dtype;
    r.state_out.resize(state_doubles);
    if (state_doubles) std::memcpy(r.state_out.data(), base + at_dstate_in, state_doubles * sizeof(double));
    return r;
  }

  // The request's scalar fields for p (pointers are set by fill_inputs and the caller).
  Request request_of(const BatchProblem& p) const {
    Request rq{};
    hla_problem& hp = rq.hp;
    hp.abi_version = abi_;
    hp.variant = static_cast<int32_t>(p.opt.variant);
    hp.masked = p.opt.masked;
    hp.normalize = p.opt.normalize;
    hp.eps_mode = p.opt.eps_mode == EpsMode::add ? HLA_EPS_ADD : HLA_EPS_CLAMP;
    hp.gamma = to_double(p.opt.gamma), hp.eps = to_double(p.opt.eps), hp.lambda = to_double(p.opt.lambda),
    hp.scale = to_double(p.opt.scale);
    hp.batch = p.batch, hp.heads = p.heads, hp.kv_heads = p.kv_heads, hp.n = p.n, hp.d = p.d, hp.dv = p.dv;
    hp.dtype = static_cast<int32_t>(p.dtype);
    hp.num_offsets = static_cast<int64_t>(p.offsets.size());
    return rq;
  }
  static std::vector<double> decode(DType t, const unsigned char* at, size_t count) {
    const size_t w = dtype_size(t);
    std::vector<double> x(count);
    for (size_t i = 0; i < count; ++i) {
      uint64_t bits = 0;
      std::memcpy(&bits, at + i * w, w);
      x[i] = io::decode_float(t, bits);
    }
    return x;
  }
  // How a call into the library failed (timeout, crash, error return), or nothing.
  std::optional<RunResult> failure(const ChildOutcome& o, const Reply& rep, const char* entry) {
    if (o.kind == ChildOutcome::Kind::timed_out)
      return fail(RunResult::Status::timeout, "no result within " + std::to_string(timeout_) + " s");
    if (o.kind == ChildOutcome::Kind::signaled) return fail(RunResult::Status::crash, o.describe());
    if (o.code != 0) return fail(RunResult::Status::crash, "the library's process " + o.describe());
    if (rep.code != kOk) {
      worker_.stop();  // an error may leave the library's state (a CUDA context) broken: a fresh process next time
      return fail(RunResult::Status::error, std::string(entry) + " failed: " + reply_failure(rep));
    }
    return std::nullopt;
  }
  static RunResult fail(RunResult::Status s, std::string m) {
    RunResult r;
    r.status = s;
    r.message = std::move(m);
    return r;
  }
  static std::string reply_failure(const Reply& r) {
    switch (r.code) {
      case kRunFailed: return r.msg;
      case kLoadFailed: return r.msg;
      case kNoInfo: return "hla_impl_info_get returned NULL";
      case kNoStateSize: return "the library declares state but does not export hla_impl_state_size";
      case kNoArena: return "the worker cannot map the shared memory";
    }
    return "code " + std::to_string(r.code);
  }

  // Sizes the arena to `bytes`, copies the inputs there and points the request's fields at them.
  unsigned char* fill_inputs(Request& rq, size_t bytes, const size_t* at_exact, const std::string* exact, size_t at_q,
                             const std::string& qb, size_t at_k, const std::string& kb, size_t at_v, const std::string& vb,
                             size_t at_offsets, const BatchProblem& p, size_t at_state_in, const std::vector<double>* state_in) {
    unsigned char* base = arena_.resize(bytes);
    rq.arena_bytes = bytes;
    for (int i = 0; i < 4; ++i) std::memcpy(base + at_exact[i], exact[i].c_str(), exact[i].size() + 1);
    std::memcpy(base + at_q, qb.data(), qb.size());
    std::memcpy(base + at_k, kb.data(), kb.size());
    std::memcpy(base + at_v, vb.data(), vb.size());
    if (!p.offsets.empty()) std::memcpy(base + at_offsets, p.offsets.data(), p.offsets.size() * sizeof(int64_t));
    if (state_in && !state_in->empty()) std::memcpy(base + at_state_in, state_in->data(), state_in->size() * sizeof(double));
    hla_problem& hp = rq.hp;
    hp.gamma_exact = offset_ptr<const char>(at_exact[0]), hp.eps_exact = offset_ptr<const char>(at_exact[1]),
    hp.lambda_exact = offset_ptr<const char>(at_exact[2]), hp.scale_exact = offset_ptr<const char>(at_exact[3]);
    hp.q = offset_ptr<const void>(at_q), hp.k = offset_ptr<const void>(at_k), hp.v = offset_ptr<const void>(at_v);
    hp.offsets = p.offsets.empty() ? nullptr : offset_ptr<const int64_t>(at_offsets);
    hp.state_in = state_in ? offset_ptr<const double>(at_state_in) : nullptr;
    return base;
  }

  // One request to the worker; in fork mode the worker ends with it.
  ChildOutcome call(const Request& rq, Reply& rep) {
    std::string reply;
    const std::string request(reinterpret_cast<const char*>(&rq), sizeof rq);
    ChildOutcome o;  // exited, 0: in process the call returns (or the process is gone)
    if (in_process_) {
      in_process_(request, reply);
    } else {
      // A worker that is not running starts (loads the library) with this call.
      o = worker_.call(request, reply, startup_.limit(timeout_, s_.startup_timeout, worker_.running()));
      if (!persistent_) worker_.stop();
    }
    if (o.kind == ChildOutcome::Kind::exited && o.code == 0) {
      if (reply.size() != sizeof rep) return {ChildOutcome::Kind::exited, 125};
      std::memcpy(&rep, reply.data(), sizeof rep);
    }
    return o;
  }

  void query() {
    Request rq{};
    rq.op = Op::info;
    Reply rep;
    const ChildOutcome o = call(rq, rep);
    if (o.kind != ChildOutcome::Kind::exited || o.code != 0 || rep.code != kOk)
      throw InputError("cannot load candidate library " + path_ + ": " +
                       (o.kind == ChildOutcome::Kind::exited && o.code == 0 ? reply_failure(rep) : o.describe()));
    const InfoCopy* info = &rep.info;
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
    // Bit 10 meant nothing before ABI 1.3: a stray one from an older library is ignored.
    const bool has_1_3 = abi_supported(info->abi_version) && info->abi_version >= 0x10000 && abi_minor(info->abi_version) >= 3;
    if (!has_1_3) s_.features &= ~HLA_FEAT_BACKWARD;
    if (s_.has(HLA_FEAT_BACKWARD) && !info->has_backward)
      throw InputError(path_ + " declares HLA_FEAT_BACKWARD but does not export hla_impl_run_backward");
    // Bit 11 likewise from ABI 1.4 on; it needs the state and the backward.
    if (!(has_1_3 && abi_minor(info->abi_version) >= 4)) s_.features &= ~HLA_FEAT_BACKWARD_STATE;
    if (s_.has(HLA_FEAT_BACKWARD_STATE) && !info->has_backward_state)
      throw InputError(path_ + " declares HLA_FEAT_BACKWARD_STATE but does not export hla_impl_run_backward_state");
    if (s_.has(HLA_FEAT_BACKWARD_STATE) && !(s_.has(HLA_FEAT_STATE) && s_.has(HLA_FEAT_BACKWARD)))
      throw InputError(path_ + " declares HLA_FEAT_BACKWARD_STATE without HLA_FEAT_STATE and HLA_FEAT_BACKWARD");
    if (info->max_n > 0) s_.max_n = info->max_n;
    if (info->max_d > 0) s_.max_d = std::min<Index>(s_.max_d, info->max_d);
    if (info->max_dv > 0) s_.max_dv = std::min<Index>(s_.max_dv, info->max_dv);
    s_.precision = engine::parse_precision_map(info->precision_by_dtype);
    if (!s_.precision.all) s_.precision.all = engine::parse_precision(info->precision);
    try {
      s_.form_class = engine::form_class_from_code(info->form_class);
      s_.interface = check::Interface::cabi;
    } catch (const InputError& e) {
      throw InputError(path_ + " declares an " + e.what());
    }
  }

  // The head sizes and block the command line declares (hla_impl_info has no
  // fields for them), a shorter max_n and fewer variants or dtypes, inside
  // what the library declares.
  void narrow(const Supports& z) {
    s_.startup_timeout = z.startup_timeout;
    narrow_list(s_.variants, z.variants, "--variants", "variant");
    narrow_list(s_.dtypes, z.dtypes, "--dtypes", "dtype");
    for (const auto& [list, max, name] : {std::tuple{&z.d_values, s_.max_d, "d"}, std::tuple{&z.dv_values, s_.max_dv, "dv"}})
      for (Index x : *list)
        if (x > max)
          throw InputError(std::string("--") + name + " " + std::to_string(x) + " is above the max_" + name + " " +
                           std::to_string(max) + " that " + path_ + " declares in hla_impl_info");
    if (z.max_n > s_.max_n)
      throw InputError("--max-n " + std::to_string(z.max_n) + " is above the max_n " + std::to_string(s_.max_n) + " that " + path_ +
                       " declares in hla_impl_info");
    if (z.max_n > 0) s_.max_n = z.max_n;
    if (z.n_multiple > s_.max_n)
      throw InputError("--n-multiple " + std::to_string(z.n_multiple) + " is above the max_n " + std::to_string(s_.max_n) +
                       " that " + path_ + " declares");
    s_.d_values = z.d_values, s_.dv_values = z.dv_values, s_.dv_equals_d = z.dv_equals_d, s_.n_multiple = z.n_multiple;
    if (!s_.d_values.empty()) s_.max_d = *std::max_element(s_.d_values.begin(), s_.d_values.end());
    if (!s_.dv_values.empty()) s_.max_dv = *std::max_element(s_.dv_values.begin(), s_.dv_values.end());
    s_.validate();
  }

  // Keeps `want` of `declared` (all when want is empty); one it lacks is an InputError.
  template <class T> void narrow_list(std::vector<T>& declared, const std::vector<T>& want, const char* option, const char* what) {
    if (want.empty()) return;
    for (const T& x : want)
      if (std::find(declared.begin(), declared.end(), x) == declared.end())
        throw InputError(std::string(option) + ": " + path_ + " does not declare the " + what + " " + to_string(x) + " in hla_impl_info");
    declared = want;
  }

  std::string path_;
  double timeout_;
  StartupAllowance startup_;
  bool persistent_;
  Arena arena_;
  Worker worker_;
  Worker::Serve in_process_;  // set for a linked library: the Server called directly
  int32_t abi_ = HLA_IMPL_ABI_VERSION;
  Supports s_;
};

}  // namespace

std::unique_ptr<Adapter> make_cabi_adapter(const std::string& path, double timeout_s, bool persistent, const Supports* sizes) {
  return std::make_unique<CabiAdapter>(path, timeout_s, persistent, sizes);
}

std::unique_ptr<Adapter> make_cabi_adapter_in_process(const CabiEntryPoints& entries, Index max_n) {
  if (!entries.info || !entries.run) throw InputError("a linked C ABI library needs hla_impl_info_get and hla_impl_run");
  return std::make_unique<CabiAdapter>(entries, max_n);
}

}  // namespace hla::fuzz
