#!/usr/bin/env python3
"""The documentation stays true to the tree and short. ctest docs_architecture, docs_words.

  check_architecture.py ROOT HLA
      docs/architecture.md names every top-level folder of ROOT (the first path
      component of every file git tracks, written `name/`) and every subcommand
      that `HLA --help` lists (written `hla name`, or `name` in a table row).
  check_architecture.py --options ROOT HLA
      docs/using.md holds the option table exactly as `HLA options` prints it
      (from reference/include/hla/options.hpp), so that it cannot go stale.
  check_architecture.py --words ROOT [--max N]
      README.md and docs/*.md hold at most N words in all (default 12000,
      counted as `wc -w` counts them), and every relative link and #anchor in
      them resolves (GitHub's anchors: lowercase, spaces to '-', punctuation
      other than '-' and '_' dropped, repeats suffixed -1, -2, ...).

Exit 0 when all holds; 1 naming each problem; 2 on usage errors.
"""
import os
import re
import subprocess
import sys
from pathlib import Path


def fail_usage(msg):
    print(f"check_architecture: {msg}\n{__doc__}", file=sys.stderr)
    sys.exit(2)


# ---- architecture.md against the tree -------------------------------------------------------

def top_level_folders(root):
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
        paths = [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
        return sorted({p.split("/", 1)[0] for p in paths if "/" in p})
    except (OSError, subprocess.CalledProcessError):
        # No git (an exported tree): the folders, less build outputs and hidden ones.
        skip = re.compile(r"^(build.*|dist|hla-findings|hla-reports|__pycache__|\..*)$")
        return sorted(d.name for d in root.iterdir() if d.is_dir() and not skip.match(d.name))


def subcommands(hla):
    p = subprocess.run([hla, "--help"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        print(f"FAIL: `{hla} --help` exited {p.returncode}:\n{p.stdout}{p.stderr}")
        sys.exit(1)
    names, inside = [], False
    for line in p.stdout.splitlines():
        if re.match(r"^subcommands:\s*$", line.strip(), re.I):
            inside = True
            continue
        if not inside:
            continue
        if not line.strip() or not line.startswith(" "):
            if names:
                break
            continue
        m = re.match(r"^ {1,4}(\S+)(\s{2,}|$)", line)  # deeper lines continue a wrapped description
        if m:
            names.append(m.group(1))
    if not names:
        print(f"FAIL: no SUBCOMMANDS section in `{hla} --help`:\n{p.stdout}")
        sys.exit(1)
    return names


def check_architecture(root, hla):
    doc = root / "docs" / "architecture.md"
    text = doc.read_text(encoding="utf-8")
    table_rows = [line for line in text.splitlines() if line.lstrip().startswith("|")]
    missing = []
    folders = top_level_folders(root)
    for name in folders:
        if not re.search(r"(?<![\w./-])" + re.escape(name) + "/", text):
            missing.append(f"top-level folder `{name}/`")
    commands = subcommands(hla)
    for name in commands:
        named = re.search(r"(?<![\w-])hla " + re.escape(name) + r"(?![\w-])", text)
        in_table = any(f"`{name}`" in row for row in table_rows)
        if not (named or in_table):
            missing.append(f"subcommand `hla {name}`")
    for m in missing:
        print(f"FAIL: {doc.relative_to(root)} does not name the {m}")
    if missing:
        return 1
    print(f"docs/architecture.md names all {len(folders)} top-level folders ({', '.join(folders)}) "
          f"and all {len(commands)} subcommands ({', '.join(commands)})")
    return 0


# ---- word count and links --------------------------------------------------------------------

def count_words(data):
    # wc -w: maximal runs of bytes that are not ASCII whitespace.
    return len(re.findall(rb"[^ \t\n\v\f\r]+", data))


def strip_code(text):
    """Fenced blocks and inline code spans blanked (their brackets are not links)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        out.append(re.sub(r"(`+)(.+?)\1", lambda c: " " * len(c.group(0)), line))
    return "\n".join(out)


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        text = path.read_text(encoding="utf-8")
        fence = None
        for line in text.split("\n"):
            m = re.match(r"^\s*(```+|~~~+)", line)
            if fence:
                if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                    fence = None
                continue
            if m:
                fence = m.group(1)
                continue
            h = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not h:
                for a in re.findall(r"""<a\s+(?:name|id)=["']([^"']+)["']""", line):
                    found.add(a)
                continue
            title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", h.group(1))  # links keep their text
            title = re.sub(r"<[^>]+>", "", title)
            slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
        cache[path] = found
    return cache[path]


def check_links(root, files):
    problems = []
    for f in files:
        text = strip_code(f.read_text(encoding="utf-8"))
        for lineno, line in enumerate(text.split("\n"), 1):
            for target in re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                    continue
                where = f"{f.relative_to(root)}:{lineno}: ({target})"
                file_part, _, anchor = target.partition("#")
                dest = (f.parent / file_part).resolve() if file_part else f
                if not dest.exists():
                    problems.append(f"{where}: no file {dest.relative_to(root) if root in dest.parents else dest}")
                    continue
                if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{where}: no heading with the anchor #{anchor} in {dest.relative_to(root)}")
    return problems


def check_words(root, limit):
    files = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    counts = [(f, count_words(f.read_bytes())) for f in files]
    total = sum(n for _, n in counts)
    for f, n in counts:
        print(f"{n:7d} {f.relative_to(root)}")
    print(f"{total:7d} total (limit {limit})")
    status = 0
    if total > limit:
        print(f"FAIL: README.md and docs/*.md hold {total} words, more than {limit}: link instead of repeating")
        status = 1
    problems = check_links(root, files)
    for p in problems:
        print(f"FAIL: broken link {p}")
    if problems:
        status = 1
    else:
        print(f"every relative link and anchor of the {len(files)} files resolves")
    return status


def check_options(root, hla):
    printed = subprocess.run([hla, "options"], capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    lines = (root / "docs" / "using.md").read_text(encoding="utf-8").splitlines()
    if printed[0] not in lines:
        print(f"FAIL: docs/using.md has no option table (a line {printed[0]!r}); paste `hla options` there")
        return 1
    at = lines.index(printed[0])
    end = next((i for i in range(at, len(lines)) if not lines[i].startswith("|")), len(lines))
    if lines[at:end] != printed:
        print("FAIL: docs/using.md's option table differs from `hla options`; paste its output there:\n" + "\n".join(printed))
        return 1
    print(f"docs/using.md's option table is `hla options` ({len(printed) - 2} options)")
    return 0


def main(argv):
    if argv and argv[0] == "--options":
        if len(argv) != 3:
            fail_usage("--options takes ROOT HLA")
        return check_options(Path(argv[1]).resolve(), argv[2])
    if argv and argv[0] == "--words":
        rest = argv[1:]
        limit = 12000
        if "--max" in rest:
            i = rest.index("--max")
            try:
                limit = int(rest[i + 1])
            except (IndexError, ValueError):
                fail_usage("--max needs a number")
            del rest[i:i + 2]
        if len(rest) != 1:
            fail_usage("--words takes ROOT")
        return check_words(Path(rest[0]).resolve(), limit)
    if len(argv) != 2:
        fail_usage("expected ROOT HLA")
    root, hla = Path(argv[0]).resolve(), argv[1]
    if not os.access(hla, os.X_OK):
        fail_usage(f"{hla} is not an executable")
    return check_architecture(root, hla)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
