"""How the code is built, measured from its source (``python scripts/code_stats.py``).

Lines per folder, the longest functions, how many functions take a whole ``args`` Namespace, ``setattr`` calls, the
share of docstring lines and the import cycles between attn_kit's modules (function-level imports included): the
numbers issue 28 asks for before and after a restructuring. Nothing is imported or run; only parsed.
"""
import ast
import importlib.util
import json
from collections import Counter
from pathlib import Path
from typing import Dict, List
import networkx
from attn_kit.cli import ArgumentParser

FOLDERS = ("attn_plugin", "attn_kit", "lab", "recipes", "scripts", "benchmarks", "tests")


def python_files(root: Path, folder: str) -> List[Path]:
    return sorted(p for p in (root / folder).rglob("*.py") if ".venv" not in p.parts)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def docstring_lines(tree: ast.AST) -> int:
    """Lines of every docstring (module, class, function) in ``tree``."""
    return sum(node.body[0].end_lineno - node.body[0].lineno + 1 for node in ast.walk(tree)
               if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
               and ast.get_docstring(node, clean=False) is not None)


def functions(tree: ast.AST):
    """(qualified name, lines, nested functions) of every function, nested ones included."""
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(child)) - 1
                out.append((prefix + child.name, child.end_lineno - child.lineno + 1, nested))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def imports_of(tree: ast.AST, module: str, is_package: bool, known: set) -> set:
    """The attn_kit modules ``module`` imports anywhere in its file (relative imports resolved)."""
    found = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph(root: Path, trees: Dict[Path, ast.AST] = None, folders=("attn_kit",)) -> Dict[str, set]:
    """The modules of ``folders`` (attn_kit's unless told) and the modules of theirs each imports,
    anywhere in its file."""
    if trees is None:
        trees = {p: ast.parse(p.read_text(encoding="utf-8")) for folder in folders
                 for p in python_files(Path(root), folder)}
    known = {module_name(root, p) for p in trees}
    return {module_name(root, p): imports_of(t, module_name(root, p), p.name == "__init__.py", known)
            for p, t in trees.items()}


def cycles(graph: Dict[str, set]) -> List[List[str]]:
    """Strongly connected components of more than one module (networkx's Tarjan, modules and their imports
    visited in sorted order)."""
    g = networkx.DiGraph()
    g.add_nodes_from(sorted(graph))
    g.add_edges_from((v, w) for v in sorted(graph) for w in sorted(graph[v]))
    return [sorted(group) for group in networkx.strongly_connected_components(g) if len(group) > 1]


def is_args_attribute(node) -> bool:
    """Whether ``node`` is ``args.NAME``."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args"


PROJECT = ("attn_kit", "attn_plugin")
MAX_PARAMETERS = 10  # more, and the arguments belong in a plan or settings object


def parameter_count(node) -> int:
    """A function's parameters (``self``/``cls`` not counted; ``*args`` and ``**kwargs`` one each)."""
    a = node.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    own = 1 if names and names[0].arg in ("self", "cls") else 0
    return len(names) - own + (a.vararg is not None) + (a.kwarg is not None)


