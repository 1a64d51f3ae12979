"""hla_oracle.fuzz: hla fuzz's campaign over Python functions in process."""
import logging
import shutil
import subprocess
import time

import numpy as np
import pytest

import hla_oracle
from hla_oracle import Support
from kernels import PRECISION, kernel, la1_state_kernel

FULL = Support(variants=["la1", "hla2"], dtypes=["f32", "f64", "bf16", "f16"],
               features=["decay", "normalize", "clamp", "scale", "gqa", "varlen", "den"], max_n=64, precision=PRECISION)


def test_correct_kernel_runs_clean_and_fast(tmp_path):
    t = time.perf_counter()
    r = hla_oracle.fuzz(kernel, FULL, max_cases=300, seed=7, findings=tmp_path / "f", progress=False)
    wall = time.perf_counter() - t
    ph = {k: 1e3 * v / r.cases for k, v in r.phases.items()}
    print(f"\n[in-process adapter] {r.cases} cases in {wall:.2f} s: {r.cases / wall:.0f} cases/s (numpy hla2/la1, n <= 64); "
          f"per case: reference {ph['reference']:.2f} ms, candidate {ph['candidate']:.2f} ms, check {ph['check']:.2f} ms")
    assert r.ok, r.text
    assert set(r.phases) == {"reference", "candidate", "check"} and sum(r.phases.values()) <= r.seconds
    assert r.cases == 300 and r.probes.get("nan_causality", 0) > 0
    assert "hla fuzz: 300 cases" in r.text


def test_wrong_kernel_is_found_shrunk_and_reproducible(tmp_path, hla_tool):
    bug = lambda q, k, v, o: kernel(q, k, v, o, bug="strict_mask")
    r = hla_oracle.fuzz(bug, FULL, max_cases=50, seed=3, findings=tmp_path / "f", stop_after=1, progress=False)
    assert not r.ok and r.findings[0]["kind"] == "numerics", r.text
    f = r.findings[0]
    assert "hla2" in f["shrunk"] and f["shrink_steps"] > 0
    p = subprocess.run([hla_tool, "check", f["fixture"], f["candidate"], "--precision", f["precision"]],
                       capture_output=True, text=True)
    assert p.returncode == 1, p.stdout
    # The finding's fixture, checked from Python: the same failure.
    fx = hla_oracle.load_fixture(f["fixture"])
    out, den = bug(fx.q, fx.k, fx.v, _case_options(fx))
    assert not fx.check(out, den, precision=f["precision"]).passed


def test_campaign_logs_and_prints_nothing(tmp_path, caplog, capfd):
    # Findings and the fallback folder's notes are warnings of the logger hla_oracle.fuzz, the end an info;
    # nothing reaches stdout or stderr (file descriptors 1 and 2, the C++ side's included).
    bug = lambda q, k, v, o: kernel(q, k, v, o, bug="strict_mask")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("x")
    with caplog.at_level(logging.INFO, logger="hla_oracle.fuzz"):
        r = hla_oracle.fuzz(bug, FULL, max_cases=50, seed=3, findings=blocked, stop_after=1, shrink_attempts=20,
                            progress=True)
    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), (out, err)
    assert len(r.findings) == 1, r.text
    f = r.findings[0]
    records = [(x.name, x.levelno, x.getMessage()) for x in caplog.records]
    note = f"wrote it to {r.fallback_dir} instead"
    assert any(lv == logging.WARNING and note in m for _, lv, m in records), records
    assert ("hla_oracle.fuzz", logging.WARNING, f"finding [{f['kind']}] at case {f['case_index']}: {f['message']}") in records
    assert any(lv == logging.INFO and m.endswith(f"{r.cases} cases in {r.seconds:.1f} s, 1 finding(s)") for _, lv, m in records)
    shutil.rmtree(r.fallback_dir)


def test_campaign_raises_what_its_logger_raises(tmp_path):
    class Refuse(logging.Handler):
        def emit(self, record):
            raise KeyboardInterrupt
    log = logging.getLogger("hla_oracle.fuzz")
    h = Refuse()
    log.addHandler(h)
    try:
        with pytest.raises(KeyboardInterrupt):
            hla_oracle.fuzz(lambda q, k, v, o: kernel(q, k, v, o, bug="strict_mask"), FULL, max_cases=50, seed=3,
                            findings=tmp_path / "f", stop_after=1, shrink_attempts=5, progress=False)
    finally:
        log.removeHandler(h)


def _case_options(fx):
    from types import SimpleNamespace
    kw = fx.kwargs
    return SimpleNamespace(variant=kw["variant"], gamma=float(kw["gamma"]), scale=float(kw["scale"]),
                           normalize=kw["normalize"], eps=float(kw["eps"]),
                           cu_seqlens=fx.cu_seqlens)


