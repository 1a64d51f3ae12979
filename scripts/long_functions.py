#!/usr/bin/env python3
"""Lists the C++ and Python functions longer than a limit (default 80 lines) in the given
directories or files, one per line: `path:line: name: N lines`. Exit 1 when
there is one, 0 when there is none, 2 on bad arguments.

    python3 scripts/long_functions.py fuzz engine check io [--max 80]

A function's length is the lines from its body's `{` to its `}`, both
included. A lambda or a local class counts toward the function it is in.
The scan is lexical, not a parser: comments, string and character literals
and preprocessor lines are blanked, then braces are matched, and a brace
opens a function body when it follows a parameter list `)` (possibly with
qualifiers, a trailing return type, a constructor's initializer list or
`try`) at namespace or class scope. That is enough for this project's style
(tests/cli/long_functions_test.py pins the cases it must see). A Python
function's length is the lines from its `def` to its last line (ast), a
nested function counting toward the one it is in; docstrings count."""
import argparse
import ast
import pathlib
import re
import sys

SOURCES = (".cpp", ".cc", ".cxx", ".hpp", ".h", ".cu", ".cuh", ".py")
CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "return"}


def blank(text):
    """text with comments, literals and preprocessor lines replaced by spaces
    (newlines kept, so offsets map to the same lines)."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#" or (at_line_start and c in " \t" and text[i:].lstrip(" \t").startswith("#")):
            j = i
            while j < n:  # to the end of the line, following backslash continuations
                if text[j] == "\n" and (j == 0 or text[j - 1] != "\\"):
                    break
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        raw = re.match(r'(?:u8|[uUL])?R"([^()\\\s]{0,16})\(', text[i:i + 24]) if c in 'uULR' else None
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + raw.group(1) + '"', i + raw.end())
            j = n if end < 0 else end + len(raw.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):  # 1'000 digit separators
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c if j - i >= 2 else text[i:j])
            i = j
            continue
        out.append(c)
        at_line_start = c == "\n" or (at_line_start and c in " \t")
        i += 1
    return "".join(out)


def match_brace(s, i):
    """The index of the `}` closing the `{` at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(s) - 1


QUALIFIERS = re.compile(r"\)\s*(?:const|volatile|&|&&|noexcept(?:\s*\([^()]*\))?|override|final|mutable|\s)*"
                        r"(?:->\s*[^{;]+)?\s*(?:try)?\s*$")


def classify(head):
    """What the `{` after `head` (the text since the last ; { or }) opens:
    'scope' (namespace, extern "C"), 'class', 'function' or 'other'."""
    h = " ".join(head.split())
    if re.search(r"(^|\s)(namespace|extern)\b", h) and "(" not in h:
        return "scope"
    if re.match(r"^(template\s*<.*>\s*)?(class|struct|union)\b", h) and not re.search(r"\)\s*$", h):
        return "class"
    if re.match(r"^(template\s*<.*>\s*)?enum\b", h) or not h:
        return "other"
    outside = h
    while re.search(r"\([^()]*\)", outside):  # parentheses removed: default arguments are not initializers
        outside = re.sub(r"\([^()]*\)", "", outside)
    if re.search(r"(?<![=!<>])=(?!=)", outside) and "operator" not in outside:
        return "other"  # an initializer: `auto f = [](...) {`, `int v[] = {`
    first = re.match(r"^\s*([A-Za-z_]\w*)", h)
    if first and first.group(1) in CONTROL:
        return "other"
    if QUALIFIERS.search(h) or re.search(r"\)\s*(?:noexcept\s*)?:\s*[A-Za-z_:]", h):
        return "function"
    return "other"


def name_of(head):
    """The function's name: the first identifier (qualified) before a '(' that is not a keyword."""
    h = " ".join(head.split())
    for m in re.finditer(r"((?:\w+::)*(?:operator\s*(?:\(\)|[^\s(]+)|~?\w+))\s*\(", h):
        if m.group(1) not in CONTROL and m.group(1) not in ("decltype", "alignas", "noexcept"):
            return m.group(1)
    return h[:40]


def scan_python(text, limit):
    """[(line, name, lines)] of the outermost Python functions (methods included) longer than limit."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                lines = child.end_lineno - start + 1
                if lines > limit:
                    found.append((start, prefix + child.name, lines))
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(ast.parse(text), "")
    return found


def scan(path, limit):
    """[(line, name, lines)] of the functions in path longer than limit."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".py":
        return scan_python(text, limit)
    s = blank(text)
    line_at = [0] * (len(s) + 1)
    line = 1
    for k, ch in enumerate(s):
        line_at[k] = line
        if ch == "\n":
            line += 1
    line_at[len(s)] = line
    found = []
    head_start = 0
    i = 0
    while i < len(s):
        ch = s[i]
        if ch in ";}":
            head_start = i + 1
        elif ch == "{":
            head = s[head_start:i]
            # A brace initializer in a constructor's initializer list (x_{1}) is part of the head.
            if re.search(r"\)\s*:\s*[A-Za-z_]", " ".join(head.split())) and re.search(r"\w\s*$", head):
                i = match_brace(s, i) + 1
                continue
            kind = classify(head)
            if kind in ("scope", "class"):
                head_start = i + 1
            else:
                end = match_brace(s, i)
                if kind == "function":
                    rest = s[end + 1:]
                    while re.match(r"\s*catch\s*\(", rest):  # a function-try-block's handlers
                        k = end + 1 + rest.index("{")
                        end = match_brace(s, k)
                        rest = s[end + 1:]
                    lines = line_at[end] - line_at[i] + 1
                    if lines > limit:
                        found.append((line_at[i], name_of(head), lines))
                i = end
                head_start = end + 1
        i += 1
    return found


def files_in(paths):
    for p in paths:
        p = pathlib.Path(p)
        if p.is_dir():
            yield from sorted(f for f in p.rglob("*") if f.suffix in SOURCES and f.is_file())
        elif p.is_file():
            yield p
        else:
            raise FileNotFoundError(f"no such file or directory: {p}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="directories (searched recursively) or files")
    ap.add_argument("--max", type=int, default=80, help="the longest a function may be, in lines (default 80)")
    a = ap.parse_args()
    try:
        files = list(files_in(a.paths))
    except FileNotFoundError as e:
        print(f"long_functions: {e}", file=sys.stderr)
        return 2
    long = [(f, *x) for f in files for x in scan(f, a.max)]
    for f, line, name, lines in long:
        print(f"{f}:{line}: {name}: {lines} lines")
    print(f"long_functions: {len(long)} function(s) over {a.max} lines in {len(files)} file(s)")
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
