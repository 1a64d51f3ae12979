// Where the error lies (issue 32): the score maps a report carries, the
// diagnosis hints drawn from them, and the HTML page. Planted bugs of each
// class (a correct f32 candidate's outputs perturbed in the pattern, or our
// own wrong forms: the paper's E5, a packed problem run as one sequence) get
// their hint; our honest f32 orders get none.
#include "hla/check/check.hpp"
#include "hla/check/gradient.hpp"
#include "hla/error.hpp"

#include "../../check/src/score_map.hpp"  // score_bin, map_worst: white-box
#include "../../properties/harness.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include <unistd.h>

using namespace hla;
using namespace hla::check;
using namespace hla::engine;

namespace {

BatchProblem dg_problem(Index batch, Index heads, Index kv_heads, Index n, std::vector<int64_t> offsets = {},
                        Rational gamma = Rational(15, 16)) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> N;
  BatchProblem p;
  p.opt.variant = Variant::hla2;
  p.opt.gamma = gamma;
  p.dtype = DType::f32;
  p.batch = batch, p.heads = heads, p.kv_heads = kv_heads, p.n = n, p.d = 8, p.dv = 8;
  p.offsets = std::move(offsets);
  p.resize_buffers();
  for (auto* x : {&p.q, &p.k, &p.v})
    for (double& e : *x) e = static_cast<double>(static_cast<float>(N(rng) / 2));
  p.validate();
  return p;
}

// A correct f32 candidate (our chunked form, out and den in f32).
CandidateOutputs dg_honest(const BatchProblem& p) { return ours(p, Precision::f32, Form::chunked_matmul, 16, DType::f32); }

// Adds `score` units of u·magnitude to out (c >= 0) or den (c < 0) where pick(b, h, t) holds.
void dg_plant(const BatchProblem& p, const Reference& ref, CandidateOutputs& c, bool den, double score,
              const std::function<bool(Index, Index, Index)>& pick) {
  const double u = 0x1p-24;
  for (Index b = 0; b < p.batch; ++b)
    for (Index h = 0; h < p.heads; ++h)
      for (Index t = 0; t < p.n; ++t) {
        if (!pick(b, h, t)) continue;
        if (den) {
          const size_t i = p.den_index(b, h, t);
          c.den[i] = static_cast<float>(c.den[i] + score * u * ref.mag_den[i]);
        } else {
          for (Index col = 0; col < p.dv; ++col) {
            const size_t i = p.out_index(b, h, t, col);
            c.out[i] = static_cast<float>(c.out[i] + score * u * ref.mag_num[i]);
          }
        }
      }
}

std::string dg_all_hints(const Report& r) {
  std::string s;
  for (const auto& h : r.hints) s += h + "\n";
  return s;
}

bool dg_has(const Report& r, const std::string& text) { return dg_all_hints(r).find(text) != std::string::npos; }

