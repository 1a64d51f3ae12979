"""The server side of `hla fuzz --exec-server CMD` (README: exec server protocol).

hla starts CMD once and writes one request line per case on its stdin:

    run<TAB>IN<TAB>OUT

IN is a fixture file (safetensors, the format `hla fuzz --exec` hands over),
OUT the candidate file to write. The server answers each line with one line on
stdout, `ok` or `error <message>`, and reads the next. hla restarts it after a
crash, a timeout or an `error`; a run that answers `ok` without writing OUT is a
`bad_output` finding.

    from hla_oracle.exec_server import serve
    serve(lambda fixture, candidate: my_kernel_files(fixture, candidate))
"""
import sys
import traceback


def serve(handle, stdin=None, stdout=None):
    """Answers requests until stdin closes: handle(in_path, out_path) per
    request; an exception becomes `error <its message>` (one line)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    for line in stdin:
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3 or parts[0] != "run":
            answer = "error malformed request " + repr(line[:80])
        else:
            try:
                handle(parts[1], parts[2])
                answer = "ok"
            except Exception as e:  # the candidate's failure, reported to hla
                traceback.print_exc(file=sys.stderr)
                answer = "error " + " ".join(f"{type(e).__name__}: {e}".split())
        stdout.write(answer + "\n")
        stdout.flush()  # hla waits for the line: never leave it in a buffer
