#!/usr/bin/env python3
"""Fails when a function body in the given trees is longer than a limit (default 100 lines).

    check_function_length.py [--max N] DIR...

A long function usually holds several responsibilities; the house rule is none over 100
lines in src/. This is a lexical check, not a parser: comments, strings and character
literals are blanked, then every top-level brace block whose header looks like a function
(a parameter list's ')' then qualifiers, an initializer list or a trailing return type,
and no control keyword) is measured from its header's first line to its closing brace.
Lambdas count as part of the function that holds them. Prints each offender as
file:line: name: N lines (limit M) and exits 1; exit 0 when none.
"""
import os
import re
import sys

SOURCE_EXT = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".cc")
CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "try", "return", "sizeof", "decltype",
           "alignof", "static_assert", "noexcept"}
SCOPES = re.compile(r"\b(namespace|class|struct|union|enum|extern)\b")


def blank_literals(text):
    """Comments, strings and char literals become spaces; newlines are kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                close = ")" + m.group(1) + '"'
                j = text.find(close, i + m.end())
                j = n if j < 0 else j + len(close)
                out.append(re.sub(r"[^\n]", " ", text[i:j]))
                i = j
            else:
                out.append(c)
                i += 1
        elif c in "\"'":
            # A digit separator (1'000'000) is not a char literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(header):
    """The name before the parameter list of a function header, or None when it is not one."""
    h = header.strip()
    if not h or h.startswith("#") or SCOPES.search(h.split("(")[0]):
        return None
    if "(" not in h or "=" in h.split("(")[0] and "operator" not in h:
        return None
    # What follows the parameter list: qualifiers, ': init(...)', '-> type'.
    depth, close = 0, -1
    for k, ch in enumerate(h):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                close = k
                break
    if close < 0:
        return None
    name_part = h[: h.index("(")].split()
    if not name_part:
        return None
    name = name_part[-1]
    if name in CONTROL or name.endswith("]"):  # control flow, or a lambda
        return None
    return name


def long_functions(path, limit):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank_literals(f.read())
    found = []
    depth = 0
    body_start = None  # (line, name) of the function being measured
    body_depth = 0
    last_delim = 0
    line = 1
    line_at = [0] * (len(text) + 1)
    for i, ch in enumerate(text):
        line_at[i] = line
        if ch == "\n":
            line += 1
    for i, ch in enumerate(text):
        if ch == "{":
            if body_start is None:
                header = text[last_delim:i]
                name = function_name(" ".join(header.split()))
                if name is not None:
                    offset = len(header) - len(header.lstrip())
                    body_start = (line_at[last_delim + offset], name)
                    body_depth = depth
            depth += 1
            last_delim = i + 1
        elif ch == "}":
            depth -= 1
            if body_start is not None and depth == body_depth:
                length = line_at[i] - body_start[0] + 1
                if length > limit:
                    found.append((body_start[0], body_start[1], length))
                body_start = None
            last_delim = i + 1
        elif ch == ";" and body_start is None:
            last_delim = i + 1
        elif ch == ":" and body_start is None and text[i - 1] != ":" and text[i + 1:i + 2] != ":":
            # 'public:' and the like end a header; an initializer list's ':' follows a ')'.
            if not text[last_delim:i].rstrip().endswith(")"):
                last_delim = i + 1
    return found


def main(argv):
    limit = 100
    args = argv[1:]
    if len(args) >= 2 and args[0] == "--max":
        limit = int(args[1])
        args = args[2:]
    if not args:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    bad = []
    for root in args:
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                if name.endswith(SOURCE_EXT):
                    path = os.path.join(dirpath, name)
                    bad += [(path, *f) for f in long_functions(path, limit)]
    for path, line, name, length in sorted(bad):
        print(f"{path}:{line}: {name}: {length} lines (limit {limit})")
    if bad:
        print(f"check_function_length: {len(bad)} function(s) over {limit} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
