// `hla eval FIXTURE --out CANDIDATE`: runs one of our forms (or a paper-literal
// one, --paper E1…E6) on a fixture's inputs in a chosen precision and writes a
// candidate file — what a correct (or a textbook-wrong) kernel would write.
#include "commands.hpp"

#include "hla/check/fixture.hpp"

#include <iostream>

namespace hla::cli {
namespace {

struct EvalArgs {
  std::string fixture, out, form = "chunked_matmul", precision = "f32", paper, dtype;
  Index chunk = 64;
};

PaperForm parse_paper(const std::string& s) {
  for (PaperForm f : {PaperForm::E1_hla2_streaming, PaperForm::E2_hla2_scan, PaperForm::E3_ahla_scan,
                      PaperForm::E5_hla2_chunked, PaperForm::E6_ahla_chunked})
    if (to_string(f).rfind(s, 0) == 0) return f;
  throw InputError("unknown paper form '" + s + "' (expected E1, E2, E3, E5 or E6)");
}

int run_eval(const EvalArgs& a) {
  const io::Fixture f = io::read_fixture(a.fixture);
  const check::Precision prec = check::parse_precision(a.precision);
  const DType out = a.dtype.empty() ? (prec == check::Precision::f64 ? DType::f64 : DType::f32) : parse_dtype(a.dtype);
  const check::CandidateOutputs c = a.paper.empty() ? check::ours(f.problem, prec, parse_form(a.form), a.chunk, out)
                                                    : check::ours_paper(f.problem, prec, parse_paper(a.paper), a.chunk, out);
  io::write_candidate(a.out, check::candidate_of(c), f);
  std::cout << "hla eval: wrote " << a.out << " (" << (a.paper.empty() ? a.form : "paper " + a.paper) << " in "
            << a.precision << ", out " << to_string(out) << ")\n";
  return 0;
}

}  // namespace

void add_eval(CLI::App& app, Action& action) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* c = app.add_subcommand("eval", "run one of our forms on a fixture's inputs and write a candidate file");
  c->add_option("FIXTURE", a->fixture, "fixture file")->required();
  c->add_option("--out", a->out, "candidate file to write")->required();
  c->add_option("--form", a->form, "naive | streaming | streaming_paper_state | fold | blelloch | chunked_scan | chunked_matmul");
  c->add_option("--paper", a->paper, "a paper-literal (wrong) form instead: E1 | E2 | E3 | E5 | E6");
  c->add_option("--precision", a->precision, "f64 | f32 | tf32 | bf16 | f16 (bf16/f16 round after every operation)");
  c->add_option("--dtype", a->dtype, "dtype of the written outputs (default f64 for f64, else f32)");
  c->add_option("--chunk", a->chunk, "chunk width")->check(CLI::PositiveNumber);
  c->callback([a, &action] { action = [a] { return run_eval(*a); }; });
}

}  // namespace hla::cli
