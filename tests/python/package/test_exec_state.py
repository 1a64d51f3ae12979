"""State through files for exec candidates (hla fuzz --exec / --exec-server with
--features state): the state-continuation probe runs, and a kernel that drops
the state handed to it is found."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CAND = f"{sys.executable} {HERE / 'la1_state_candidate.py'}"


def fuzz(hla_tool, adapter, tmp_path, cases, extra=()):
    args = [hla_tool, "fuzz", *adapter, "--variants", "la1", "--dtypes", "f32,f64", "--features", "decay,den,state",
            "--precision", "f32=f32,f64=f64", "--max-n", "64", "--max-cases", str(cases), "--seed", "5", "--no-progress",
            "--json", "--findings", str(tmp_path / "findings"), *extra]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("mode", ["exec-server", "exec"])
def test_state_files(mode, hla_tool, tmp_path):
    # One process per call in exec mode (~0.25 s of Python start-up each): 10 cases
    # hold 3 state-continuation probes, and the dropped state is found at case 4.
    cases = 60 if mode == "exec-server" else 10
    adapter = ["--exec-server", CAND + " --serve"] if mode == "exec-server" else ["--exec", CAND + " {in} {out} {state_in} {state_out}"]
    good = fuzz(hla_tool, adapter, tmp_path / "good", cases)
    assert good["findings"] == [] and good["probes"].get("state_continuation", 0) > 0, good
    bad_adapter = [adapter[0], adapter[1] + " --bug no_state"]
    # The finding is shrunk in server mode; in exec mode each shrink attempt is processes again.
    bad = fuzz(hla_tool, bad_adapter, tmp_path / "bad", cases,
               ["--stop-after", "1"] + (["--shrink-attempts", "0"] if mode == "exec" else []))
    assert bad["findings"] and bad["findings"][0]["kind"] == "state_continuation", bad


def test_exec_state_needs_the_placeholders(hla_tool, tmp_path):
    p = subprocess.run([hla_tool, "fuzz", "--exec", CAND + " {in} {out}", "--variants", "la1", "--features", "state",
                        "--findings", str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 2 and "{state_in}" in p.stderr


PICKY = '''
import sys
sys.path.insert(0, {here!r})
import hla_oracle
from kernels import fixture_options, kernel

def handle(fixture, candidate):
    fx = hla_oracle.load_fixture(fixture)
    s = fx.shape
    if s["d"] not in (4, 8) or s["dv"] != s["d"] or s["n"] % 4 or s["n"] > 48:
        raise ValueError(f"outside the declared sizes: {{s}}")
    out, den = kernel(fx.q, fx.k, fx.v, fixture_options(fx))
    hla_oracle.save_candidate(candidate, out, den, fixture=fx)

hla_oracle.serve(handle)
'''


def test_exec_size_declarations(hla_tool, tmp_path):
    server = tmp_path / "picky.py"
    server.write_text(PICKY.format(here=str(HERE)))
    args = [hla_tool, "fuzz", "--exec-server", f"{sys.executable} {server}", "--variants", "la1,hla2", "--dtypes", "f32",
            "--features", "decay,varlen,den", "--precision", "f32", "--d", "4,8", "--dv", "d", "--n-multiple", "4",
            "--max-n", "48", "--max-cases", "60", "--seed", "3", "--no-progress", "--json", "--findings", str(tmp_path / "f")]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "d in {4, 8}, dv = d, n multiple of 4" in p.stderr
    bad = list(args)
    bad[bad.index("--n-multiple") + 1] = "64"  # above --max-n 48: no sequence fits
    p = subprocess.run(bad, capture_output=True, text=True)
    assert p.returncode == 2 and "n_multiple" in p.stderr
