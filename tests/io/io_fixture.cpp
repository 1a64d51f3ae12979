// Fixture files: round trips (hand-made and random), deterministic bytes,
// metadata and shape validation, and the committed fixtures/ set.
#include "../../properties/harness.hpp"
#include "hla/io/atomic_file.hpp"
#include "hla/io/fixture.hpp"
#include "hla/io/float_bits.hpp"
#include "hla/io/manifest.hpp"
#include "io_util.hpp"

#include <cstring>
#include <map>

using namespace hla;
using namespace hla::io;
using hla::test::require_input_error;
using hla::test::ScratchDir;
using hla::test::tiny_fixture;

namespace {

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

// The first field where two fixtures differ ("" when they are the same, bit for bit).
std::string fixture_difference(const Fixture& a, const Fixture& b) {
  const BatchProblem &p = a.problem, &q = b.problem;
  if (!(p.opt == q.opt)) return "options: " + p.opt.describe() + " vs " + q.opt.describe();
  if (p.dtype != q.dtype || p.batch != q.batch || p.heads != q.heads || p.kv_heads != q.kv_heads || p.n != q.n || p.d != q.d ||
      p.dv != q.dv)
    return "dims or dtype";
  if (!same_bits(p.q, q.q)) return "q";
  if (!same_bits(p.k, q.k)) return "k";
  if (!same_bits(p.v, q.v)) return "v";
  if (p.offsets != q.offsets) return "offsets";
  if (!same_bits(a.ref_out, b.ref_out)) return "ref_out";
  if (!same_bits(a.ref_den, b.ref_den)) return "ref_den";
  if (!same_bits(a.mag_num, b.mag_num)) return "mag_num";
  if (!same_bits(a.mag_den, b.mag_den)) return "mag_den";
  if (a.flags != b.flags) return "flags";
  if (a.gradients != b.gradients || !same_bits(a.dout, b.dout) || !same_bits(a.dden, b.dden)) return "upstream gradients";
  if (!same_bits(a.ref_dq, b.ref_dq) || !same_bits(a.ref_dk, b.ref_dk) || !same_bits(a.ref_dv, b.ref_dv)) return "ref_d*";
  if (!same_bits(a.mag_dq, b.mag_dq) || !same_bits(a.mag_dk, b.mag_dk) || !same_bits(a.mag_dv, b.mag_dv)) return "mag_d*";
  if (a.dq_flags != b.dq_flags || a.dk_flags != b.dk_flags || a.dv_flags != b.dv_flags) return "gradient flags";
  if (!same_bits(a.final_state, b.final_state) || !same_bits(a.mag_final_state, b.mag_final_state) ||
      a.final_state_flags != b.final_state_flags)
    return "final state";
  if (a.suite != b.suite || a.case_name != b.case_name || a.seed != b.seed || a.generator_version != b.generator_version ||
      a.reference_bits != b.reference_bits || a.exact_tier != b.exact_tier)
    return "descriptive fields";
  return "";
}

// Writes `st` with a digest that fits it (as a hostile editor would: these
// tests are about the checks behind the digest) and expects read_fixture to
// refuse it with every needle (and the file name).
void refuse(SafetensorsFile st, std::initializer_list<std::string> needles) {
  ScratchDir dir;
  const auto path = dir / "bad.safetensors";
  if (st.metadata.count("digest")) st.metadata["digest"] = fixture_digest(st);
  write_safetensors(path, st);
  require_input_error([&] { (void)read_fixture(path); }, {path.string()});
  require_input_error([&] { (void)read_fixture(path); }, needles);
}

SafetensorsFile tiny_file() { return fixture_to_safetensors(tiny_fixture()); }

}  // namespace

TEST_CASE("fixture: write then read gives the same fixture, bit for bit", "[io][fixture]") {
  ScratchDir dir;
  for (DType t : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    const Fixture f = tiny_fixture(t);
    write_fixture(dir / "f.safetensors", f);
    const Fixture g = read_fixture(dir / "f.safetensors");
    INFO(to_string(t));
    CHECK(fixture_difference(f, g) == "");
  }
}

TEST_CASE("fixture: identical fixtures give identical bytes", "[io][fixture]") {
  ScratchDir dir;
  write_fixture(dir / "a.safetensors", tiny_fixture());
  write_fixture(dir / "b.safetensors", tiny_fixture());
  CHECK(read_file_bytes(dir / "a.safetensors") == read_file_bytes(dir / "b.safetensors"));
  const auto md = read_safetensors(dir / "a.safetensors").metadata;
  CHECK(md.at("scale") == "-5/7");
  CHECK(md.at("lambda") == "1/3");
  CHECK(md.at("seed") == "18446744073709551615");
  CHECK(md.at("eps_mode") == "clamp");
  CHECK(md.at("exact_tier") == "true");
}

