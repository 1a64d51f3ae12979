#!/usr/bin/env python3
"""ctest hla_html_report: `hla check --html FILE` on failing cases, the pages
rendered by a real browser (issue 32).

Cases: planted bugs of ours (the paper's E5 chunk form without the carry ×
chunk term, from `hla eval --paper E5`; the outputs of a correct order with
every 32nd token perturbed; a correct kernel of ours for the PASS page) and,
when the zoo is built (ZOO_PATHS), the shrunk finding of a buggy zoo member
(`hla fuzz`). For each: the exit status, the hint in the text and JSON
reports, the same bytes twice, no temporary file left. Then headless
Chromium (Debian's package `chromium`) loads every page: --dump-dom must
hold the verdict and one SVG cell per (row, block), and --screenshot must
show the failing cells in red. The screenshots stay in WORK_DIR (a CI
artifact). Without Chromium the browser part is SKIPPED (exit 77), saying
how to install it; everything before it has run.

Usage: html_report_test.py HLA WORK_DIR [ZOO_PATHS]
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

HLA = os.path.abspath(sys.argv[1])
WORK = Path(sys.argv[2]).resolve()
ZOO_PATHS = Path(sys.argv[3]) if len(sys.argv) > 3 else None
SKIP = 77


def run(*args, expect=None):
    p = subprocess.run([HLA, *map(str, args)], capture_output=True, text=True, timeout=600)
    if expect is not None and p.returncode != expect:
        sys.exit(f"FAIL: hla {' '.join(map(str, args))}: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p


def perturb_every_32nd(src, dst):
    """A candidate file with out at every 32nd token (from 32 on) scaled by 1 + 1e-3."""
    raw = src.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    info = header["out"]
    assert info["dtype"] == "F32", info
    B, H, T, D = info["shape"]
    start = info["data_offsets"][0]
    for b in range(B):
        for h in range(H):
            for t in range(32, T, 32):
                for c in range(D):
                    at = start + 4 * (((b * H + h) * T + t) * D + c)
                    x = struct.unpack_from("<f", data, at)[0]
                    struct.pack_into("<f", data, at, x * (1 + 1e-3))
    dst.write_bytes(raw[:8 + n] + bytes(data))


def zoo_case(cases):
    """The shrunk finding of zoo member gqa_wrong_group (hla fuzz), when the zoo is built."""
    if not ZOO_PATHS or not ZOO_PATHS.exists():
        print("note: no zoo paths given: zoo case left out")
        return
    lib = json.loads(ZOO_PATHS.read_text()).get("gqa_wrong_group")
    if not lib or not Path(lib).exists():
        print("note: zoo member gqa_wrong_group not built: zoo case left out")
        return
    findings = WORK / "findings"
    # Every finding written (all of a group, not the first 3), the first by name taken: the page this test was made on.
    run("fuzz", "--lib", lib, "--max-cases", 300, "--seed", 1, "--no-progress", "--examples-per-group", 1000000,
        "--findings", findings)
    for fx in sorted(findings.rglob("numerics-*.safetensors"), key=lambda p: p.name):
        cand = fx.with_name(fx.name[:-len(".safetensors")] + ".candidate.safetensors")
        if not fx.name.endswith(".candidate.safetensors") and cand.exists():
            cases.append(("zoo_gqa_wrong_group", fx, cand, 1, "heads"))
            return
    sys.exit(f"FAIL: hla fuzz found no case of gqa_wrong_group in {findings}")


def check_page(name, fx, cand, status, hint):
    page = WORK / f"{name}.html"
    p = run("check", fx, cand, "--no-progress", "--html", page, expect=status)
    if hint and hint not in p.stdout:
        sys.exit(f"FAIL: {name}: no hint '{hint}' in the text report\n{p.stdout}")
    js = json.loads(run("check", fx, cand, "--no-progress", "--json").stdout)
    if bool(hint) != bool(js["hints"]) or (hint and not any(hint in h for h in js["hints"])):
        sys.exit(f"FAIL: {name}: JSON hints {js['hints']}, expected '{hint}'")
    again = WORK / f"{name}.again.html"
    run("check", fx, cand, "--no-progress", "--html", again, expect=status)
    if page.read_bytes() != again.read_bytes():
        sys.exit(f"FAIL: {name}: two runs wrote different pages")
    again.unlink()
    size = page.stat().st_size
    print(f"{name}: {size} bytes, hints {js['hints']}")
    return page


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, w = 8, b"", 0
    while at < len(raw):
        n, kind = struct.unpack(">I4s", raw[at:at + 8])
        body = raw[at + 8:at + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        at += 12 + n
    data, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = data[y * (stride + 1)], bytearray(data[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def browser(pages):
    exe = next((shutil.which(x) for x in ("chromium", "chromium-browser", "google-chrome") if shutil.which(x)), None)
    if not exe:
        print("SKIPPED: the browser part: no headless Chromium on PATH (install Debian's package: "
              "bash scripts/apt_install.sh html chromium)")
        sys.exit(SKIP)
    profile = WORK / "chromium-profile"
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             f"--user-data-dir={profile}"]
    for name, page, verdict, failing in pages:
        dom = subprocess.run(flags + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
        if f'data-verdict="{verdict}"' not in dom:
            sys.exit(f"FAIL: {name}: the rendered DOM holds no verdict {verdict}")
        cells, expected = len(re.findall(r'<rect class="cell"', dom)), 0
        for m in re.finditer(r'class="heatmap" data-rows="(\d+)" data-blocks="(\d+)"', dom):
            expected += int(m.group(1)) * int(m.group(2))
        if cells == 0 or cells != expected:
            sys.exit(f"FAIL: {name}: {cells} SVG cells in the DOM, expected {expected}")
        shot = WORK / f"{name}.png"
        shot.unlink(missing_ok=True)
        subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1000,1400", page.as_uri()], capture_output=True,
                       timeout=120)
        if not shot.exists():
            sys.exit(f"FAIL: {name}: Chromium wrote no screenshot")
        # Cells above rule 3's line are drawn orange to dark red (red above blue), those below pale to
        # dark blue: the screenshot must show the failing cells' own colours (crisp edges: exact pixels).
        fills = {tuple(int(f[i:i + 2], 16) for i in (0, 2, 4)) for f in re.findall(r'<rect class="cell"[^>]*fill="#([0-9a-f]{6})"', dom)}
        hot = {c for c in fills if c[0] > c[2]}
        w, h, rows = png_pixels(shot)
        seen = sum(1 for row in rows for px in row if px in hot)
        if failing != bool(hot) or (failing and seen < 200):
            sys.exit(f"FAIL: {name}: {len(hot)} colours of failing cells in the DOM, {seen} of their pixels in {shot}")
        print(f"{name}: rendered, {cells} cells, {seen} pixels of failing cells, screenshot {shot}")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    fx = WORK / "case.safetensors"
    run("gen", "--case", "variant=hla2,gamma=0.99,n=200,d=16,dv=16,B=2,H=4,Hkv=2,dtype=f32", "--out", fx, "--no-progress", expect=0)
    e5, ok, periodic = WORK / "e5.candidate.safetensors", WORK / "ok.candidate.safetensors", WORK / "p32.candidate.safetensors"
    run("eval", fx, "--out", e5, "--paper", "E5", "--precision", "f32", "--chunk", 16, expect=0)
    run("eval", fx, "--out", ok, "--form", "chunked_matmul", "--precision", "f32", expect=0)
    perturb_every_32nd(ok, periodic)
    cases = [("planted_e5", fx, e5, 1, "wrong from token 16"), ("planted_periodic32", fx, periodic, 1, "periodic at width 32"),
             ("correct", fx, ok, 0, "")]
    zoo_case(cases)
    pages = [(name, check_page(name, f, c, s, h), "FAIL" if s else "PASS", s == 1) for name, f, c, s, h in cases]
    leftovers = [p.name for p in WORK.iterdir() if ".tmp." in p.name]
    if leftovers:
        sys.exit(f"FAIL: temporary files left: {leftovers}")
    browser(pages)
    print("ok")


if __name__ == "__main__":
    main()
