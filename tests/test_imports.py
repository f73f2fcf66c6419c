"""attn_kit's import graph (every import, function-level ones included) has no cycles."""
import ast
from pathlib import Path

from attn_kit.checkout import REPO

KIT = REPO / "attn_kit"

# The two cycles among the recipes that issue 28's recipe helpers remove (canary <-> common,
# parallel <-> wmt14): the only ones allowed here until they are gone.
KNOWN = {frozenset({"attn_kit.recipes.canary", "attn_kit.recipes.common"}),
         frozenset({"attn_kit.recipes.parallel", "attn_kit.recipes.wmt14"})}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set) -> set:
    """The attn_kit modules ``path`` imports anywhere in its body."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # "from . import x": module x
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict:
    paths = sorted(KIT.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports(p, modules) for p in paths}


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "attn_kit.pipeline.stages" in graph["attn_kit.recipes.wmt14"]
    assert "attn_kit.cli" in graph["attn_kit.pipeline.text"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_attn_kit_has_no_import_cycles():
    found = set(cycles(import_graph()))
    assert found <= KNOWN, sorted(map(sorted, found - KNOWN))


def test_the_stage_engine_knows_nothing_of_fairseq():
    """attn_kit.pipeline imports neither fairseq nor the kit's fairseq layer."""
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("attn_kit.pipeline"):
            assert not {t for t in targets if t.startswith(("attn_kit.fairseq", "attn_kit.curves"))}, name
            source = (REPO / (name.replace(".", "/") + ".py")).read_text(encoding="utf-8") \
                if not name.endswith("pipeline") else ""
            assert "import fairseq" not in source and "from fairseq" not in source, name