TEST_CASE("fixture: the writer refuses invalid fixtures", "[io][fixture]") {
  ScratchDir dir;
  const auto path = dir / "f.safetensors";
  Fixture f = tiny_fixture(DType::f16);
  f.problem.q[5] = 0.1;
  require_input_error([&] { write_fixture(path, f); }, {"q[5]", "not representable in f16"});
  f = tiny_fixture();
  f.ref_den.pop_back();
  require_input_error([&] { write_fixture(path, f); }, {"ref_den holds 5 values, expected 6 for shape [1, 2, 3]"});
  f = tiny_fixture();
  f.flags[0] = 4;
  require_input_error([&] { write_fixture(path, f); }, {"flags[0] = 4"});
  f = tiny_fixture();
  f.final_state.pop_back();
  require_input_error([&] { write_fixture(path, f); }, {"state holds 63 values, expected 64"});
  f = tiny_fixture();
  f.problem.opt.gamma = 2;
  require_input_error([&] { write_fixture(path, f); }, {"gamma = 2 must be in (0, 1]"});
  CHECK(dir.listing().empty());
}

TEST_CASE("fixture: missing, unknown and malformed metadata", "[io][fixture][hardening]") {
  auto with = [](const std::string& key, const std::string& value) {
    SafetensorsFile st = tiny_file();
    st.metadata[key] = value;
    return st;
  };
  SafetensorsFile st = tiny_file();
  st.metadata.erase("gamma");
  refuse(st, {"metadata key 'gamma' is missing"});
  st = tiny_file();
  st.metadata.clear();
  refuse(st, {"metadata key 'format' is missing"});
  refuse(with("colour", "red"), {"unknown metadata key 'colour'"});
  refuse(with("format", "other"), {"metadata format = 'other', expected 'hla-oracle-fixture'"});
  refuse(with("format_version", "4"), {"format_version = '4' is not supported"});
  refuse(with("case", "\x1b[31mred"), {"metadata case = '\\x1b[31mred' holds control bytes"});
  refuse(with("gamma", std::string(10000, '9')), {"metadata gamma", "(10000 characters)", "longer than 400 characters"});
  refuse(with("gamma", "1e-400"), {"metadata gamma", "more than 1100 bits"});
  refuse(with("gamma", "three quarters"), {"metadata gamma", "'three quarters' is not a number"});
  refuse(with("gamma", "2"), {"gamma = 2 must be in (0, 1]"});
  refuse(with("masked", "yes"), {"metadata masked: 'yes' is not true or false"});
  refuse(with("n", "-3"), {"metadata n = '-3' is not a non-negative decimal integer"});
  refuse(with("n", "03"), {"metadata n = '03'"});
  refuse(with("seed", "18446744073709551616"), {"metadata seed", "not a 64-bit integer"});
  refuse(with("dtype", "f8"), {"unknown dtype 'f8'"});
  refuse(with("variant", "hla9"), {"unknown variant 'hla9'"});
  refuse(with("eps_mode", "max"), {"unknown eps_mode 'max'"});
  refuse(with("variant", "ahla"), {"lam (ridge) applies to hla2 only"});
}

