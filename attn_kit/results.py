"""Results files: every number README reports as measured comes from one.

A results file is JSON with the ``command`` that made the numbers, the git
``commit`` it ran at, the ``machine``, the ``date`` and the numbers
(``result``). :func:`provenance` makes the first four; recipes, benchmarks and
``scripts/record_result.py`` write them; ``scripts/readme_tables.py`` turns
the committed ones (the results folders of the recipes and the benchmarks)
into the tables of README and docs/.
"""
import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from . import options
from .cli import ArgumentParser, UserError, add_force_option, check_output, read_json, write_json_atomic
from .checkout import REPO



def machine() -> str:
    """CPU model and core count (and the GPU, if one is named), and the OS."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


# The instruction-set extensions that decide how fast this project's CPU work runs (torch's kernels,
# the tokenizer's regexes do not care): named so that a user can place their CPU beside the one measured.
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu() -> dict:
    """The CPU as /proc/cpuinfo names it: model name, vendor, family/model/stepping, clock (MHz, as
    reported: a virtual machine's may be nominal) and which of :data:`VECTOR_FLAGS` it has; {} where
    there is no /proc/cpuinfo."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return {}
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name"), "vendor": fields.get("vendor_id"),
            "family_model_stepping": "/".join(fields.get(k, "?") for k in ("cpu family", "model", "stepping")),
            "mhz": float(fields["cpu MHz"]) if fields.get("cpu MHz") else None,
            "vector_flags": [f for f in VECTOR_FLAGS if f in flags]}


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
    return {"command": command, "commit": git_commit(), "machine": machine(), "cpu": cpu(),
            "date": time.strftime("%Y-%m-%d")}


def write_results_file(path: Path, command, result, **extra) -> dict:
    """Write ``{command, commit, machine, date, **extra, result}`` to ``path`` atomically."""
    data = {**provenance(command), **extra, "result": result}
    write_json_atomic(path, data)
    return data


RECORD_HELP = """Run a command and file what it printed as a results file for README.

    python scripts/record_result.py recipes/results/tokens_per_update_newstest.json [--note TEXT] -- \\
        python scripts/tokens_per_update.py --src ... --max-tokens 3125 --devices 8

writes the JSON file ``{"command", "commit", "machine", "cpu", "date", "seconds",
"result"}``, where ``result`` is the command's stdout parsed as JSON (or its
text), and ``--copy FILE`` instead files an existing JSON output (such as a
recipe's results.json) under the command given. Every number README reports
as measured comes from such a file; ``python scripts/readme_tables.py`` makes
README's and docs/' tables from them.
"""


def record_main(argv=None):
    """``python scripts/record_result.py OUTPUT [--copy JSON] [--note TEXT] -- COMMAND ...``:
    run COMMAND and file what it printed as a results file (see scripts/record_result.py)."""
    p = ArgumentParser(prog="scripts/record_result.py", description=RECORD_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", type=Path, help="the results file to write (JSON)")
    p.add_argument("--copy", type=Path, metavar="JSON", help="file this JSON output instead of running anything")
    options.add(p, "note")
    add_force_option(p, "the results file")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, cmd = p.parse_args(argv[:split]), argv[split + 1:]
    if not cmd:
        p.error("give the command after -- (with --copy: the command that made the file)")
    check_output(args.output, "output", args.force)  # before the command runs
    extra = {"note": args.note} if args.note else {}
    if args.copy:
        result = read_json(args.copy, "JSON output")
        write_results_file(args.output, cmd, result, **extra)
        return 0
    start = time.time()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    except OSError as exc:
        raise UserError(f"cannot run {cmd[0]}: {exc.strerror}") from None
    if proc.returncode != 0:
        raise UserError(f"the command failed (exit {proc.returncode}); nothing recorded")
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = proc.stdout
    write_results_file(args.output, cmd, result, seconds=round(time.time() - start, 1), **extra)
    print(f"recorded {args.output}", file=sys.stderr)
    return 0