size_t dg_count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("score maps: shapes bounded, the worst scores agree with the report's", "[check][diagnosis]") {
  const BatchProblem p = dg_problem(2, 4, 2, 300);
  const Reference ref = compute_reference(p);
  CandidateOutputs c = dg_honest(p);
  dg_plant(p, ref, c, false, 50, [](Index, Index h, Index t) { return h == 1 && t == 77; });
  const Report r = check::check(p, ref, c);
  REQUIRE(r.maps.size() == 2);
  double worst = -1, ours_worst = -1;
  for (const ScoreMap& m : r.maps) {
    CHECK(m.rows == 8);
    CHECK(m.positions == 300);
    CHECK(m.blocks() <= ScoreMap::kMaxBlocks);
    CHECK(m.cand_blocks.size() == static_cast<size_t>(m.rows * m.blocks()));
    CHECK(m.ours_blocks.size() == m.cand_blocks.size());
    CHECK(m.cand_positions.size() == 300);
    CHECK(m.cand_phase.size() == static_cast<size_t>(ScoreMap::kPhases));
    // The maps show our worst order with decay by powers (one with log-space decay only joins the bar).
    CHECK(m.ours_form.find("log-space") == std::string::npos);
    if (r.baseline_worst_form.find("log-space") == std::string::npos) CHECK(m.ours_form == r.baseline_worst_form);
    worst = std::max(worst, map_worst(m));
    for (float x : m.ours_blocks) ours_worst = std::max(ours_worst, static_cast<double>(x));
  }
  CHECK(static_cast<float>(worst) == static_cast<float>(r.max_score));
  if (r.baseline_worst_form.find("log-space") == std::string::npos)
    CHECK(static_cast<float>(ours_worst) == static_cast<float>(r.baseline_max_score));
  CHECK(ours_worst > 0);
  CHECK(static_cast<float>(ours_worst) <= static_cast<float>(r.baseline_max_score));
  // The planted element: its row (batch 0 head 1, batch 1 head 1) and block, and its token.
  const ScoreMap& out = r.maps[0];
  CHECK(out.cand_positions[77] == static_cast<float>(r.max_score));
  CHECK(out.cand_blocks[static_cast<size_t>(1 * out.blocks() + 77 / out.block)] > 40);
  size_t histogram = 0, bins = 0;
  for (size_t i = 0; i < 23; ++i) histogram += r.histogram[i].second, bins += out.cand_bins[i] + r.maps[1].cand_bins[i];
  CHECK(histogram == bins);
  // At a production shape the blocks stay bounded.
  BatchProblem big;
  big.batch = 2, big.heads = 8, big.n = 4096;
  CHECK(map_layout(big, "out", 16, 8, 1, 4096, true).proto.blocks() == 128);
  CHECK(map_layout(big, "out", 100000, 8, 1, 4096, true).proto.blocks() == 1);
  CHECK(map_layout(big, "out", 16, 8, 1, 1 << 20, true).proto.step == 16);
}

TEST_CASE("score_bin: the report's histogram bins", "[check][diagnosis]") {
  CHECK(score_bin(0) == 0);
  CHECK(score_bin(0.5) == 1);
  CHECK(score_bin(1) == 1);
  CHECK(score_bin(1.5) == 2);
  CHECK(score_bin(2) == 2);
  CHECK(score_bin(2.0000001) == 3);
  CHECK(score_bin(4) == 3);
  CHECK(score_bin(std::ldexp(1.0, 20)) == 21);
  CHECK(score_bin(std::ldexp(1.0, 20) * 1.5) == 22);
  CHECK(score_bin(HUGE_VAL) == 22);
}

TEST_CASE("diagnosis: our honest f32 orders get no hint", "[check][diagnosis]") {
  for (const auto& offsets : {std::vector<int64_t>{}, std::vector<int64_t>{0, 50, 130, 200}}) {
    const BatchProblem p = dg_problem(offsets.empty() ? 2 : 1, 4, 2, 200, offsets);
    const Reference ref = compute_reference(p);
    for (const Form f : {Form::streaming, Form::chunked_matmul, Form::blelloch})
      for (const Index w : {Index(16), Index(64)}) {
        INFO(to_string(f) << "/" << w << (offsets.empty() ? "" : " packed"));
        const Report r = check::check(p, ref, ours(p, Precision::f32, f, w, DType::f32));
        CHECK(r.pass);
        CHECK(r.hints.empty());
        CHECK(r.text().find("hint") == std::string::npos);
      }
  }
}

TEST_CASE("diagnosis: error growing with t", "[check][diagnosis]") {
  const BatchProblem p = dg_problem(2, 4, 2, 256);
  const Reference ref = compute_reference(p);
  CandidateOutputs c = dg_honest(p);
  for (Index t = 0; t < p.n; ++t) dg_plant(p, ref, c, false, 2.0 * (t + 1), [t](Index, Index, Index tt) { return tt == t; });
  const Report r = check::check(p, ref, c);
  REQUIRE_FALSE(r.pass);
  INFO(dg_all_hints(r));
  CHECK(dg_has(r, "out: grows with the token index"));
  CHECK_FALSE(dg_has(r, "periodic"));
  CHECK_FALSE(dg_has(r, "heads"));
  CHECK(r.json()["hints"].size() == r.hints.size());
  CHECK(r.text().find("hint: out: grows with the token index") != std::string::npos);
}

