#!/usr/bin/env bash
# ctest: `hla fuzz` is deterministic, shards are disjoint, findings are
# reproduced by `hla check` and `--replay`, and bad usage exits 2.
set -u
hla="$1"; zoo="$2"; work="$3"
rm -rf "$work" && mkdir -p "$work"
fails=0
note() { echo "$1"; if [ "${1#FAILED}" != "$1" ]; then fails=$((fails + 1)); fi; return 0; }
buggy="$zoo/libzoo_e1_decay.so"; good="$zoo/libzoo_correct_streaming.so"

# Same seed, same findings.
for r in a b; do
  "$hla" fuzz --lib "$buggy" --seed 7 --max-cases 40 --findings "$work/$r" --json --no-progress > "$work/$r.json"
done
strip() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print([(f['kind'], f['case_index'], f['shrunk'], f['message']) for f in j['findings']], j['cases'])" "$1"; }
[ "$(strip "$work/a.json")" = "$(strip "$work/b.json")" ] && note "ok: deterministic" || note "FAILED: two runs with --seed 7 differ"
first=$(cd "$work/a" && find . -name '*.safetensors' | sort | head -1)
[ -n "$first" ] && cmp -s "$work/a/$first" "$work/b/$first" \
  && note "ok: finding files byte-identical" || note "FAILED: finding files differ between runs"

# Findings of one signature (kind and cause) form a group: one folder with --examples-per-group findings'
# files (a repeated variety -- rules, tensor, needs -- not in the last slot), one summary line with its count.
"$hla" fuzz --lib "$buggy" --seed 3 --max-cases 60 --shrink-attempts 40 --examples-per-group 2 --findings "$work/grouped" \
  --no-progress > "$work/grouped.txt"
"$hla" fuzz --lib "$buggy" --seed 3 --max-cases 60 --shrink-attempts 40 --examples-per-group 2 --findings "$work/grouped_j" \
  --json --no-progress > "$work/grouped.json"
python3 - "$work/grouped.json" "$work/grouped_j" "$work/grouped.txt" <<'PY' && note "ok: findings grouped by signature" \
  || note "FAILED: findings not grouped by signature"
import json, pathlib, sys
j = json.load(open(sys.argv[1])); root = pathlib.Path(sys.argv[2]); text = open(sys.argv[3]).read()
sig, ex = {}, {}
variety = lambda i: tuple(j["findings"][i][k] for k in ("rules", "tensor", "needs"))
for i, f in enumerate(j["findings"]):
    key = (f["kind"], f["cause"])
    sig.setdefault(key, []).append(i)
    e = ex.setdefault(key, [])
    if len(e) < 2 and (variety(i) not in map(variety, e) or len(e) + 1 < 2):
        e.append(i)
assert len(j["findings"]) > len(sig) >= 1, (len(j["findings"]), sig.keys())
assert [(g["kind"], g["cause"]) for g in j["groups"]] == list(sig)
for g, (key, members) in zip(j["groups"], sig.items()):
    assert g["count"] == len(members) and g["examples"] == ex[key], (g, members)
    names = sorted(p.name for p in (root / g["dir"]).iterdir())
    assert names == sorted(n for i in ex[key] for n in (f"{g['kind']}-{j['findings'][i]['case_index']}.safetensors",
                                                           f"{g['kind']}-{j['findings'][i]['case_index']}.candidate.safetensors")), names
    assert f"[{g['kind']}] {g['count']} finding(s)" in text
assert sorted(p.name for p in root.iterdir() if p.is_file()) == ["summary.json"]
assert json.load(open(root / "summary.json"))["groups"] == j["groups"]
PY

# Shards take disjoint case streams.
for s in 0 1; do
  "$hla" fuzz --lib "$buggy" --seed 7 --max-cases 10 --shard $s/2 --findings "$work/s$s" --json --no-progress --shrink-attempts 0 > "$work/s$s.json"
