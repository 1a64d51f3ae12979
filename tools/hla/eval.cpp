// `hla eval FIXTURE --out CANDIDATE`: runs one of our forms (or a paper-literal
// one, --paper E1…E6) on a fixture's inputs in a chosen precision and writes a
// candidate file — what a correct (or a textbook-wrong) kernel would write.
#include "commands.hpp"

#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"
#include "hla/io/printable.hpp"

#include <filesystem>
#include <iostream>

namespace hla::cli {
namespace {

struct EvalArgs {
  std::string fixture, out, form = "chunked_matmul", precision = "f32", paper, dtype, grad;
  Index chunk = 64;
  bool form_given = false;
};

// Exactly E1, E2, E3, E5, E6 or the full name (E1_hla2_streaming): a prefix
// match would take "" or "E" for E1.
PaperForm parse_paper(const std::string& s) {
  for (PaperForm f : {PaperForm::E1_hla2_streaming, PaperForm::E2_hla2_scan, PaperForm::E3_ahla_scan,
                      PaperForm::E5_hla2_chunked, PaperForm::E6_ahla_chunked}) {
    const std::string name = to_string(f);
    if (s == name || s == name.substr(0, name.find('_'))) return f;
  }
  throw InputError("unknown paper form '" + io::printable(s) +
                   "' (expected E1, E2, E3, E5 or E6, or a full name such as E1_hla2_streaming)");
}

int run_eval(const EvalArgs& a) {
  // Everything the command line says is checked before the (possibly long) evaluation.
  if (a.form_given && !a.paper.empty()) throw InputError("give one of --form and --paper, not both");
  const engine::Precision prec = engine::parse_precision(a.precision);
  const std::optional<PaperForm> paper = a.paper.empty() ? std::nullopt : std::optional(parse_paper(a.paper));
  const Form form = parse_form(a.form);
  const DType out = a.dtype.empty() ? (prec == engine::Precision::f64 ? DType::f64 : DType::f32) : parse_dtype(a.dtype);
  check_output_file("--out", a.out);
  std::error_code ec;
  if (std::filesystem::equivalent(a.fixture, a.out, ec))
    throw InputError("--out '" + io::printable(a.out) + "' is the fixture itself: it would be overwritten");
  std::optional<BackwardForm> grad;
  if (!a.grad.empty()) {
    for (BackwardForm b : kBackwardForms)
      if (to_string(b) == a.grad) grad = b;
    if (!grad) throw InputError("--grad '" + io::printable(a.grad) + "' is not a backward form (naive, streaming, chunked, chunked_matmul)");
  }
  const io::Fixture f = io::read_fixture(a.fixture);
  if (grad && !f.gradients)
    throw InputError("--grad: " + io::printable(a.fixture) + " carries no gradients (no upstream do); write one with hla gen --case ...,grad=true");
  engine::CandidateOutputs c =
      paper ? engine::ours_paper(f.problem, prec, *paper, a.chunk, out) : engine::ours(f.problem, prec, form, a.chunk, out);
  if (grad) engine::ours_gradients(f.problem, f.dout, f.dden, *grad, a.chunk, out, c, prec);
  io::write_candidate(a.out, check::candidate_of(c), f);
  std::cout << "hla eval: wrote " << io::printable(a.out) << " (" << (paper ? "paper " + to_string(*paper) : a.form) << " in "
            << a.precision << ", out " << to_string(out)
            << (grad ? "; dq, dk, dv by the backward form " + a.grad + " in " + a.precision : "") << ")\n";
  return 0;
}

}  // namespace

void add_eval(CLI::App& app, Action& action) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* c = app.add_subcommand("eval", "run one of our forms on a fixture's inputs and write a candidate file");
  c->add_option("FIXTURE", a->fixture, "fixture file")->required()->check(non_empty);
  c->add_option("--out", a->out, "candidate file to write")->required()->check(non_empty);
  CLI::Option* form =
      c->add_option("--form", a->form, "naive | streaming | streaming_paper_state | fold | blelloch | chunked_scan | chunked_matmul")
          ->check(non_empty);
  c->add_option("--paper", a->paper, "a paper-literal (wrong) form instead: E1 | E2 | E3 | E5 | E6")->check(non_empty);
  c->add_option("--precision", a->precision,
                "f64 | f32 | tf32 | bf16 | f16 | bf16+f32 | f16+f32 (bf16/f16 round after every operation; tf32, bf16+f32, f16+f32 "
                "round products' operands and sum in f32, --form chunked_matmul only)")
      ->check(non_empty);
  c->add_option("--dtype", a->dtype, "dtype of the written outputs (default f64 for f64, else f32)")->check(non_empty);
  c->add_option("--chunk", a->chunk, "chunk width")->check(integer_in(1, 1 << 20));
  c->add_option("--grad", a->grad,
                "also write dq, dk, dv (a fixture with gradients): backward form naive | streaming | chunked | chunked_matmul, "
                "evaluated in --precision (bf16, f16: chunked forms only) and rounded to --dtype")
      ->check(non_empty);
  c->callback([a, form, &action] {
    a->form_given = form->count() > 0;
    action = [a] { return run_eval(*a); };
  });
}

}  // namespace hla::cli