TEST_CASE("diagnosis: periodic at a chunk width, and which width", "[check][diagnosis]") {
  const BatchProblem p = dg_problem(1, 2, 2, 256);
  const Reference ref = compute_reference(p);
  for (const Index W : {Index(16), Index(32), Index(64)}) {
    CandidateOutputs c = dg_honest(p);
    dg_plant(p, ref, c, false, 1000, [W](Index, Index, Index t) { return t >= W && t % W == 0; });
    const Report r = check::check(p, ref, c);
    REQUIRE_FALSE(r.pass);
    INFO("W = " << W << "\n" << dg_all_hints(r));
    CHECK(dg_has(r, "out: periodic at width " + std::to_string(W) + ":"));
    CHECK(dg_has(r, "chunk-boundary bug at chunk width " + std::to_string(W)));
    CHECK_FALSE(dg_has(r, "grows"));
  }
}

TEST_CASE("diagnosis: right up to a chunk boundary (paper E5: no carry × chunk term)", "[check][diagnosis]") {
  const BatchProblem p = dg_problem(1, 2, 2, 160);
  const Reference ref = compute_reference(p);
  const Report r = check::check(p, ref, ours_paper(p, Precision::f32, PaperForm::E5_hla2_chunked, 16, DType::f32));
  REQUIRE_FALSE(r.pass);
  INFO(dg_all_hints(r));
  CHECK(dg_has(r, "out: wrong from token 16 of each sequence on"));
  CHECK(dg_has(r, "chunk width 16"));
  CHECK_FALSE(dg_has(r, "grows"));  // a step at one token, not growth
  CHECK_FALSE(dg_has(r, "periodic"));
}

TEST_CASE("diagnosis: at sequence starts (cu_seqlens)", "[check][diagnosis]") {
  const BatchProblem p = dg_problem(1, 4, 2, 240, {0, 60, 130, 240});
  const Reference ref = compute_reference(p);
  SECTION("a state not reset at the offsets: the packed problem run as one sequence") {
    BatchProblem one = p;
    one.offsets.clear();
    const Report r = check::check(p, ref, dg_honest(one));
    REQUIRE_FALSE(r.pass);
    INFO(dg_all_hints(r));
    CHECK(dg_has(r, "out: at sequence starts: the first packed sequence is right and each later one is wrong"));
    CHECK(dg_has(r, "starting at tokens 60, 130"));
  }
  SECTION("only the first tokens of each sequence") {
    CandidateOutputs c = dg_honest(p);
    dg_plant(p, ref, c, false, 500, [](Index, Index, Index t) { return t == 0 || t == 1 || t == 60 || t == 130 || t == 131; });
    const Report r = check::check(p, ref, c);
    REQUIRE_FALSE(r.pass);
    INFO(dg_all_hints(r));
    CHECK(dg_has(r, "out: concentrated at sequence starts"));
    CHECK_FALSE(dg_has(r, "periodic"));
  }
}

TEST_CASE("diagnosis: confined to some heads, or one head of each GQA group", "[check][diagnosis]") {
  const BatchProblem p = dg_problem(2, 6, 2, 96);  // groups of 3 query heads
  const Reference ref = compute_reference(p);
  SECTION("one head of each group") {
    CandidateOutputs c = dg_honest(p);
    dg_plant(p, ref, c, false, 300, [](Index, Index h, Index) { return h % 3 == 2; });
    const Report r = check::check(p, ref, c);
    INFO(dg_all_hints(r));
    CHECK(dg_has(r, "out: confined to one head of each GQA group: heads 2, 5 of 6"));
  }
  SECTION("some heads") {
    CandidateOutputs c = dg_honest(p);
    dg_plant(p, ref, c, false, 300, [](Index b, Index h, Index) { return b == 1 && h == 4; });
    const Report r = check::check(p, ref, c);
    INFO(dg_all_hints(r));
    CHECK(dg_has(r, "out: confined to some heads: heads 4 of 6"));
    CHECK_FALSE(dg_has(r, "GQA group:"));
  }
}

