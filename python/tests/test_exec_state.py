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
    cases = 60 if mode == "exec-server" else 25
    adapter = ["--exec-server", CAND + " --serve"] if mode == "exec-server" else ["--exec", CAND + " {in} {out} {state_in} {state_out}"]
    good = fuzz(hla_tool, adapter, tmp_path / "good", cases)
    assert good["findings"] == [] and good["probes"].get("state_continuation", 0) > 0, good
    bad_adapter = [adapter[0], adapter[1] + " --bug no_state"]
    bad = fuzz(hla_tool, bad_adapter, tmp_path / "bad", cases, ["--stop-after", "1"])
    assert bad["findings"] and bad["findings"][0]["kind"] == "state_continuation", bad


def test_exec_state_needs_the_placeholders(hla_tool, tmp_path):
    p = subprocess.run([hla_tool, "fuzz", "--exec", CAND + " {in} {out}", "--variants", "la1", "--features", "state",
                        "--findings", str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 2 and "{state_in}" in p.stderr
