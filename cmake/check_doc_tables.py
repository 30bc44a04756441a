#!/usr/bin/env python3
"""Fails when a Markdown table cell in the given files or trees is longer than a limit
(default 600 characters).

    check_doc_tables.py [--max N] PATH...

A table cell that long is a paragraph squeezed into a row: unreadable in a terminal and in a
diff. The detail belongs in text below the table. Prints each offender as
file:line: column K: N characters (limit M) and exits 1; exit 0 when none.
"""
import os
import sys


def markdown_files(paths):
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if name.endswith(".md"):
                    yield os.path.join(root, name)


def main(argv):
    limit = 600
    if len(argv) >= 2 and argv[0] == "--max":
        limit = int(argv[1])
        argv = argv[2:]
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bad = 0
    for path in markdown_files(argv):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.lstrip().startswith("|"):
                    continue
                for column, cell in enumerate(line.strip().strip("|").split("|"), 1):
                    if len(cell.strip()) > limit:
                        print(f"{path}:{number}: column {column}: {len(cell.strip())} characters (limit {limit})")
                        bad += 1
    if bad:
        print(f"check_doc_tables: {bad} table cell(s) over {limit} characters")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