done
python3 - "$work/s0.json" "$work/s1.json" <<'PY' && note "ok: shards disjoint" || note "FAILED: shard case streams overlap"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ia = {f["case_index"] for f in a["findings"]}; ib = {f["case_index"] for f in b["findings"]}
assert ia and ib and all(i % 2 == 0 for i in ia) and all(i % 2 == 1 for i in ib), (ia, ib)
PY

# The shards' findings merge into one folder (hla fuzz-merge), in case order, grouped by the same signature,
# duplicates dropped.
for s in 0 1; do
  "$hla" fuzz --lib "$buggy" --seed 3 --max-cases 20 --shard $s/2 --shrink-attempts 30 --findings "$work/m$s" --json \
    --no-progress > "$work/m$s.json"
done
"$hla" fuzz-merge "$work/m0" "$work/m1" --out "$work/merged" --examples-per-group 2 --json > "$work/merged.json"; rc=$?
python3 - "$work" <<'PY' && [ $rc = 1 ] && note "ok: fuzz-merge groups two shards' findings" || note "FAILED: fuzz-merge (rc $rc)"
import json, pathlib, sys
w = pathlib.Path(sys.argv[1])
shards = [json.load(open(w / f"m{s}.json")) for s in (0, 1)]
m = json.load(open(w / "merged.json"))
distinct, seen = [], set()
# In case order across the shards (ties in the order given), the first of each duplicate kept.
for f in sorted((f for j in shards for f in j["findings"]), key=lambda f: f["case_index"]):
    if (f["kind"], f["shrunk"], f["message"]) not in seen:
        seen.add((f["kind"], f["shrunk"], f["message"])); distinct.append(f)
assert all(j["findings"] for j in shards) and m["cases"] == sum(j["cases"] for j in shards)
assert [(f["kind"], f["case_index"], f["shrunk"]) for f in m["findings"]] == [(f["kind"], f["case_index"], f["shrunk"]) for f in distinct]
sig = {}
for i, f in enumerate(distinct):
    sig.setdefault((f["kind"], f["cause"]), []).append(i)
assert [(g["kind"], g["cause"], g["count"]) for g in m["groups"]] == [k + (len(v),) for k, v in sig.items()]
for g in m["groups"]:
    assert 1 <= len(g["examples"]) <= 2
    for e in g["examples"]:
        f = m["findings"][e]
        assert pathlib.Path(f["fixture"]).parent == w / "merged" / g["dir"] and pathlib.Path(f["candidate"]).is_file()
assert json.load(open(w / "merged" / "summary.json"))["groups"] == m["groups"]
assert m["streams"] == [{"seed": 3, "shard": 0, "shards": 1}], m["streams"]
PY
# Every shard writes its summary, a clean one too: the shards of a clean campaign merge into its total (exit 0),
# clean and failing shards into the failing ones' findings (exit 1), with cases, probes and coverage added up.
for s in 0 1 2; do
  "$hla" fuzz --lib "$good" --seed 3 --max-cases 12 --shard $s/3 --findings "$work/c$s" --json --no-progress > "$work/c$s.json"
done
"$hla" fuzz-merge "$work/c0" "$work/c1" "$work/c2" --out "$work/clean" --json > "$work/clean.json"; rc_clean=$?
"$hla" fuzz-merge "$work/c1" --out "$work/one_clean" > /dev/null; rc_one=$?
"$hla" fuzz-merge "$work/c0" "$work/c1" "$work/c2" --out "$work/clean_text" > "$work/clean.txt"
python3 - "$work" <<'PY' && [ $rc_clean = 0 ] && [ $rc_one = 0 ] && grep -q "^hla fuzz: 36 cases in .*; 0 finding(s)" "$work/clean.txt" \
  && note "ok: fuzz-merge of clean shards -> their total, 0 findings, exit 0" || note "FAILED: fuzz-merge of clean shards (rc $rc_clean)"
