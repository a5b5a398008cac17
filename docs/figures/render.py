#!/usr/bin/env python3
"""Render the figure tables of docs/*.md from the TSV files in docs/figures/.

Each table in a doc sits between two marker comments:

    <!-- figures:NAME -->
    ...the table, rewritten by this script...
    <!-- end -->

and is rendered from docs/figures/NAME.tsv: tab-separated, first line the column names, one row
per line; lines starting with '#' and empty lines are skipped. Cells are Markdown, written as they
should appear, except that '|' needs no escaping (the script escapes it). Everything outside the
markers is left as it is, and running the script twice changes nothing.

    python3 docs/figures/render.py          # rewrite the tables in docs/*.md
    python3 docs/figures/render.py --check  # exit 1 if a table is not what its TSV renders
"""

import pathlib
import re
import sys

FIGURES = pathlib.Path(__file__).resolve().parent
DOCS = FIGURES.parent
BLOCK = re.compile(r"(<!-- figures:([A-Za-z0-9_.-]+) -->\n)(.*?)(<!-- end -->)", re.S)


def read_tsv(path):
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split("\t")]
        if rows and len(cells) != len(rows[0]):
            sys.exit(f"{path}:{n}: {len(cells)} cells, the header has {len(rows[0])}")
        rows.append(cells)
    if not rows:
        sys.exit(f"{path}: no header line")
    return rows


def cell(text):
    # A '|' inside a table cell, code spans included, must be written '\|' in GitHub Markdown.
    return re.sub(r"(?<!\\)\|", r"\\|", text)


def table(rows):
    lines = ["| " + " | ".join(cell(c) for c in rows[0]) + " |",
             "|" + " --- |" * len(rows[0])]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines) + "\n"


def render(text, used):
    def repl(m):
        name = m.group(2)
        path = FIGURES / (name + ".tsv")
        if not path.exists():
            sys.exit(f"marker figures:{name}: {path} does not exist")
        used.add(name)
        return m.group(1) + table(read_tsv(path)) + m.group(4)
    return BLOCK.sub(repl, text)


def main():
    check = "--check" in sys.argv[1:]
    used, stale = set(), []
    for doc in sorted(DOCS.glob("*.md")):
        old = doc.read_text(encoding="utf-8")
        new = render(old, used)
        if new != old:
            stale.append(doc)
            if not check:
                doc.write_text(new, encoding="utf-8")
    for tsv in sorted(FIGURES.glob("*.tsv")):
        if tsv.stem not in used:
            print(f"warning: {tsv.name} is used by no <!-- figures:{tsv.stem} --> marker", file=sys.stderr)
    for doc in stale:
        print(f"{doc.relative_to(DOCS.parent)}: {'out of date' if check else 'rewritten'}")
    if check and stale:
        sys.exit(1)


if __name__ == "__main__":
    main()
