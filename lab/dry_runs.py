"""The recipes' dry runs, written one file each, so that a restructuring can show it changed no command.

Sixteen dry runs cover every recipe and mode (the paper's runs on GPUs, Slurm, the canary, the small
modes, Table 3, the WSJ tuning grid); each is run as its shell script runs it (``python -m
attn_kit.recipes.MODULE``) in the checkout ``--checkout`` (default this one), with the time stamps and
the checkout's and work folder's paths taken out, so that two checkouts' files compare with ``diff -r``:

    python -m lab.dry_runs --output /tmp/after
    git worktree add /tmp/before HEAD~3 && python -m lab.dry_runs --checkout /tmp/before --output /tmp/before-runs
    diff -r /tmp/before-runs /tmp/after
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from attn_kit.checkout import REPO
from attn_kit.cli import ArgumentParser, UserError, log, main_guard

TRANSLATION = ("translation", "--pair", "en-de")
CORPUS = ["--src", "en", "--tgt", "de", "--train", "c/train", "--valid", "c/dev", "--test", "c/test"]  # parallel.sh's
# name: (module and its fixed arguments, the options) of each dry run
RUNS = {
    "en_de_base": (TRANSLATION, []),
    "en_de_big_8xH100": (TRANSLATION, ["--arch", "attn_paper_big", "--ngpus", "8", "--gpu", "H100"]),
    "en_de_big_slurm_2x8xA100": (TRANSLATION, ["--arch", "attn_paper_big", "--ngpus", "8", "--nnodes", "2",
                                               "--launcher", "slurm", "--gpu", "A100"]),
    "en_de_big_slurm_login_node": (TRANSLATION, ["--arch", "attn_paper_big", "--ngpus", "1", "--launcher", "slurm"]),
    "en_de_canary_H100": (TRANSLATION, ["--canary", "--ngpus", "1", "--gpu", "H100"]),
    "en_de_cpu": (TRANSLATION, ["--ngpus", "0"]),
    "en_de_bundled": (TRANSLATION, ["--bundled"]),
    "en_de_smoke": (TRANSLATION, ["--smoke"]),
    "en_fr_big": (("translation", "--pair", "en-fr"), ["--arch", "attn_paper_big", "--gpu", "H100"]),
    "parallel_small": (("parallel",), [*CORPUS, "--preset", "small"]),
    "parallel_paper": (("parallel",), [*CORPUS, "--gpu", "H100"]),
    "wsj_smoke": (("wsj",), ["--smoke"]),
    "wsj_8xH100": (("wsj",), ["--ngpus", "8", "--gpu", "H100", "--ptb", "treebank"]),
    "wsj_tune": (("wsj",), ["--tune", "--ngpus", "8", "--gpu", "H100", "--ptb", "treebank"]),
    "table3_smoke": (("table3",), ["--smoke"]),
    "table3_8xH100": (("table3",), ["--ngpus", "8", "--gpu", "H100"]),
}
STAMP = re.compile(r"\[\d\d:\d\d:\d\d\] ")


def run(checkout: Path, name: str, scratch: Path) -> str:
    """One dry run's output (stdout and stderr), normalized."""
    (module, *fixed), options = RUNS[name]
    work = scratch / name
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", f"attn_kit.recipes.{module}", *fixed, "--dry-run", *options,
                           "--workdir", str(work)], cwd=scratch, env=env, capture_output=True, text=True)
    venv = str(Path(sys.executable).parent.parent)  # the interpreter's environment, whichever checkout runs
    text = STAMP.sub("", proc.stdout + proc.stderr).replace(venv, "VENV").replace(str(checkout), "CHECKOUT")
    text = text.replace(str(work), "WORK")
    return text.replace(str(scratch), "SCRATCH") + f"\n[exit {proc.returncode}]\n"


def main(argv=None):
    p = ArgumentParser(prog="python -m lab.dry_runs", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", type=Path, default=REPO, help="the checkout whose recipes run (default this one)")
    p.add_argument("--output", type=Path, required=True, help="a folder for the files (one per dry run)")
    p.add_argument("--only", nargs="+", choices=sorted(RUNS), help="these dry runs only")
    args = p.parse_args(argv)
    if not (args.checkout / "attn_kit" / "recipes").is_dir():
        raise UserError(f"--checkout {args.checkout}: no attn_kit/recipes there")
    args.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="attn-dry-runs-") as scratch:
        for name in args.only or RUNS:
            (args.output / f"{name}.txt").write_text(run(args.checkout.resolve(), name, Path(scratch)))
            log(f"{name}: {args.output / (name + '.txt')}")


if __name__ == "__main__":
    main_guard(main)
