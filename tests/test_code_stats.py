"""scripts/code_stats.py measures what it says on a tree whose answers are known by construction."""
import json
import subprocess
import sys
from pathlib import Path

from lab.code_stats import measure

from conftest import REPO


def write(root: Path, rel: str, text: str):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cycles_long_functions_args_and_setattr_of_a_known_tree(tmp_path):
    write(tmp_path, "attn_kit/__init__.py", "")
    write(tmp_path, "attn_kit/a.py", "from . import b\n")
    write(tmp_path, "attn_kit/b.py", "def f():\n    from .a import x  # hidden in a function\n")
    write(tmp_path, "attn_kit/c.py", "from .a import y\n")  # imports a, in no cycle
    body = "".join(f"    v{i} = {i}\n" for i in range(90))
    write(tmp_path, "attn_kit/sub/__init__.py", "")
    write(tmp_path, "attn_kit/sub/d.py", f"def long(args):\n{body}    args.z = 1\n    setattr(args, 'q', 2)\n")
    params = ", ".join(f"p{i}" for i in range(10))
    write(tmp_path, "attn_kit/e.py", f"def ten({params}):\n    pass\n\n\ndef eleven({params}, *more):\n    pass\n\n\n"
                                     f"class K:\n    def method(self, {params}):\n        pass\n")
    write(tmp_path, "README.md", "one\ntwo\n")
    stats = measure(tmp_path)
    assert stats["import_cycles"] == [["attn_kit.a", "attn_kit.b"]]
    assert tuple(stats["longest_functions"][0]) == ("attn_kit/sub/d.py:long", 93, 0)
    assert stats["functions_over_80_lines"] == 1
    assert stats["functions_taking_args"] == 1
    assert stats["setattr_calls"] == 1 and stats["args_attribute_writes"] == 1
    assert stats["readme_lines"] == 2
    assert stats["functions_over_10_parameters"] == ["attn_kit/e.py:eleven (11)"]  # self is not counted
    assert stats["function_level_imports"] == ["attn_kit/b.py:2: from .a import x  # hidden in a function"]
    assert stats["lines"]["attn_kit/sub"] == 93 and stats["lines"]["attn_kit"] == 4 + 11  # e.py: 11 lines


def test_the_script_prints_json_for_this_checkout():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "code_stats.py"), "--json"],
                          capture_output=True, text=True, check=True)
    stats = json.loads(proc.stdout)
    assert stats["lines"]["attn_plugin"] > 0 and "import_cycles" in stats
    assert stats["functions_over_10_parameters"] == []  # issue 39: more belong in a plan or settings object
    # imports of the project's modules sit at the top of modules (the import graph tells the truth), but for
    # a few deferred on purpose, each saying why on its line
    deferred = stats["function_level_imports"]
    assert len(deferred) <= 10 and all("# deferred: " in line for line in deferred), deferred


def test_no_function_of_the_kit_or_the_lab_is_over_80_lines():
    """Issue 51: a function a reader can hold (the GPU check's run was 122 lines, slurm's script 81)."""
    import ast

    long = [f"{path.relative_to(REPO)}:{node.name} ({node.end_lineno - node.lineno + 1})"
            for root in ("attn_kit", "lab") for path in sorted((REPO / root).rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80]
    assert long == [], long