TEST_CASE("fixture: tensors inconsistent with the metadata", "[io][fixture][hardening]") {
  auto with = [](const std::string& key, const std::string& value) {
    SafetensorsFile st = tiny_file();
    st.metadata[key] = value;
    return st;
  };
  refuse(with("n", "4"), {"tensor 'q' has shape [1, 2, 3, 2], expected [1, 2, 4, 2] from the metadata dims"});
  refuse(with("kv_heads", "2"), {"tensor 'k' has shape [1, 1, 3, 2], expected [1, 2, 3, 2]"});
  refuse(with("dtype", "f64"), {"tensor 'q' has dtype F32, expected F64 (metadata dtype = f64)"});
  SafetensorsFile st = tiny_file();
  st.tensors.erase("ref_den");
  refuse(st, {"tensor 'ref_den' is missing"});
  st = tiny_file();
  st.tensors["extra"] = float_tensor(DType::f64, {1}, {1.0}, "extra");
  refuse(st, {"unknown tensor 'extra'"});
  st = tiny_file();
  st.tensors["ref_out"] = float_tensor(DType::f32, {1, 2, 3, 2}, std::vector<double>(12, 1.0), "ref_out");
  refuse(st, {"tensor 'ref_out' has dtype F32, expected F64"});
  st = tiny_file();
  st.tensors["offsets"] = i64_tensor({3}, {0, 1, 2});
  refuse(st, {"offsets must start at 0 and end at n = 3"});
  st = tiny_file();
  st.tensors["offsets"] = i64_tensor({1, 3}, {0, 1, 3});
  refuse(st, {"tensor 'offsets' has shape [1, 3], expected 1-D"});
  st = tiny_file();
  st.tensors["flags"] = u8_tensor({12}, std::vector<std::uint8_t>(12, 0));
  refuse(st, {"tensor 'flags' has shape [12], expected [1, 2, 3, 2]"});
  st = tiny_file();
  st.tensors["state.S"] = float_tensor(DType::f64, {2}, {1, 2}, "s");
  refuse(st, {"state.S has shape [2]; expected [2, 2, 2, 2]"});
  st = tiny_file();
  st.tensors["state.S"] = float_tensor(DType::f32, {2, 2, 2, 2}, std::vector<double>(16, 1.0), "s");
  refuse(st, {"the state.* tensors must have one dtype"});
  st = tiny_file();
  st.tensors.erase("state.F");
  refuse(st, {"without 'state.F'"});
  st = tiny_file();
  st.tensors["state.SQ"] = float_tensor(DType::f64, {2, 2, 2, 2}, std::vector<double>(16, 1.0), "s");
  refuse(st, {"'state.SQ', which is not part of the hla2 masked"});
}

// tiny_fixture with gradients (SPEC §9): q [1,2,3,2], k and v [1,1,3,2].
Fixture tiny_gradient_fixture() {
  Fixture f = tiny_fixture();
  f.gradients = true;
  f.dout = {0.5, -1, 2, 0.25, -0.0, 3, 1, 1, -2, 4, 0.125, 6};
  f.dden = {1, -1, 0.5, 2, 0, -3};
  f.ref_dq.assign(12, -1.5), f.mag_dq.assign(12, 3);
  f.ref_dk = {1, 2, 3, 4, 5, 6}, f.mag_dk.assign(6, 7);
  f.ref_dv = {-1e-300, 4.9e-324, 1e300, 0, 1, 2}, f.mag_dv.assign(6, 1e301);
  f.dk_flags = {0, 1, 0, 0, 2, 3};
  return f;
}

TEST_CASE("fixture: gradients round-trip, all or none, in version 3 only", "[io][fixture][gradients]") {
  ScratchDir dir;
  const Fixture f = tiny_gradient_fixture();
  write_fixture(dir / "g.safetensors", f);
  const Fixture back = read_fixture(dir / "g.safetensors");
  CHECK(fixture_difference(f, back).empty());
  CHECK(back.gradients);
  CHECK(back.dq_flags.empty());  // not written when nothing is flagged
  // Without gradients the file is what it was (no gradient tensor, the golden set's bytes unchanged).
  const SafetensorsFile plain = fixture_to_safetensors(tiny_fixture());
  CHECK_FALSE(plain.tensors.count("do"));
  CHECK_FALSE(read_fixture([&] {
                write_fixture(dir / "p.safetensors", tiny_fixture());
                return dir / "p.safetensors";
              }())
                  .gradients);
  // Upstream in the input dtype, references F64.
  const SafetensorsFile st = fixture_to_safetensors(f);
  CHECK(st.tensors.at("do").dtype == StDType::F32);
  CHECK(st.tensors.at("ref_dk").dtype == StDType::F64);
  for (const char* name : {"do", "ref_dq", "ref_dk", "ref_dv", "mag_dq", "mag_dk", "mag_dv"}) {
    SafetensorsFile missing = st;
    missing.tensors.erase(name);
    INFO(name);
    refuse(missing, {"tensor '" + std::string(name) + "' is missing"});
  }
  SafetensorsFile wrong = st;
  wrong.tensors["ref_dk"] = float_tensor(DType::f64, {1, 2, 3, 2}, std::vector<double>(12, 0.0), "ref_dk");
  refuse(wrong, {"tensor 'ref_dk' has shape [1, 2, 3, 2], expected [1, 1, 3, 2]"});
  wrong = st;
  wrong.tensors["do"] = float_tensor(DType::f64, {1, 2, 3, 2}, f.dout, "do");
  refuse(wrong, {"tensor 'do' has dtype F64, expected F32"});
  wrong = st;
  wrong.tensors["dk_flags"] = u8_tensor({1, 1, 3, 2}, {0, 4, 0, 0, 0, 0});
  refuse(wrong, {"dk_flags[1] = 4 has bits other than 1"});
  wrong = st;
  wrong.metadata["format_version"] = "2";
  wrong.metadata.erase("digest");
  refuse(wrong, {"gradient tensors in a format_version 2 fixture"});
  // The writer refuses gradient tensors without the flag that says so.
  Fixture half = tiny_fixture();
  half.ref_dq.assign(12, 0);
  require_input_error([&] { (void)fixture_to_safetensors(half); }, {"gradient tensors without gradients = true"});
}