TEST_CASE("diagnosis: confined to den", "[check][diagnosis]") {
  const BatchProblem p = dg_problem(1, 2, 2, 96);
  const Reference ref = compute_reference(p);
  CandidateOutputs c = dg_honest(p);
  dg_plant(p, ref, c, true, 300, [](Index, Index, Index t) { return t > 10; });
  const Report r = check::check(p, ref, c);
  REQUIRE_FALSE(r.pass);
  INFO(dg_all_hints(r));
  CHECK(dg_has(r, "confined to den: den is wrong while out is right"));
}

TEST_CASE("diagnosis: confined to one gradient", "[check][diagnosis]") {
  BatchProblem p = dg_problem(1, 4, 2, 80);
  Reference ref = compute_reference(p);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> N;
  std::vector<double> dout(ref.out.size());
  for (double& x : dout) x = static_cast<float>(N(rng));
  ref.grad = compute_gradient_reference(p, ref, dout, {});
  CandidateOutputs base = fast_ours_gradients(p, Precision::f32, dout, {}, 16);
  const CandidateOutputs fwd = dg_honest(p);
  base.out = fwd.out, base.den = fwd.den, base.out_dtype = fwd.out_dtype, base.den_dtype = fwd.den_dtype;
  base.dq_dtype = base.dk_dtype = base.dv_dtype = DType::f32;
  {
    const Report r = check::check(p, ref, base);
    INFO(r.text());
    REQUIRE(r.pass);
    CHECK(r.hints.empty());
    REQUIRE(r.maps.size() == 5);
    CHECK(r.maps[3].name == "dk");
    CHECK(r.maps[3].rows == 2);
    CHECK(r.maps[2].group == 2);
  }
  SECTION("dk") {
    CandidateOutputs c = base;
    for (size_t i = 0; i < c.dk.size(); i += 3) c.dk[i] = static_cast<float>(c.dk[i] * (1 + 1e-3));
    const Report r = check::check(p, ref, c);
    REQUIRE_FALSE(r.pass);
    INFO(dg_all_hints(r));
    CHECK(dg_has(r, "confined to one gradient: dk is wrong while out, den, dq, dv are right"));
  }
  SECTION("dk of one K/V head") {
    CandidateOutputs c = base;
    for (Index t = 0; t < p.n; ++t)
      for (Index col = 0; col < p.d; ++col) {
        double& x = c.dk[static_cast<size_t>(((0 * p.kv_heads + 1) * p.n + t) * p.d + col)];
        x = static_cast<float>(x * (1 + 1e-3));
      }
    const Report r = check::check(p, ref, c);
    REQUIRE_FALSE(r.pass);
    INFO(dg_all_hints(r));
    CHECK(dg_has(r, "dk: confined to some K/V heads: K/V heads 1 of 2 are wrong"));
  }
  SECTION("dq at every 16th token (a carry read from the chunk before)") {
    CandidateOutputs c = base;
    for (Index h = 0; h < p.heads; ++h)
      for (Index t = 16; t < p.n; t += 16)
        for (Index col = 0; col < p.d; ++col) {
          double& x = c.dq[p.q_index(0, h, t, col)];
          x = static_cast<float>(x * 1.01 + 1e-2);
        }
    const Report r = check::check(p, ref, c);
    REQUIRE_FALSE(r.pass);
    INFO(dg_all_hints(r));
    CHECK(dg_has(r, "confined to one gradient: dq"));
    CHECK(dg_has(r, "dq: periodic at width 16"));
  }
}