import json, pathlib, sys
w = pathlib.Path(sys.argv[1])
shards = [json.load(open(w / f"c{s}.json")) for s in range(3)]
m = json.load(open(w / "clean.json"))
assert all(not j["findings"] and (w / f"c{s}" / "summary.json").is_file() for s, j in enumerate(shards))
assert m["cases"] == sum(j["cases"] for j in shards) == 36 and not m["findings"], m["cases"]
for key in ("probes", "coverage"):
    for sub in ([None] if key == "probes" else ["variants", "dtypes", "options"]):
        total = {}
        for j in shards:
            for x, n in (j[key] if sub is None else j[key][sub]).items():
                total[x] = total.get(x, 0) + n
        assert (m[key] if sub is None else m[key][sub]) == total, (key, sub)
assert m["streams"] == [{"seed": 3, "shard": 0, "shards": 1}] and m["support"] == shards[0]["support"], m["streams"]
assert sorted(p.name for p in (w / "clean").iterdir()) == ["summary.json"]
PY
"$hla" fuzz-merge "$work/m0" "$work/m1" "$work/c2" --out "$work/mixed" --json > "$work/mixed.json" 2> "$work/err"; rc=$?
[ $rc = 2 ] && grep -q "another support" "$work/err" && note "ok: fuzz-merge of another candidate's shards -> 2" \
  || note "FAILED: fuzz-merge of two candidates' shards must exit 2 (rc $rc)"
# A varlen bug (state_not_reset) shows in some shards of 2 cases: the first seed whose three shards hold a clean
# and a failing one.
for seed in $(seq 1 30); do
  for s in 0 1 2; do
    "$hla" fuzz --lib "$zoo/libzoo_state_not_reset.so" --seed $seed --max-cases 2 --shard $s/3 --shrink-attempts 0 \
      --findings "$work/v$s" --json --no-progress > "$work/v$s.json"; echo $? >> "$work/v.rcs"
  done
  [ "$(sort -u "$work/v.rcs" | tr -d '\n')" = 01 ] && break
  rm -rf "$work"/v[0-2] "$work/v.rcs"
done
"$hla" fuzz-merge "$work/v0" "$work/v1" "$work/v2" --out "$work/mixed" --json > "$work/mixed.json"; rc=$?
python3 - "$work" <<'PY' && [ $rc = 1 ] && note "ok: fuzz-merge of clean and failing shards -> the findings, exit 1" \
  || note "FAILED: fuzz-merge of clean and failing shards (rc $rc)"
import json, pathlib, sys
w = pathlib.Path(sys.argv[1])
v = [json.load(open(w / f"v{s}" / "summary.json")) for s in range(3)]
m = json.load(open(w / "mixed.json"))
assert any(not j["findings"] for j in v) and any(j["findings"] for j in v), "no seed gave clean and failing shards"
assert m["cases"] == sum(j["cases"] for j in v) == 6 and len(m["findings"]) == sum(len(j["findings"]) for j in v)
assert m["streams"] == [{"seed": v[0]["streams"][0]["seed"], "shard": 0, "shards": 1}], m["streams"]
PY
"$hla" fuzz-merge "$work/m0" "$work/m0" --out "$work/merged_self" 2> "$work/err"; [ $? = 2 ] && grep -q "ran the same cases" "$work/err" \
  && [ ! -e "$work/merged_self" ] && note "ok: fuzz-merge of a shard with itself -> 2" || note "FAILED: fuzz-merge of overlapping shards must exit 2"
"$hla" fuzz-merge "$work/m0" "$work/nope" --out "$work/merged_bad" 2> "$work/err"; [ $? = 2 ] && grep -q "nope: no such folder" "$work/err" \
  && note "ok: fuzz-merge of a missing folder -> 2" || note "FAILED: fuzz-merge of a missing folder must exit 2"
mkdir -p "$work/empty"; "$hla" fuzz-merge "$work/m0" "$work/empty" --out "$work/merged_bad" 2> "$work/err"; [ $? = 2 ] \
  && grep -q "empty holds no summary.json" "$work/err" && note "ok: fuzz-merge of a folder without summary.json -> 2" \
  || note "FAILED: fuzz-merge of a non-findings folder must exit 2"
