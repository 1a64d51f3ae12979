"""The server side of `hla fuzz --exec-server CMD` (docs/fuzzing.md "Exec server": the protocol).

hla starts CMD once and writes one request line per case on its stdin:

    run<TAB>IN<TAB>OUT                              (a candidate without state)
    run<TAB>IN<TAB>OUT<TAB>STATE_IN<TAB>STATE_OUT   (one that declares --features state)

IN is a fixture file (safetensors, the format `hla fuzz --exec` hands over),
OUT the candidate file to write; STATE_IN a state file to start from and
STATE_OUT where to write the final state, each "-" when there is none (a state
file: safetensors float tensors of the kernel's own naming, handed back as F64
with the same names and shapes). The server answers each line with one line on
stdout, `ok` or `error <message>`, and reads the next (an `error` keeps it
running). hla restarts it after a crash, a timeout or a malformed answer; a
run that answers `ok` without writing OUT is a `bad_output` finding.

    from hla_oracle.exec_server import serve
    serve(lambda fixture, candidate: my_kernel_files(fixture, candidate))
    serve(lambda fixture, candidate, state_in, state_out: ...)   # state_in/out: a path or None
"""
import sys
import traceback


def serve(handle, stdin=None, stdout=None):
    """Answers requests until stdin closes: handle(in_path, out_path) per
    request, or handle(in_path, out_path, state_in, state_out) for requests
    with state fields (None for "-"); an exception becomes `error <its
    message>` (one line)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    for line in stdin:
        parts = line.rstrip("\n").split("\t")
        if len(parts) not in (3, 5) or parts[0] != "run":
            answer = "error malformed request " + repr(line[:80])
        else:
            try:
                if len(parts) == 3:
                    handle(parts[1], parts[2])
                else:
                    handle(parts[1], parts[2], *(None if p == "-" else p for p in parts[3:]))
                answer = "ok"
            except Exception as e:  # the candidate's failure, reported to hla
                traceback.print_exc(file=sys.stderr)
                answer = "error " + " ".join(f"{type(e).__name__}: {e}".split())
        stdout.write(answer + "\n")
        stdout.flush()  # hla waits for the line: never leave it in a buffer
