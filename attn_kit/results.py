"""Results files: every number README reports as measured comes from one.

A results file is JSON with the ``command`` that made the numbers, the git
``commit`` it ran at, the ``machine``, the ``date`` and the numbers
(``result``). :func:`provenance` makes the first four; recipes, benchmarks and
``scripts/record_result.py`` write them; ``scripts/readme_tables.py`` turns
the committed ones (under ``recipes/results/`` and ``benchmarks/results/``)
into README's tables.
"""
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def machine() -> str:
    """CPU model and core count (and the GPU, if one is named), and the OS."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def git_commit() -> str:
    """HEAD of this checkout, marked when tracked files have uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown (no git)"
    return (head or "unknown (not a git checkout)") + (" (with uncommitted changes)" if dirty and head else "")


def command_line(argv=None) -> str:
    """The running program's command line, as a shell would take it."""
    argv = sys.argv if argv is None else argv
    return " ".join(shlex.quote(str(a)) for a in argv)


def provenance(command=None) -> dict:
    if command is None:
        command = command_line([Path(sys.executable).name, *sys.argv])
    elif not isinstance(command, str):
        command = command_line(command)
    return {"command": command, "commit": git_commit(), "machine": machine(), "date": time.strftime("%Y-%m-%d")}


def write_results_file(path: Path, command, result, **extra) -> dict:
    """Write ``{command, commit, machine, date, **extra, result}`` to ``path`` atomically."""
    data = {**provenance(command), **extra, "result": result}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return data