TEST_CASE("fixture: the digest catches any change to the file", "[io][fixture][digest]") {
  ScratchDir dir;
  const auto path = dir / "f.safetensors";
  write_fixture(path, tiny_fixture());
  const std::string good = read_file_bytes(path);
  CHECK(read_safetensors(path).metadata.at("digest") == fixture_digest(read_safetensors(path)));
  CHECK(read_fixture(path).warnings.empty());
  // Flip one bit in each tensor's data (q, k, v, references, magnitudes, flags, state) in turn.
  const SafetensorsFile st = read_safetensors(path);
  const std::uint64_t header = [&] {
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(good[i])} << (8 * i);
    return n;
  }();
  std::size_t flipped = 0;
  for (std::size_t at = 8 + header; at < good.size(); at += 7, ++flipped) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    write_file_atomically(path, bad);
    require_input_error([&] { (void)read_fixture(path); }, {"digest mismatch"});
  }
  CHECK(flipped > 20);
  // Metadata edited without a new digest.
  for (const auto& [key, value] :
       std::map<std::string, std::string>{{"gamma", "1/2"}, {"scale", "1"}, {"masked", "false"}, {"normalize", "false"}, {"seed", "7"}}) {
    SafetensorsFile e = st;
    e.metadata[key] = value;
    write_safetensors(path, e);
    INFO(key);
    require_input_error([&] { (void)read_fixture(path); }, {"digest mismatch"});
  }
  // A version-2 file (no digest) still reads, with a warning.
  SafetensorsFile v2 = st;
  v2.metadata.erase("digest");
  v2.metadata["format_version"] = "2";
  write_safetensors(path, v2);
  const Fixture old = read_fixture(path);
  REQUIRE(old.warnings.size() == 1);
  CHECK(old.warnings[0].find("without a digest") != std::string::npos);
  // Version 3 without the digest is refused.
  SafetensorsFile nodigest = st;
  nodigest.metadata.erase("digest");
  write_safetensors(path, nodigest);
  require_input_error([&] { (void)read_fixture(path); }, {"metadata key 'digest' is missing"});
}