# A damaged shard (an example's fixture file gone) is refused before anything is written to --out.
cp -r "$work/m1" "$work/m1_damaged" && find "$work/m1_damaged" -name "*.safetensors" ! -name "*.candidate.*" | head -1 | xargs rm -f
"$hla" fuzz-merge "$work/m0" "$work/m1_damaged" --out "$work/merged_damaged" 2> "$work/err"; rc=$?
[ $rc = 2 ] && grep -q "is missing" "$work/err" && [ ! -e "$work/merged_damaged" ] \
  && note "ok: fuzz-merge of a shard missing an example file -> 2, nothing written" \
  || { cat "$work/err"; note "FAILED: fuzz-merge of a damaged shard (rc $rc) must exit 2 and write nothing"; }
fx=$(ls "$work"/merged/numerics-*/numerics-*.safetensors | grep -v candidate | head -1)
"$hla" check "$fx" "${fx%.safetensors}.candidate.safetensors" > /dev/null; [ $? = 1 ] && note "ok: a merged finding reproduces" \
  || note "FAILED: a merged finding does not reproduce"

# A finding is a fixture `hla check` and --replay reproduce; the correct library passes it.
fx=$(ls "$work"/a/numerics-*/numerics-*.safetensors | grep -v candidate | head -1)
"$hla" check "$fx" "${fx%.safetensors}.candidate.safetensors" > /dev/null; [ $? = 1 ] && note "ok: hla check reproduces the finding" || note "FAILED: hla check does not fail the finding"
"$hla" fuzz --lib "$buggy" --replay "$fx" > /dev/null; [ $? = 1 ] && note "ok: --replay reproduces" || note "FAILED: --replay passes the buggy library"
"$hla" fuzz --lib "$good" --replay "$fx" > /dev/null; [ $? = 0 ] && note "ok: correct library passes the finding" || note "FAILED: correct library fails the finding"

# A findings folder that fails mid-campaign loses no finding: here every name a
# finding's group folder could take is a file, so writing it fails; it goes to
# a fallback folder under $TMPDIR, which stderr and the summary name.
mkdir -p "$work/blocked" "$work/tmp"
for k in numerics overflow exact_tier nan_causality state_continuation varlen crash timeout error bad_output; do
  for i in $(seq 0 39); do touch "$work/blocked/$k-$i"; done
done
TMPDIR="$work/tmp" "$hla" fuzz --lib "$buggy" --seed 7 --max-cases 40 --stop-after 1 --findings "$work/blocked" --json --no-progress \
  > "$work/blocked.json" 2> "$work/blocked.err"
rc=$?
fb=$(python3 - "$work/blocked.json" "$work/tmp" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1])); f = j["findings"][0]
assert j["fallback_dir"].startswith(sys.argv[2] + "/hla-findings-"), j["fallback_dir"]
assert j["findings_error"] and f["fixture"].startswith(j["fallback_dir"] + "/") and os.path.isfile(f["fixture"]), f
print(f["fixture"], f["candidate"])
PY
)
if [ $rc = 1 ] && [ -n "$fb" ] && grep -q "wrote it to $work/tmp/hla-findings-" "$work/blocked.err"; then
  "$hla" check $fb > /dev/null; [ $? = 1 ] && note "ok: unwritable findings folder -> fallback folder, finding reproduced" \
    || note "FAILED: the fallback finding does not reproduce"
else
  note "FAILED: unwritable findings folder mid-campaign (exit $rc): $(tail -3 "$work/blocked.err")"
fi
"$hla" fuzz --lib "$good" --findings /proc/hla-findings --max-cases 1 2> "$work/err"; [ $? = 2 ] && grep -q "/proc/hla-findings" "$work/err" \
  && note "ok: unwritable --findings -> 2 before any case" || note "FAILED: unwritable --findings must exit 2"

# Sizes declared on the command line bind a --lib too: every finding (shrunk included) keeps d = dv = 8 and
# sequence lengths in blocks of 4; a size above the library's hla_impl_info maxima is a usage error.
"$hla" fuzz --lib "$buggy" --seed 7 --max-cases 40 --stop-after 1 --d 8 --dv d --n-multiple 4 --findings "$work/sized" \
  --json --no-progress > "$work/sized.json"
