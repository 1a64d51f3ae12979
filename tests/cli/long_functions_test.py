#!/usr/bin/env python3
"""ctest long_functions_selftest: scripts/long_functions.py sees the functions
of this project's style and counts their lines (C++ and Python): free functions, methods,
constructors with initializer lists (braces in them too), function-try-blocks,
operators, templates; and no function in braces of comments, strings, raw
strings, lambdas at namespace scope, initializers, enums or control blocks.
Each case is a file with a known answer (written out here, counted by hand)."""
import pathlib
import subprocess
import sys
import tempfile

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "long_functions.py"


def body(n):
    """n lines of statements."""
    return "".join(f"  x += {i};\n" for i in range(n))


CASES = [
    # (name, source, [(line, name, lines)] expected with --max 5)
    ("free function", "int f(int x) {\n" + body(5) + "  return x;\n}\n", [(1, "f", 8)]),
    ("at the limit", "int f(int x) {\n" + body(3) + "}\n", []),  # 5 lines: not over
    ("namespace and class", "namespace a {\nclass C {\n public:\n  void m() const override {\n" + body(6)
     + "  }\n};\n}  // namespace a\n", [(4, "m", 8)]),
    ("constructor with braces in its initializer list", "struct S {\n  S(int a) : x_{a}, y_(a) {\n" + body(6)
     + "  }\n  int x_, y_;\n};\n", [(2, "S", 8)]),
    ("function-try-block", "int main() try {\n" + body(2) + "} catch (...) {\n" + body(3) + "}\n",
     [(1, "main", 8)]),
    ("operator()", "struct F {\n  void operator()(int) {\n" + body(5) + "  }\n};\n", [(2, "operator()", 7)]),
    ("template with trailing return", "template <class T> auto g(T t) -> T {\n" + body(5) + "}\n", [(1, "g", 7)]),
    ("lambda inside counts toward its function", "void h() {\n  auto l = [](int y) {\n" + body(4)
     + "  };\n}\n", [(1, "h", 8)]),
    ("braces in comments and strings", "// void fake() {\n/* { { { */\nconst char* s = \"{{{\";\n"
     "const char* r = R\"x({ } {)x\";\nchar c = '{';\nint f() {\n  return 1;\n}\n", []),
    ("namespace-scope lambda and initializer", "auto l = [](int x) {\n" + body(6) + "};\nint v[] = {\n"
     + "".join(f"  {i},\n" for i in range(8)) + "};\n", []),
    ("enum and control blocks", "enum class E {\n" + "".join(f"  e{i},\n" for i in range(8)) + "};\n", []),
    ("preprocessor lines", "#define X(a) { a }\nint f() {\n#if 1\n" + body(5) + "#endif\n}\n", [(2, "f", 9)]),
    # Python (.py): from the first decorator or def to the last line; nested defs count toward their function.
    ("python function with a nested one", "import x\n\n\n@deco\ndef f(a):\n    def g():\n" + "".join(
        f"        a{i} = {i}\n" for i in range(4)) + "    return g\n", [(4, "f", 8)]),
    ("python method at the limit", "class C:\n    def m(self):\n" + "".join(f"        y = {i}\n" for i in range(4)) + "\n",
     []),
]
SUFFIX = {name: ".py" for name in ("python function with a nested one", "python method at the limit")}


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        for i, (name, src, want) in enumerate(CASES):
            f = pathlib.Path(d) / f"case{i}{SUFFIX.get(name, '.cpp')}"
            f.write_text(src)
            p = subprocess.run([sys.executable, str(SCRIPT), str(f), "--max", "5"], capture_output=True, text=True)
            got = []
            for line in p.stdout.splitlines()[:-1]:
                loc, fn, lines = line.rsplit(": ", 2)
                got.append((int(loc.rsplit(":", 1)[1]), fn, int(lines.split()[0])))
            ok = got == want and p.returncode == (1 if want else 0)
            failures += not ok
            print(f"{'ok' if ok else 'FAILED'}: {name}: {got}" + ("" if ok else f", expected {want} (exit {p.returncode})"))
    p = subprocess.run([sys.executable, str(SCRIPT), "/no/such/dir"], capture_output=True, text=True)
    ok = p.returncode == 2 and "/no/such/dir" in p.stderr
    failures += not ok
    print(f"{'ok' if ok else 'FAILED'}: a missing directory -> exit 2 naming it")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