TEST_CASE("fixture: random fixtures round-trip exactly", "[io][fixture][property]") {
  ScratchDir dir;
  hla::test::prop("write_fixture then read_fixture is the identity, and writes are deterministic", [&] {
    Fixture f;
    BatchProblem& p = f.problem;
    p.dtype = *rc::gen::element(DType::f64, DType::f32, DType::bf16, DType::f16);
    const Index group = *rc::gen::inRange<Index>(1, 3);
    p.kv_heads = *rc::gen::inRange<Index>(1, 3);
    p.heads = p.kv_heads * group;
    p.batch = *rc::gen::inRange<Index>(1, 3);
    p.n = *rc::gen::inRange<Index>(0, 6);
    p.d = *rc::gen::inRange<Index>(1, 4);
    p.dv = *rc::gen::inRange<Index>(1, 4);
    if (p.batch == 1 && p.n > 0 && *rc::gen::arbitrary<bool>()) {
      p.offsets = {0};
      for (Index t = 1; t < p.n; ++t)
        if (*rc::gen::arbitrary<bool>()) p.offsets.push_back(t);
      p.offsets.push_back(p.n);
    }
    Options& o = p.opt;
    o.variant = *rc::gen::elementOf(all_variants());
    o.masked = !has_unmasked(o.variant) || *rc::gen::arbitrary<bool>();
    o.normalize = *rc::gen::arbitrary<bool>();
    o.eps_mode = *rc::gen::element(EpsMode::add, EpsMode::clamp);
    const int a = *rc::gen::inRange(1, 1000), b = *rc::gen::inRange(0, 1000);
    o.gamma = needs_unit_gamma(o.variant) ? Rational(1) : Rational(a, a + b);
    o.eps = Rational(*rc::gen::inRange(1, 1000), *rc::gen::inRange(1, 1000000));
    o.lambda = has_ridge(o.variant) ? Rational(*rc::gen::inRange(0, 50), *rc::gen::inRange(1, 7)) : Rational(0);
    o.scale = Rational(*rc::gen::nonZero<int>(), *rc::gen::inRange(1, 1 << 20));
    // Any bit pattern of the dtype: subnormals, ±0, ±Inf and NaNs included.
    const std::uint64_t mask = p.dtype == DType::f64 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * dtype_size(p.dtype))) - 1;
    auto values = [&](Index count, DType t, std::uint64_t m) {
      std::vector<double> x(static_cast<std::size_t>(count));
      for (double& e : x) e = decode_float(t, *rc::gen::arbitrary<std::uint64_t>() & m);
      return x;
    };
    p.q = values(p.batch * p.heads * p.n * p.d, p.dtype, mask);
    p.k = values(p.batch * p.kv_heads * p.n * p.d, p.dtype, mask);
    p.v = values(p.batch * p.kv_heads * p.n * p.dv, p.dtype, mask);
    const Index outs = p.batch * p.heads * p.n * p.dv, dens = p.batch * p.heads * p.n;
    f.ref_out = values(outs, DType::f64, ~std::uint64_t{0});
    f.ref_den = values(dens, DType::f64, ~std::uint64_t{0});
    f.mag_num = values(outs, DType::f64, ~std::uint64_t{0});
    f.mag_den = values(dens, DType::f64, ~std::uint64_t{0});
    if (*rc::gen::arbitrary<bool>())
      f.flags = *rc::gen::container<std::vector<std::uint8_t>>(static_cast<std::size_t>(outs), rc::gen::inRange<std::uint8_t>(0, 4));
    if (has_state(o.variant) && *rc::gen::arbitrary<bool>()) {  // a final state, any bits
      const Index size = p.sequence_count() * p.heads * state_size(state_layout(o, p.d, p.dv));
      f.final_state = values(size, DType::f64, ~std::uint64_t{0});
      f.mag_final_state = values(size, DType::f64, ~std::uint64_t{0});
      if (*rc::gen::arbitrary<bool>()) f.final_state_flags.assign(static_cast<std::size_t>(size), 1);
      const auto layout = state_layout(o, p.d, p.dv);  // a part the problem's state does not have is not written: zero
      p.for_each_state_entry([&](Index, Index, std::size_t i, Index, Index, std::size_t at) {
        if (layout[i].role != StatePart::Role::unused) return;
        f.final_state[at] = f.mag_final_state[at] = 0;
        if (!f.final_state_flags.empty()) f.final_state_flags[at] = 0;
      });
    }
    const auto text = rc::gen::container<std::string>(rc::gen::element('a', 'Z', '-', '/', ' ', '"', '\\', '~'));
    f.suite = *text;
    f.case_name = *text;
    f.generator_version = *text;
    f.seed = *rc::gen::arbitrary<std::uint64_t>();
    f.reference_bits = *rc::gen::inRange(0, 300);
    f.exact_tier = *rc::gen::arbitrary<bool>();

    write_fixture(dir / "r.safetensors", f);
    const std::string diff = fixture_difference(f, read_fixture(dir / "r.safetensors"));
    if (!diff.empty()) RC_FAIL("round trip changed " + diff);
    write_fixture(dir / "s.safetensors", f);
    RC_ASSERT(read_file_bytes(dir / "r.safetensors") == read_file_bytes(dir / "s.safetensors"));
  });
}

TEST_CASE("fixture: the committed fixtures/ set reads and matches its manifest", "[io][fixture][committed]") {
  const std::filesystem::path dir = std::filesystem::path(HLA_SOURCE_DIR) / "fixtures";
  const auto files = scan_fixture_dir(dir);
  REQUIRE_FALSE(files.empty());
  for (const auto& [name, entry] : files) {
    INFO(name);
    const Fixture f = read_fixture(dir / name);
    CHECK(f.ref_out.size() == static_cast<std::size_t>(f.problem.batch * f.problem.heads * f.problem.n * f.problem.dv));
  }
  const ManifestReport r = verify_manifest(dir);
  INFO(r.describe());
  CHECK(r.ok());
}
