#!/usr/bin/env python3
"""Fails when a source file under src/ is not named in docs/architecture.md's map.

    check_architecture_map.py REPO

The map is where a newcomer finds what each file does; a file it does not name is one
nobody will find. A file counts as named when its path relative to src/ (for example
`model/transformer.cpp`) appears in the map's code block. Prints each missing file and
exits 1; exit 0 when every file is named.
"""
import os
import re
import sys

SOURCE_EXT = (".cpp", ".hpp", ".cu", ".cuh", ".h")


def map_text(doc):
    """The first fenced code block of the document: the map."""
    m = re.search(r"```[^\n]*\n(.*?)```", doc, re.S)
    return m.group(1) if m else ""


def main(argv):
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    repo = argv[0]
    with open(os.path.join(repo, "docs", "architecture.md"), encoding="utf-8") as f:
        text = map_text(f.read())
    missing = []
    src = os.path.join(repo, "src")
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(SOURCE_EXT) and name != "ztrun":
                continue
            rel = os.path.relpath(os.path.join(root, name), src).replace(os.sep, "/")
            if rel not in text:
                missing.append(rel)
    for rel in missing:
        print(f"docs/architecture.md: the map does not name src/{rel}")
    if missing:
        print(f"check_architecture_map: {len(missing)} file(s) missing from the map")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
