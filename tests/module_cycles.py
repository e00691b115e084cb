#!/usr/bin/env python3
"""The module graph of src/ has no import cycle but the one ARCHITECTURE.md allows (issue 62).

Files are nodes; an edge is a `use` or a `crate::`/`super::`/`self::` path in a file's code
(comments and everything from its first `#[cfg(test)]` dropped) to the file that defines the
module it names, following `pub use` re-exports to the file an item really lives in. A strongly
connected component of more than one file is a cycle. The one allowed is `embedded::engine` <->
`embedded::write`: two halves of `impl Engine`. Exits 1 naming any other, with the edges
inside it.

    tests/module_cycles.py        # from the repository root; .ci/run runs it
"""
import os
import re
import sys

ALLOWED = [["embedded::engine", "embedded::write"]]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def modules(root):
    """Module path (`a::b`, '' for the crate root) -> file."""
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(directory, name)
                parts = os.path.relpath(path, root)[:-3].split(os.sep)
                if parts[-1] in ("mod", "lib", "main"):
                    parts = parts[:-1]
                found["::".join(parts)] = path
    return found


def code(path):
    text = open(path, encoding="utf-8").read()
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    return "\n".join(line for line in text.split("\n") if not line.strip().startswith("//"))


def flatten(tree):
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]] (an `as` rename dropped)."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, part):
        if "{" in part and part.endswith("}"):
            head, inner = part[: part.index("{")], part[part.index("{") + 1 : -1]
            depth, current, items = 0, "", []
            for ch in inner:
                if ch == "," and depth == 0:
                    items.append(current)
                    current = ""
                    continue
                depth += ch == "{"
                depth -= ch == "}"
                current += ch
            if current:
                items.append(current)
            for item in items:
                walk(prefix + [s for s in head.split("::") if s], item)
        else:
            segments = prefix + [s for s in re.sub(r"as\w+$", "", part).split("::") if s]
            if segments and segments[-1] == "self":
                segments = segments[:-1]
            out.append(segments)

    walk([], tree)
    return out


def main():
    files = modules(ROOT)
    texts = {module: code(path) for module, path in files.items()}

    def absolute(module, segments):
        here = module.split("::") if module else []
        if not segments:
            return None
        if segments[0] == "crate":
            return segments[1:]
        if segments[0] in ("super", "self"):
            current, index = here, 0
            while index < len(segments) and segments[index] in ("super", "self"):
                if segments[index] == "super":
                    current = current[:-1]
                index += 1
            return current + segments[index:]
        if "::".join(here + [segments[0]]) in files:
            return here + segments
        return None

    def uses(module, public_only):
        paths = []
        for match in re.finditer(r"(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", texts[module]):
            if public_only and not match.group(1):
                continue
            for segments in flatten(match.group(2)):
                path = absolute(module, segments)
                if path:
                    paths.append(path)
        return paths

    reexports = {}
    for module in files:
        for path in uses(module, True):
            reexports.setdefault(module, {})[path[-1]] = path

    def resolve(path, depth=0):
        for length in range(len(path), 0, -1):
            candidate = "::".join(path[:length])
            if candidate in files:
                if length < len(path) and depth < 8:
                    target = reexports.get(candidate, {}).get(path[length])
                    if target and target != path:
                        return resolve(target, depth + 1)
                return candidate
        return None

    edges = {module: set() for module in files}
    for module in files:
        paths = uses(module, False)
        body = re.sub(r"use\s+[^;]+;", "", texts[module])
        for match in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", body):
            path = absolute(module, match.group(1).split("::"))
            if path:
                paths.append(path)
        for path in paths:
            target = resolve(path)
            if target and target != module and not module.startswith(target + "::"):
                edges[module].add(target)

    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    sys.setrecursionlimit(10_000)

    def strong(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges[node]:
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            strong(node)
    refused = [cycle for cycle in cycles if cycle not in ALLOWED]
    for cycle in refused:
        print("module_cycles: an import cycle: " + " <-> ".join(cycle), file=sys.stderr)
        for node in cycle:
            print(f"  {node} -> {sorted(edges[node] & set(cycle))}", file=sys.stderr)
    if refused:
        return 1
    print(f"module_cycles: {len(files)} files, {len(cycles)} cycle(s), each allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