TEST_CASE("HTML report: self-contained, one cell per block, the same bytes each time", "[check][html]") {
  const BatchProblem p = dg_problem(2, 4, 2, 200);
  const Reference ref = compute_reference(p);
  CandidateOutputs c = dg_honest(p);
  dg_plant(p, ref, c, false, 1000, [](Index, Index h, Index t) { return h == 3 && t >= 32 && t % 32 == 0; });
  const Report r = check::check(p, ref, c);
  REQUIRE_FALSE(r.pass);
  const std::string page = r.html("a <case>");
  CHECK(page == check::check(p, ref, c).html("a <case>"));
  CHECK(page.find("data-verdict=\"FAIL\"") != std::string::npos);
  CHECK(page.find("a &lt;case&gt;") != std::string::npos);
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("@import") == std::string::npos);
  CHECK(page.find("src=") == std::string::npos);
  CHECK(page.find("href=") == std::string::npos);
  CHECK(dg_count(page, "http") == dg_count(page, "xmlns=\"http://www.w3.org/2000/svg\""));
  size_t cells = 0;
  for (const ScoreMap& m : r.maps) cells += static_cast<size_t>(m.rows * m.blocks());
  CHECK(dg_count(page, "class=\"cell\"") == cells);
  CHECK(dg_count(page, "<section class=\"part\"") == r.maps.size());
  for (const auto& h : r.hints) CHECK(page.find(h.substr(0, 30)) != std::string::npos);
  CHECK(page.find("periodic at width 32") != std::string::npos);
  const Report pass = check::check(p, ref, dg_honest(p));
  CHECK(pass.html().find("data-verdict=\"PASS\"") != std::string::npos);
}

TEST_CASE("HTML report: at most 2 MB at [2, 8, 4096, 128] with gradients", "[check][html]") {
  // The maps as check() lays them out at that shape, every value distinct.
  BatchProblem p;
  p.batch = 2, p.heads = 8, p.kv_heads = 8, p.n = 4096, p.d = 128, p.dv = 128;
  Report r;
  r.reasons = {"planted"};
  for (const char* name : {"out", "den", "dq", "dk", "dv"}) {
    ScoreMap m = map_layout(p, name, 16, 8, 1, 4096, true).proto;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> U(0, 6);
    for (auto* v : {&m.cand_blocks, &m.ours_blocks}) v->resize(static_cast<size_t>(m.rows * m.blocks()));
    for (auto* v : {&m.cand_positions, &m.ours_positions}) v->resize(4096);
    for (auto* v : {&m.cand_blocks, &m.ours_blocks, &m.cand_positions, &m.ours_positions})
      for (float& x : *v) x = std::pow(10.0f, U(rng) - 2);
    m.cand_bins.assign(23, 123456), m.ours_bins.assign(23, 654321);
    m.limit = 4, m.bound = 5000, m.fails = true;
    r.maps.push_back(std::move(m));
  }
  r.worst.assign(10, Element{1, 7, 4095, 127, 1.2345678, 1.2345679, 12.345678, 123456.78});
  const std::string page = r.html("case");
  INFO(page.size() << " bytes");
  CHECK(page.size() <= 2u * 1024 * 1024);
  CHECK(dg_count(page, "class=\"cell\"") == 5 * 16 * 128);
}

TEST_CASE("HTML report: written atomically, an unwritable path an InputError that leaves nothing", "[check][html]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hla_html_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Report r;
  r.pass = true;
  write_html_report((dir / "r.html").string(), r, "t");
  std::ifstream in(dir / "r.html");
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(got == r.html("t"));
  CHECK_THROWS_AS(write_html_report((dir / "missing" / "r.html").string(), r), InputError);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  if (::geteuid() != 0) CHECK_THROWS_AS(write_html_report((dir / "s.html").string(), r), InputError);
  fs::permissions(dir, fs::perms::owner_all);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().filename() != "r.html";
  CHECK(files == 0);
  fs::remove_all(dir);
}