python3 - "$work/sized" "$(dirname "$0")/../python" <<'PY' && note "ok: --lib findings inside --d 8 --dv d --n-multiple 4" \
  || note "FAILED: a --lib finding outside the declared sizes"
import pathlib, struct, sys
sys.path.insert(0, sys.argv[2])
import hla_fixture_file
files = [f for f in pathlib.Path(sys.argv[1]).rglob("*.safetensors") if not f.name.endswith(".candidate.safetensors")]
assert files, "no finding"
for f in files:
    p = hla_fixture_file.parse(f.read_bytes())
    md = p["metadata"]
    assert md["d"] == "8" and md["dv"] == "8", (f, md["d"], md["dv"])
    off = p["tensors"].get("offsets")
    bounds = list(struct.unpack(f"<{len(off[2]) // 8}q", off[2])) if off else [0, int(md["n"])]
    assert all((b - a) % 4 == 0 for a, b in zip(bounds, bounds[1:])), (f, bounds)
PY
"$hla" fuzz --lib "$good" --d 128 --max-cases 1 2> "$work/err"; [ $? = 2 ] && grep -q "above the max_d" "$work/err" \
  && note "ok: --lib --d above its max_d -> 2" || note "FAILED: --lib --d above max_d must exit 2"
# --max-n narrows a --lib's declared max_n: the cases of 8 findings (unshrunk) all have n <= 9.
"$hla" fuzz --lib "$buggy" --seed 3 --max-cases 200 --stop-after 8 --shrink-attempts 0 --max-n 9 --findings "$work/maxn" \
  --json --no-progress > "$work/maxn.json" 2> /dev/null
python3 - "$work/maxn.json" <<'PY' && note "ok: --lib --max-n 9 keeps every case at n <= 9" || note "FAILED: --lib --max-n 9"
import json, re, sys
f = json.load(open(sys.argv[1]))["findings"]
ns = [int(re.search(r" n=(\d+)", x["original"]).group(1)) for x in f]
assert len(ns) == 8 and max(ns) <= 9, ns
PY
"$hla" fuzz --lib "$good" --max-n 100000 --max-cases 1 2> "$work/err"; [ $? = 2 ] && grep -q "above the max_n" "$work/err" \
  && note "ok: --lib --max-n above its max_n -> 2" || note "FAILED: --lib --max-n above max_n must exit 2"
# --variants and --dtypes narrow a --lib's declared lists (f16_accum: la1, hla2, ahla in f32, f16): 6 findings
# (unshrunk) are all ahla in f16; a variant it does not declare is refused.
"$hla" fuzz --lib "$zoo/libzoo_f16_accum.so" --seed 3 --max-cases 300 --stop-after 6 --shrink-attempts 0 --variants ahla \
  --dtypes f16 --findings "$work/narrow" --json --no-progress > "$work/narrow.json" 2> /dev/null
python3 - "$work/narrow.json" <<'PY' && note "ok: --lib --variants ahla --dtypes f16 keeps every case there" || note "FAILED: --lib --variants/--dtypes"
import json, sys
f = json.load(open(sys.argv[1]))["findings"]
assert len(f) == 6 and all(x["original"].startswith("ahla ") and ", f16 " in x["original"] for x in f), [x["original"] for x in f]
PY
"$hla" fuzz --lib "$zoo/libzoo_correct_chunked.so" --variants la1,hla3 --max-cases 1 2> "$work/err"; [ $? = 2 ] \
  && grep -q "does not declare the variant hla3" "$work/err" && note "ok: --lib --variants it does not declare -> 2" \
  || note "FAILED: --lib --variants it does not declare must exit 2"

