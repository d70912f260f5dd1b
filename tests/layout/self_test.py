#!/usr/bin/env python3
"""Self-test of the layout checks: each must flag a violation made on purpose, and pass the
same tree without it (so that the ctests running them on the sources can fail).

  - function_sizes.py: an 81-line function is flagged, an 80-line one is not; braces inside
    strings, comments, raw strings and a lambda do not end or start a function; a file of 1,001
    lines is flagged.
  - include_graph.py: a cycle between two units of one folder is flagged, and so is an include
    from a lower folder (hardware/) of a higher one (builder/); the tree without them passes.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(script, *args):
    p = subprocess.run([sys.executable, os.path.join(HERE, script), *args],
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def function(name, body_lines):
    """A function whose body spans body_lines lines from `{` to `}`."""
    lines = ["int %s(int x) {" % name]
    lines.append('  const char* s = "}}} {";  // } in a string')
    lines.append("  /* { in a comment */")
    lines.append('  auto f = [](int y) { return y + 1; };')
    lines.append('  const char* r = R"x(}})x";')
    while len(lines) < body_lines - 2:
        lines.append("  x = f(x);")
    lines.append("  return x;")
    lines.append("}")
    assert len(lines) == body_lines
    return "\n".join(lines) + "\n"


def check(cond, what, out):
    if not cond:
        print("FAIL:", what)
        print(out)
        sys.exit(1)
    print("ok:", what)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        with open(os.path.join(src, "a.cpp"), "w") as f:
            f.write("namespace n {\n" + function("eighty", 80) + "}\n")
        rc, out = run("function_sizes.py", src)
        check(rc == 0, "an 80-line function passes", out)
        with open(os.path.join(src, "b.cpp"), "w") as f:
            f.write("struct S {\n  int m() const {\n    return 1;\n  }\n};\n" + function("eightyone", 81))
        rc, out = run("function_sizes.py", src)
        check(rc == 1 and "eightyone is 81 lines" in out and "eighty is" not in out,
              "an 81-line function is flagged, by name", out)
        os.remove(os.path.join(src, "b.cpp"))
        with open(os.path.join(src, "c.h"), "w") as f:
            f.write("// line\n" * 1001)
        rc, out = run("function_sizes.py", "--files-only", src)
        check(rc == 1 and "c.h: 1001 lines" in out, "a 1,001-line file is flagged", out)

        models = os.path.join(tmp, "models")
        for d in ("hardware", "builder"):
            os.makedirs(os.path.join(models, d))

        def write(rel, includes):
            with open(os.path.join(models, rel), "w") as f:
                for inc in includes:
                    f.write('#include "models/%s"\n' % inc)

        write("errors.h", [])
        write("hardware/a.h", ["errors.h"])
        write("hardware/b.h", ["hardware/a.h"])
        write("builder/c.h", ["hardware/b.h"])
        rc, out = run("include_graph.py", models)
        check(rc == 0, "a layered tree without cycles passes", out)
        write("hardware/a.cpp", ["hardware/b.h"])
        rc, out = run("include_graph.py", models)
        check(rc == 1 and "cycle" in out, "a cycle between two units is flagged", out)
        os.remove(os.path.join(models, "hardware/a.cpp"))
        write("hardware/b.cpp", ["builder/c.h"])
        rc, out = run("include_graph.py", models)
        check(rc == 1 and "hardware/b" in out and "builder/c" in out,
              "a lower folder including a higher one is flagged", out)
    print("all layout self-tests passed")


if __name__ == "__main__":
    main()