def test_same_seed_same_findings(tmp_path):
    bug = lambda q, k, v, o: kernel(q, k, v, o, bug="decay_once")
    s = Support(variants=["hla2"], features=["decay"], max_n=32, precision="f32")
    a = hla_oracle.fuzz(bug, s, max_cases=20, seed=11, findings=tmp_path / "a", progress=False)
    b = hla_oracle.fuzz(bug, s, max_cases=20, seed=11, findings=tmp_path / "b", progress=False)
    key = lambda r: [(f["kind"], f["case_index"], f["shrunk"], f["message"]) for f in r.findings]
    assert a.findings and key(a) == key(b)
    assert all("decay" in f["needs"] for f in a.findings)
    fa = sorted((tmp_path / "a").rglob("*.safetensors"))
    assert fa
    for path in fa:
        assert path.read_bytes() == (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes()


def test_jobs_find_what_one_process_finds(tmp_path):
    # jobs=2: two forked processes share the cases (`hla fuzz --jobs`): the same cases, probes, coverage,
    # findings, groups and files as one process, merged into `findings`; a clean campaign leaves its summary.
    bug = lambda q, k, v, o: kernel(q, k, v, o, bug="decay_once")
    s = Support(variants=["hla2"], features=["decay"], max_n=32, precision="f32")
    one, two = (hla_oracle.fuzz(bug, s, max_cases=24, seed=11, findings=tmp_path / f"j{j}", progress=False,
                                shrink_attempts=10, jobs=j) for j in (1, 2))
    key = lambda r: [(f["kind"], f["case_index"], f["shrunk"], f["message"], f["group"]) for f in r.findings]
    assert one.findings and key(one) == key(two), (one.text, two.text)
    assert (one.cases, one.probes, one.coverage, one.streams) == (two.cases, two.probes, two.coverage, two.streams)
    assert [dict(g, examples=None) for g in one.groups] == [dict(g, examples=None) for g in two.groups]
    files = lambda d: sorted(p.relative_to(d).as_posix() for p in d.rglob("*.safetensors"))
    assert files(tmp_path / "j1") == files(tmp_path / "j2") and not list((tmp_path / "j2").glob(".jobs-*"))
    clean = hla_oracle.fuzz(kernel, FULL, max_cases=30, seed=2, findings=tmp_path / "clean", progress=False, jobs=2)
    assert clean.ok and clean.cases == 30 and [p.name for p in (tmp_path / "clean").iterdir()] == ["summary.json"]
    with pytest.raises(ValueError, match="jobs must be 1 to 64"):
        hla_oracle.fuzz(kernel, FULL, max_cases=1, findings=tmp_path / "g", progress=False, jobs=0)


def test_jobs_fork_a_process_that_ran_torch(tmp_path):
    # The parent has run torch's thread pool before the fork; each job runs the torch kernel with one thread
    # and finds what one process finds (it masks by multiplying: a NaN leaks, nan_causality findings).
    torch = pytest.importorskip("torch")
    import torch_hla2
    torch.ones(256, 256) @ torch.ones(256, 256)

    def fn(q, k, v, o):
        return torch_hla2.hla2(q, k, v, o.gamma, chunk=8), None
    s = Support(variants=["hla2"], dtypes=["f32"], features=["decay", "gqa"], max_n=24, precision="f32")
    one, two = (hla_oracle.fuzz(fn, s, max_cases=16, seed=5, findings=tmp_path / f"t{j}", framework="torch",
                                progress=False, jobs=j) for j in (1, 2))
    key = lambda r: [(f["kind"], f["case_index"], f["shrunk"], f["message"]) for f in r.findings]
    assert one.cases == two.cases == 16 and one.coverage == two.coverage and key(one) == key(two), two.text


def test_findings_grouped_by_signature(tmp_path):
    # Every finding of this bug has one of few signatures (kind and cause): each group counts its findings,
    # two examples of it (the second of a new variety: rules, tensor, needs) are written into its folder.
    bug = lambda q, k, v, o: kernel(q, k, v, o, bug="decay_once")
    s = Support(variants=["hla2"], features=["decay"], max_n=32, precision="f32")
    r = hla_oracle.fuzz(bug, s, max_cases=30, seed=11, findings=tmp_path / "f", progress=False, shrink_attempts=40,
                        examples_per_group=2)
    signatures, examples = {}, {}
    variety = lambda i: tuple(r.findings[i][x] for x in ("rules", "tensor", "needs"))
    for i, f in enumerate(r.findings):
        key = (f["kind"], f["cause"])
        signatures.setdefault(key, []).append(i)
        e = examples.setdefault(key, [])
        if not e or (len(e) < 2 and variety(i) != variety(e[0])):
            e.append(i)
    assert len(r.findings) > len(signatures), r.text  # fewer groups than findings: the test means something
    assert [(g["kind"], g["cause"]) for g in r.groups] == list(signatures)
    for g, (key, members) in zip(r.groups, signatures.items()):
        assert g["count"] == len(members) and g["examples"] == examples[key]
        files = sorted(p.name for p in (tmp_path / "f" / g["dir"]).glob("*.safetensors"))
        assert len(files) == 2 * len(g["examples"]), files  # fixture and candidate each
    for i, f in enumerate(r.findings):
        assert f["example"] == (i in r.groups[f["group"]]["examples"]) and bool(f["fixture"]) == f["example"]
    with pytest.raises(ValueError, match="examples_per_group"):
        hla_oracle.fuzz(bug, s, max_cases=1, findings=tmp_path / "g", progress=False, examples_per_group=0)


def test_exceptions_are_error_findings_and_interrupts_stop(tmp_path):
    def broken(q, k, v, o):
        if q.shape[2] > 20:
            raise RuntimeError("kernel does not take long sequences")
        return kernel(q, k, v, o)
    r = hla_oracle.fuzz(broken, Support(variants=["la1"], max_n=64, precision="f32"), max_cases=30, seed=1,
                        findings=tmp_path / "f", stop_after=1, progress=False)
    assert r.findings and r.findings[0]["kind"] == "error"
    assert "RuntimeError: kernel does not take long sequences" in r.findings[0]["message"]

    def interrupted(q, k, v, o):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        hla_oracle.fuzz(interrupted, Support(variants=["la1"]), max_cases=5, findings=tmp_path / "g", progress=False)


def test_bad_outputs_are_findings(tmp_path):
    r = hla_oracle.fuzz(lambda q, k, v, o: kernel(q, k, v, o)[0][:, :, :-1], Support(variants=["la1"], precision="f32"),
                        max_cases=5, findings=tmp_path / "f", stop_after=1, progress=False)
    assert r.findings[0]["kind"] == "bad_output" and "shape" in r.findings[0]["message"]


def test_state_continuation_probe(tmp_path):
    s = Support(variants=["la1"], dtypes=["f32", "f64"], features=["decay", "den", "state"], max_n=64,
                precision="f32=f32,f64=f64")
    good = hla_oracle.fuzz(la1_state_kernel, s, max_cases=60, seed=5, findings=tmp_path / "good", progress=False)
    assert good.ok, good.text
    assert good.probes.get("state_continuation", 0) > 0
    bad = hla_oracle.fuzz(lambda q, k, v, o: la1_state_kernel(q, k, v, o, bug="no_state"), s, max_cases=60, seed=5,
                          findings=tmp_path / "bad", stop_after=1, progress=False)
    assert bad.findings and bad.findings[0]["kind"] == "state_continuation", bad.text


def test_support_declarations_hold_for_every_case(tmp_path):
    seen = set()

    def picky(q, k, v, o):
        n, d, dv = q.shape[2], q.shape[3], v.shape[3]
        assert d in (4, 8) and dv == d and n % 4 == 0 and n <= 48, (n, d, dv)
        if o.cu_seqlens is not None:
            assert all(int(x) % 4 == 0 for x in o.cu_seqlens)
        seen.add((d, n))
        return kernel(q, k, v, o)

    s = Support(variants=["la1", "hla2"], features=["decay", "varlen"], d=[4, 8], dv="d", n_multiple=4, max_n=48,
                precision="f32")
    r = hla_oracle.fuzz(picky, s, max_cases=120, seed=2, findings=tmp_path / "f", progress=False)
    assert r.ok, r.text
    assert {d for d, _ in seen} == {4, 8}
    # ... also for shrunk cases: a bug found under the declaration is shrunk inside it.
    r = hla_oracle.fuzz(lambda q, k, v, o: picky(q, k, v, o) if o.variant == "la1" else kernel(q, k, v, o, bug="strict_mask"),
                        s, max_cases=40, seed=2, findings=tmp_path / "g", stop_after=1, progress=False)
    assert r.findings and r.findings[0]["kind"] == "numerics", r.text
    assert "n=4 d=4 dv=4" in r.findings[0]["shrunk"] or "d=4 dv=4" in r.findings[0]["shrunk"]


def test_bad_support_is_refused():
    with pytest.raises(hla_oracle.InputError, match="n_multiple"):
        hla_oracle.fuzz(kernel, Support(max_n=8, n_multiple=16), max_cases=1, progress=False)
    with pytest.raises(ValueError, match="unknown support field"):
        hla_oracle.fuzz(kernel, {"variant": ["la1"]}, max_cases=1, progress=False)
    with pytest.raises(hla_oracle.InputError, match="unknown feature"):
        hla_oracle.fuzz(kernel, Support(features=["teleport"]), max_cases=1, progress=False)


def test_support_default_variants_are_the_tables_less_the_paper_literal():
    """Support()'s default variants come from the C++ variant table at import
    (hla_oracle._core.variants()): every row but the paper-literal ones, which
    no kernel implements (hla fuzz's default likewise)."""
    default = Support().variants
    assert default == list(hla_oracle._support.ALL_VARIANTS) == list(hla_oracle._core.variants())
    assert "hla3_paper" not in default
    assert {"la1", "hla2", "ahla", "hla3"} <= set(default)
    assert hla_oracle.__version__ == hla_oracle._core.__version__ and hla_oracle.__version__.count(".") == 2