# --jobs 3 runs exactly the cases of one process (the shard split three ways) and finds the same:
# the same 40 cases, probes and findings, the same files per group, exit 1, no jobs folder left.
for j in 1 3; do
  "$hla" fuzz --lib "$buggy" --seed 5 --max-cases 40 --shrink-attempts 0 --jobs $j --findings "$work/jobs$j" --json \
    --no-progress > "$work/jobs$j.json" 2> /dev/null; echo $? > "$work/jobs$j.rc"
done
python3 - "$work" <<'PY' && note "ok: --jobs 3 = one process (cases, probes, findings, files, exit 1)" || note "FAILED: --jobs 3 differs from one process"
import json, pathlib, sys
w = pathlib.Path(sys.argv[1])
a, b = (json.load(open(w / f"jobs{j}.json")) for j in (1, 3))
key = lambda s: sorted((f["case_index"], f["kind"], f["message"]) for f in s["findings"])
assert a["cases"] == b["cases"] == 40 and a["probes"] == b["probes"] and key(a) == key(b) and len(key(a)) > 5, (a["cases"], b["cases"])
files = lambda d: sorted(p.relative_to(d).as_posix() for p in d.rglob("*.safetensors"))
assert files(w / "jobs1") == files(w / "jobs3") and files(w / "jobs1"), (files(w / "jobs1"), files(w / "jobs3"))
assert (w / "jobs1.rc").read_text().strip() == (w / "jobs3.rc").read_text().strip() == "1"
assert not list((w / "jobs3").glob(".jobs-*")), "a jobs folder was left"
PY
"$hla" fuzz --lib "$good" --max-cases 6 --jobs 2 --findings "$work/jobs_good" --no-progress > /dev/null 2>&1; [ $? = 0 ] \
  && [ "$(ls -A "$work/jobs_good")" = summary.json ] && note "ok: --jobs 2 on a correct library -> 0, its summary only" \
  || note "FAILED: --jobs 2 on a correct library must exit 0 and leave its summary only"
"$hla" fuzz --lib "$work/nope.so" --jobs 2 2> "$work/err"; [ $? = 2 ] && [ "$(grep -c 'no such file' "$work/err")" = 1 ] \
  && note "ok: --jobs 2 with a missing library -> 2, said once" || note "FAILED: --jobs 2 with a missing library"

# Usage errors.
"$hla" fuzz --max-cases 3 2> /dev/null; [ $? = 2 ] && note "ok: no adapter -> 2" || note "FAILED: no adapter must exit 2"
"$hla" fuzz --lib "$work/nope.so" 2> /dev/null; [ $? = 2 ] && note "ok: missing library -> 2" || note "FAILED: missing library must exit 2"
"$hla" fuzz --lib /bin/sh 2> "$work/err"; [ $? = 2 ] && grep -q "cannot load" "$work/err" && note "ok: not a library -> 2" || note "FAILED: /bin/sh as a library must exit 2 naming the problem"
"$hla" fuzz --exec 'true' 2> "$work/err"; [ $? = 2 ] && grep -q "{in} and {out}" "$work/err" && note "ok: exec without {in} {out} -> 2" || note "FAILED: exec without placeholders"
"$hla" fuzz --lib "$good" --shard 3/2 2> /dev/null; [ $? = 2 ] && note "ok: bad shard -> 2" || note "FAILED: --shard 3/2 must exit 2"
"$hla" fuzz --exec 'x {in} {out}' --features warp 2> "$work/err"; [ $? = 2 ] && grep -q "warp" "$work/err" && note "ok: unknown feature -> 2" || note "FAILED: unknown feature"

# An exec candidate with --features backward: gradient cases hand it fixtures with do; our own
# streaming forms through `hla eval` (causal under NaN; --grad where the fixture carries do) pass, the same without --grad
# (no dq, dk, dv in its file) is a bad_output finding.
eval_cmd="'$hla' eval {in} --out {out} --form streaming --precision f64 --dtype f64"
exec_grad() {
  "$hla" fuzz --exec "$1" --variants la1,hla2 --dtypes f64,f32 --features all,backward --precision f64 --max-n 40 \
    --max-cases 24 --seed 5 --stop-after 1 --findings "$work/$2" --json --no-progress > "$work/$2.json"
}
exec_grad "$eval_cmd --grad streaming > /dev/null 2>&1 || $eval_cmd > /dev/null" grad_ok; rc=$?
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert not j['findings'] and j['probes'].get('gradients', 0) > 0, j" \
  "$work/grad_ok.json" && [ $rc = 0 ] && note "ok: exec candidate with gradients in its file passes" \
  || note "FAILED: exec --features backward with hla eval --grad must pass with gradient cases (rc $rc)"
