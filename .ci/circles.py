#!/usr/bin/env python3
"""Import circles between a crate's modules, so a layered crate stays layered.

Usage: circles.py CRATE_SRC [CRATE_SRC ...] [--deep MODULE ...]

For each `crates/<name>/src`, every file is mapped to its top-level module (`src/outbox.rs` and
`src/outbox/*` are `outbox`; `lib.rs`/`main.rs` are the root and ignored as importers). A file's
references are the paths it names that start at `crate::`, `super::` or `self::` (resolved
against the file's module and any inline `mod x { ... }` it sits in), `use` groups such as
`use crate::{a, b::c}`, and paths through a child module of the file's own module (`state::X` in
`guaranteed/mod.rs`). Comments and string literals are skipped, so a doc link is no import.

Every strongly connected component of more than one top-level module is a circle: it is printed
with the arrows inside it (and one place each arrow is written), and the exit status is 1.
`--deep MODULE` also lists the circles between the submodules of MODULE (e.g. `guaranteed`,
`cluster`), where a child's `super::X` naming an item of `mod.rs` is an arrow to the parent's own
file (`MODULE` itself). These are notes, not failures: one type's `impl` split over several files
(`impl Driver` in `guaranteed/`) is a circle by construction and is not a layering mistake.

Python 3 standard library only.
"""

import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """Blank out comments, strings and char literals, keeping offsets and newlines."""
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
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not re.match(r"\w", text[i - 1])):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}'); a lifetime ('a) is left as it is.
            m = re.match(r"'(\\.[^']*|[^'\\])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(src, path):
    """The module path of a file: `a/b.rs` and `a/b/mod.rs` are ['a', 'b']; the root is []."""
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return []
    return rel


def parse_tree(code, i):
    """Parses a use tree at `code[i:]` (after a `::`): returns (leaf paths, end offset)."""
    i = skip_ws(code, i)
    if i < len(code) and code[i] == "{":
        paths, i = [], i + 1
        while True:
            i = skip_ws(code, i)
            if i >= len(code):
                return paths, i
            if code[i] == "}":
                return paths, i + 1
            if code[i] == ",":
                i += 1
                continue
            sub, j = parse_tree(code, i)
            paths.extend(sub)
            if j <= i:
                j = i + 1
            i = j
    m = re.compile(IDENT + "|\\*").match(code, i)
    if not m:
        return [[]], i
    head, i = m.group(0), m.end()
    j = skip_ws(code, i)
    if code.startswith("::", j):
        rest, i = parse_tree(code, j + 2)
        return [[head] + r for r in rest], i
    return [[head]], i


def skip_ws(code, i):
    while i < len(code) and code[i].isspace():
        i += 1
    return i


def inline_modules(code):
    """(start, end, name) of every inline `mod name { ... }` block, by brace matching."""
    blocks = []
    for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", code):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        blocks.append((m.end(), j, m.group(1)))
    return blocks


def scope_at(base, blocks, offset):
    """The module path at `offset`: the file's module plus the inline modules around it."""
    scope = list(base)
    for start, end, name in sorted(blocks):
        if start <= offset < end:
            scope.append(name)
    return scope


def references(src, path, modules):
    """Yields (target module path, line) for every path in the file that names a module."""
    base = module_of(src, path)
    with open(path, encoding="utf-8") as f:
        code = strip(f.read())
    blocks = inline_modules(code)
    start_re = re.compile(r"(?<![\w:])(crate|super|self|" + IDENT + r")\s*::")
    pos = 0
    while True:
        m = start_re.search(code, pos)
        if not m:
            break
        pos = m.end()
        first = m.group(1)
        scope = scope_at(base, blocks, m.start())
        if first == "crate":
            anchor = []
        elif first in ("super", "self"):
            anchor = scope[:-1] if first == "super" else scope
        elif tuple(scope + [first]) in modules:
            anchor, pos = scope, m.start()  # a child module named without `self::`
        else:
            continue
        paths, end = parse_tree(code, pos if pos == m.start() else m.end())
        pos = max(end, m.end())
        line = code.count("\n", 0, m.start()) + 1
        for leaf in paths:
            resolved = list(anchor)
            for seg in leaf:
                if seg == "super":
                    resolved = resolved[:-1]
                elif seg != "self":
                    resolved.append(seg)
            # The longest prefix that is a module (file) of the crate is the target.
            while resolved and tuple(resolved) not in modules:
                resolved.pop()
            yield resolved, line


def sccs(graph):
    """Tarjan's strongly connected components, each as a sorted list."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    nodes = set(graph) | {w for ws in graph.values() for w in ws}
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def report(title, edges, note=False):
    """Prints the circles of a graph given as {(from, to): where}; returns how many."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    circles = [c for c in sccs(graph) if len(c) > 1]
    for comp in circles:
        print(f"{'note: ' if note else ''}{title}: circle between {', '.join(comp)}")
        for (a, b), where in sorted(edges.items()):
            if a in comp and b in comp:
                print(f"    {a} -> {b}    ({where})")
    return len(circles)


def check(src, deep):
    files = []
    for root, _, names in os.walk(src):
        files.extend(os.path.join(root, n) for n in names if n.endswith(".rs"))
    modules = {tuple(module_of(src, f)) for f in files}
    for m in list(modules):
        for k in range(len(m)):
            modules.add(m[:k])
    top_edges, deep_edges = {}, defaultdict(dict)
    for path in sorted(files):
        mine = module_of(src, path)
        if not mine:
            continue
        where = os.path.relpath(path, src)
        for target, line in references(src, path, modules):
            if target and target[0] != mine[0]:
                top_edges.setdefault((mine[0], target[0]), f"{where}:{line}")
            for parent in deep:
                if mine[0] == parent and target and target[0] == parent:
                    a = mine[1] if len(mine) > 1 else parent
                    b = target[1] if len(target) > 1 else parent
                    if a != b:
                        deep_edges[parent].setdefault((a, b), f"{where}:{line}")
    for parent in deep:
        report(f"{src} ({parent}/)", deep_edges[parent], note=True)
    return report(src, top_edges)


def main(argv):
    srcs, deep, i = [], [], 0
    while i < len(argv):
        if argv[i] == "--deep" and i + 1 < len(argv):
            deep.append(argv[i + 1])
            i += 2
        else:
            srcs.append(argv[i])
            i += 1
    if not srcs:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    found = sum(check(src.rstrip("/"), deep) for src in srcs)
    if found:
        print(f"error: {found} import circle(s)", file=sys.stderr)
        return 1
    print(f"no import circles in {', '.join(srcs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
