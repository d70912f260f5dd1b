#!/usr/bin/env python3
"""Function and file sizes of the C++ sources (the limits of docs/architecture.md "Size limits").

Usage: function_sizes.py [--max-function-lines N] [--max-file-lines N] DIR_OR_FILE...

Lists every function body longer than N lines (default 80: from the line of its opening brace
to the line of its closing brace) and every file longer than the file limit (default 1000), and
exits 1 if there is any. A function body is a brace block opened at namespace or class scope
whose opening brace follows `)`, a qualifier (`const`, `override`, `final`, `noexcept`) or a
constructor's member initializer; lambdas and blocks inside a body count toward their function.
Comments, strings and character literals are skipped, raw strings included.
"""
import argparse
import os
import re
import sys

QUALIFIERS = {"const", "override", "final", "noexcept", "mutable"}


def strip(text):
    """The text with comments, strings and character literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            k = text.find("(", i + 2)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def preprocess_lines_blank(text):
    """Preprocessor lines blanked (a #define's braces are not code)."""
    lines = text.split("\n")
    out, cont = [], False
    for line in lines:
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d[\w.']*|::|->|[{}()\[\];:,=<>]|\S")


def long_functions(path, limit):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = preprocess_lines_blank(strip(f.read()))
    found = []
    stack = []  # per open brace: "function" or "scope"
    depth_in_function = 0
    prev = []  # last few significant tokens at scope level
    line = 1
    pos = 0
    for m in TOKEN.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        tok = m.group(0)
        if depth_in_function:
            if tok == "{":
                depth_in_function += 1
            elif tok == "}":
                depth_in_function -= 1
                if depth_in_function == 0:
                    start_line, name = stack.pop()
                    if line - start_line + 1 > limit:
                        found.append((name, start_line, line - start_line + 1))
            continue
        if tok == "{":
            p = prev[-1] if prev else ""
            is_function = p == ")" or p in QUALIFIERS or (p == "}" and "(" in prev)
            if p == ")" and len(prev) >= 2:
                # `if (...) {` etc. cannot occur at scope level; `= [](...) {` is a lambda.
                pass
            if is_function:
                name = function_name(prev)
                stack.append((line, name))
                depth_in_function = 1
            else:
                stack.append(None)
            prev = []
        elif tok == "}":
            if stack:
                stack.pop()
            prev = []
        elif tok == ";":
            prev = []
        else:
            prev.append(tok)
            if len(prev) > 200:
                prev = prev[-200:]
    return found


def function_name(tokens):
    depth = 0
    for i in range(len(tokens) - 1, -1, -1):
        t = tokens[i]
        if t == ")":
            depth += 1
        elif t == "(":
            depth -= 1
            if depth == 0:
                j = i - 1
                while j >= 0 and tokens[j] in ("::", "~") or (j >= 0 and tokens[j] == ">"):
                    j -= 1
                if j >= 0:
                    k = j
                    while k - 2 >= 0 and tokens[k - 1] == "::":
                        k -= 2
                    return "".join(tokens[k:j + 1])
    return "?"


def sources(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for dirpath, _, files in os.walk(p):
            for f in sorted(files):
                if f.endswith((".cpp", ".h", ".cu", ".cuh")):
                    yield os.path.join(dirpath, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-function-lines", type=int, default=80)
    ap.add_argument("--max-file-lines", type=int, default=1000)
    ap.add_argument("--functions-only", action="store_true")
    ap.add_argument("--files-only", action="store_true")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    bad = 0
    for path in sorted(set(sources(args.paths))):
        if not args.functions_only:
            with open(path, encoding="utf-8", errors="replace") as f:
                n = f.read().count("\n")
            if n > args.max_file_lines:
                print(f"{path}: {n} lines (limit {args.max_file_lines})")
                bad += 1
        if not args.files_only:
            for name, start, length in long_functions(path, args.max_function_lines):
                print(f"{path}:{start}: {name} is {length} lines (limit {args.max_function_lines})")
                bad += 1
    print(f"{bad} over the limits" if bad else "all within the limits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
