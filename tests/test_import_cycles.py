"""The daemon's imports go one way: no module imports, even only for type checking, a
module that imports it back (directly or around a longer loop).

A cycle makes the start-up path and the layers hard to reason about, and hides where a
concept belongs. Issue 16 broke the last ones; this test fails when a cycle appears
anywhere (the allow-list below is for a cycle someone must keep for a while, with a reason).
"""

from __future__ import annotations

import grimp

# Modules still inside a cycle, each waiting for its own change (none left since issue 16):
STILL_IN_A_CYCLE: set[str] = set()


def import_cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[set[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(component)
    return cycles


def test_no_import_cycle_but_those_still_to_break() -> None:
    graph = grimp.build_graph("daemon", cache_dir=None)  # type-checking imports included
    cycles = import_cycles(graph, set(graph.modules))
    new = [sorted(c) for c in cycles if not c <= STILL_IN_A_CYCLE]
    assert not new, f"import cycles: {new}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.y", imported="a.z")
    assert import_cycles(graph, {"a.x", "a.y", "a.z"}) == [{"a.x", "a.y"}]