def function_imports(tree: ast.AST, lines: List[str], rel: str) -> List[str]:
    """The imports of the project's own modules inside functions, as "path:line: the line"."""
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                own = (isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith(PROJECT))
                       or isinstance(node, ast.Import) and any(a.name.startswith(PROJECT) for a in node.names))
                if own:
                    out.append(f"{rel}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return out


def measure(root: Path) -> dict:
    root = Path(root)
    lines, docs, code = Counter(), Counter(), Counter()
    kit_trees, all_functions, deferred = {}, [], []
    for folder in FOLDERS:
        for path in python_files(root, folder):
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
            rel = path.relative_to(root)
            key = "/".join(rel.parts[:2]) if folder == "attn_kit" and len(rel.parts) > 2 else folder
            lines[key] += len(text.splitlines())
            if folder != "tests":
                docs[folder] += docstring_lines(tree)
                code[folder] += len(text.splitlines())
            if folder == "attn_kit":
                kit_trees[path] = tree
                deferred += function_imports(tree, text.splitlines(), str(rel))
                all_functions += [(f"{rel}:{name}", n, nested) for name, n, nested in functions(tree)]
    nodes = [(p, node) for p, t in kit_trees.items() for node in ast.walk(t)]
    defs = [(p, node) for p, node in nodes if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    takes_args = sum(1 for _, f in defs if any(a.arg == "args" for a in f.args.args + f.args.kwonlyargs))
    recipe_reads = {node.attr for p, node in nodes if "recipes" in p.parts and is_args_attribute(node)}
    writes = sum(1 for _, node in nodes if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                 for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                 for leaf in ast.walk(target) if is_args_attribute(leaf))
    setattrs = sum(1 for _, node in nodes if isinstance(node, ast.Call)
                   and isinstance(node.func, ast.Name) and node.func.id == "setattr")
    long_docs = sorted((n, str(p.relative_to(root))) for p, t in kit_trees.items()
                       if (n := len((ast.get_docstring(t, clean=False) or "").splitlines())) >= 30)
    many = sorted(f"{p.relative_to(root)}:{f.name} ({parameter_count(f)})" for p, f in defs
                  if parameter_count(f) > MAX_PARAMETERS)
    readme = root / "README.md"
    return {
        "lines": dict(sorted(lines.items())),
        "longest_functions": sorted(all_functions, key=lambda f: -f[1])[:10],
        "functions_over_80_lines": sum(1 for f in all_functions if f[1] > 80),
        "functions_taking_args": takes_args,
        f"functions_over_{MAX_PARAMETERS}_parameters": many,
        "function_level_imports": sorted(deferred),
        "recipes_args_attributes": len(recipe_reads),
        "setattr_calls": setattrs,
        "args_attribute_writes": writes,
        "docstring_share": {k: round(docs[k] / code[k], 3) for k in docs if code[k]},
        "module_docstrings_30_lines_or_more": long_docs,
        "import_cycles": cycles(import_graph(root, kit_trees)),
        "readme_lines": len(readme.read_text(encoding="utf-8").splitlines()) if readme.exists() else None,
    }


def report(stats: dict) -> str:
    out = ["lines per folder (.py):"]
    out += [f"  {k:<24} {v:>6}" for k, v in stats["lines"].items()]
    out.append("10 longest functions (lines, nested functions):")
    out += [f"  {n:>4}  {name}  ({nested} nested)" for name, n, nested in stats["longest_functions"]]
    out.append(f"functions over 80 lines: {stats['functions_over_80_lines']}")
    out.append(f"attn_kit functions taking `args`: {stats['functions_taking_args']}")
    many = stats[f"functions_over_{MAX_PARAMETERS}_parameters"]
    out.append(f"attn_kit functions of more than {MAX_PARAMETERS} parameters: " + (", ".join(many) or "none"))
    out.append(f"imports of the project's modules inside attn_kit's functions: {len(stats['function_level_imports'])}")
    out += [f"  {line}" for line in stats["function_level_imports"]]
    out.append(f"distinct args.* attributes read in attn_kit/recipes: {stats['recipes_args_attributes']}")
    out.append(f"setattr calls in attn_kit: {stats['setattr_calls']}; "
               f"assignments to args.* attributes: {stats['args_attribute_writes']}")
    out.append("docstring lines / lines: " + ", ".join(f"{k} {v:.0%}" for k, v in stats["docstring_share"].items()))
    out.append("module docstrings of 30+ lines: " + (", ".join(f"{p} ({n})" for n, p in
                                                           stats["module_docstrings_30_lines_or_more"]) or "none"))
    out.append("import cycles in attn_kit: " + ("; ".join(" <-> ".join(c) for c in stats["import_cycles"]) or "none"))
    out.append(f"README.md lines: {stats['readme_lines']}")
    return "\n".join(out)


def main(argv=None):
    p = ArgumentParser(prog="scripts/code_stats.py", description=__doc__)
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                   help="a checkout to measure (default this one; e.g. a `git worktree add` of an older commit)")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = p.parse_args(argv)
    stats = measure(args.root)
    print(json.dumps(stats, indent=1) if args.json else report(stats))