exec_grad "$eval_cmd > /dev/null" grad_none; rc=$?
python3 -c "import json,sys; f=json.load(open(sys.argv[1]))['findings']; assert f[0]['kind'] == 'bad_output' and 'no dq, dk, dv' in f[0]['message'], f" \
  "$work/grad_none.json" && [ $rc = 1 ] && note "ok: exec candidate without gradients -> bad_output" \
  || note "FAILED: exec --features backward without dq, dk, dv in the file must be a bad_output finding (rc $rc)"
# An exec server that answers `error` keeps running (a restart per error cost a start-up per case):
# a campaign of error findings, shrinking included, starts it once.
cat > "$work/error_server.py" <<'PY'
import sys
open(sys.argv[1], "a").write("start\n")
for line in sys.stdin:
    print("error no kernel here", flush=True)
PY
"$hla" fuzz --exec-server "python3 '$work/error_server.py' '$work/error_server.starts'" --variants la1 --max-n 8 \
  --max-cases 6 --shrink-attempts 3 --findings "$work/error_server" --json --no-progress > "$work/error_server.json"; rc=$?
python3 - "$work/error_server.json" "$work/error_server.starts" <<'PY' && [ $rc = 1 ] \
  && note "ok: exec server answering error is not restarted" || note "FAILED: exec server restarted after error answers (rc $rc)"
import json, sys
j = json.load(open(sys.argv[1])); starts = open(sys.argv[2]).read().count("start")
assert len(j["findings"]) == 6 and all(f["kind"] == "error" for f in j["findings"]), j["findings"]
assert starts == 1, f"{starts} starts"
PY
# Start-up is not the kernel's time (issue 37): a server that takes 2.5 s to start (an import) and then answers
# in well under --timeout 1 gives no finding under the start-up allowance; without it (--startup-timeout 0) its
# first call times out, the one-token call that starts a new server for the replay too, and that is a finding.
cat > "$work/slow_server.py" <<'PY'
import subprocess, sys, time
time.sleep(2.5)
for line in sys.stdin:
    _, fin, fout = line.rstrip("\n").split("\t")[:3]
    subprocess.run([sys.argv[1], "eval", fin, "--out", fout, "--form", "streaming", "--precision", "f64", "--dtype", "f64"],
                   check=True, capture_output=True)
    print("ok", flush=True)
PY
slow() {
  "$hla" fuzz --exec-server "python3 '$work/slow_server.py' '$hla'" --variants la1 --dtypes f64 --precision f64 --max-n 8 \
    --max-cases 4 --timeout 1 --shrink-attempts 1 --findings "$work/$1" --json --no-progress "${@:2}" > "$work/$1.json"
}
slow slow_ok; rc=$?
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert not j['findings'] and j['cases'] == 4, j" "$work/slow_ok.json" \
  && [ $rc = 0 ] && note "ok: a slow start-up is not a timeout" || note "FAILED: a 2.5 s start-up became a finding (rc $rc)"
slow slow_none --startup-timeout 0; rc=$?
python3 -c "import json,sys; f=json.load(open(sys.argv[1]))['findings']; assert f and f[0]['kind'] == 'timeout' and 'one-token call' in f[0]['message'], f" \
  "$work/slow_none.json" && [ $rc = 1 ] && note "ok: without the start-up allowance the slow start is a timeout" \
  || note "FAILED: --startup-timeout 0 must make the 2.5 s start-up a timeout finding (rc $rc)"
echo "$fails failure(s)"
exit $((fails > 0))
