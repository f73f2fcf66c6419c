"""attn_kit's import graph (every import, function-level ones included) has no cycles, its stage
engine (attn_kit.pipeline) knows nothing of fairseq, and nothing in attn_kit or attn_plugin imports
the lab (the project's own measuring and describing code)."""
import ast
import re

from attn_kit.checkout import REPO
from lab.code_stats import cycles, import_graph, module_name, python_files


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph(REPO)
    assert "attn_kit.pipeline.stages" in graph["attn_kit.recipes.translation"]
    assert "attn_kit.cli" in graph["attn_kit.pipeline.text"]
    assert "attn_kit.pipeline.stages" in graph["attn_kit.recipes.scale"]  # imported inside a function
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_attn_kit_has_no_import_cycles():
    assert cycles(import_graph(REPO)) == []


def layer(module: str) -> int:
    """attn_kit's two layers: 1 the commands (attn_kit.recipes, attn_kit.inference); 0 the runtime under
    them (the fairseq layer, planning, metrics, the stage engine, the top-level modules). The comparison
    with stock fairseq, the benchmarks, README tables, the fault catalogue and code statistics are the
    lab's, outside the kit (test_nothing_in_the_kit_or_the_plugin_imports_the_lab)."""
    return 1 if module.startswith(("attn_kit.recipes", "attn_kit.inference")) else 0


def test_no_import_runs_back_up_from_the_kits_lower_layers():
    """Each layer imports only its own and the ones below it. scripts/training_cost.py's defaults, the
    one arrow that ran back up (training_cost -> recipes.config), are read by attn_kit.recipes.cost_report."""
    graph = import_graph(REPO)
    assert [sum(layer(m) == n for m in graph) > least for n, least in ((0, 10), (1, 10))] == [True] * 2
    assert {m: sorted(d for d in graph[m] if layer(d) > layer(m)) for m in graph
            if any(layer(d) > layer(m) for d in graph[m])} == {}


def test_the_kits_top_level_is_a_few_shared_modules_and_its_packages():
    """The flat top level of 24 modules, grouped by what each is for: the fairseq layer and planning are
    packages; at the top stay the modules every layer shares."""
    top = sorted(p.name for p in (REPO / "attn_kit").glob("*.py"))
    assert top == ["__init__.py", "checkout.py", "cli.py", "options.py", "results.py", "textio.py"]
    packages = sorted(p.parent.name for p in (REPO / "attn_kit").glob("*/__init__.py"))
    assert packages == ["fairseq_layer", "inference", "metrics", "pipeline", "planning", "recipes"]


def test_the_stage_engine_knows_nothing_of_fairseq():
    """attn_kit.pipeline imports neither fairseq nor the kit's fairseq layer."""
    for name, targets in import_graph(REPO).items():
        if name.startswith("attn_kit.pipeline"):
            assert not {t for t in targets if t.startswith("attn_kit.fairseq_layer")}, name
            path = REPO / (name.replace(".", "/") + ("/__init__.py" if name.endswith("pipeline") else ".py"))
            source = path.read_text(encoding="utf-8")
            assert "import fairseq" not in source and "from fairseq" not in source, name


def is_lab(name: str) -> bool:
    return name == "lab" or name.startswith("lab.")


def test_nothing_in_the_kit_or_the_plugin_imports_the_lab():
    """lab/ (benchmarks, the GPU check, the sweep, README tables, the fault catalogue, code statistics)
    imports the kit; the kit and the plugin, all that a user's run needs, never import it: not by an
    import statement (function-level ones included), nor by a module name in a string (importlib's
    import_module, ``python -m lab.X``)."""
    graph = import_graph(REPO, folders=("attn_kit", "attn_plugin", "lab"))
    assert sum(is_lab(m) for m in graph) > 10 and sum(m.startswith("attn_plugin") for m in graph) > 10
    assert any(is_lab(m) and any(d.startswith("attn_kit") for d in graph[m]) for m in graph)  # the lab's are read
    assert {m: sorted(d for d in targets if is_lab(d)) for m, targets in graph.items()
            if not is_lab(m) and any(is_lab(d) for d in targets)} == {}
    named = re.compile(r"lab(\.\w+)*")
    for folder in ("attn_kit", "attn_plugin"):
        for path in python_files(REPO, folder):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and named.fullmatch(node.value):
                    raise AssertionError(f"{module_name(REPO, path)} names the lab's module {node.value!r}")


ENTRY_SCRIPTS = sorted(p for folder in ("scripts", "benchmarks") for p in (REPO / folder).glob("*.py")
                       if p.name != "_environment.py")


def test_every_entry_script_checks_the_environment_first():
    """Every script a user runs (scripts/*.py, benchmarks/*.py) imports _environment before the
    project (benchmarks/_environment.py is scripts/'s)."""
    assert (REPO / "benchmarks" / "_environment.py").resolve() == (REPO / "scripts" / "_environment.py")
    for path in ENTRY_SCRIPTS:
        lines = path.read_text(encoding="utf-8").splitlines()
        first_import = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("import ", "from ")))
        assert lines[first_import].strip().startswith("import _environment"), path.name


def test_a_python_without_the_project_gets_one_line_naming_the_set_up_command(tmp_path):
    """``env -i PATH=/usr/bin:/bin python3 scripts/translate.py RUN`` was a ModuleNotFoundError traceback.
    Here the suite's own Python without its site-packages (-S) stands for such a Python."""
    import subprocess
    import sys

    for path in ENTRY_SCRIPTS:
        proc = subprocess.run([sys.executable, "-S", str(path), "--help"], capture_output=True, text=True,
                              cwd=tmp_path, timeout=60)
        assert proc.returncode == 1, (path.name, proc.stdout[-300:], proc.stderr[-300:])
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: this Python"), (path.name, proc.stderr)
        assert "`source scripts/env.sh`" in lines[0] and "attn_kit" in lines[0]
