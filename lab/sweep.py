"""The sweep that chose the bundled run's settings (``bundled`` in recipes/configs/wmt14.yaml).

Each configuration is the bundled recipe with some options changed (``NAME=--flag value ...``); each trains a fixed
number of updates with the paper's optimizer, schedule and criterion. Selection is on the bundled *validation* split
(1000 pairs), decoded several ways from the averaged and from the final checkpoint; the test split is scored once
per configuration by the recipe itself (what ``results.json`` reports). Data preparation is shared between
configurations with the same BPE size.

    python scripts/bundled_sweep.py                       # the default table below
    python scripts/bundled_sweep.py --config lr1.2="--lr-scale 1.2" --config bpe4k="--bpe-merges 4000"

Writes one file per configuration, ``recipes/results/bundled_sweep.NAME.json``: the command, git commit, machine,
date, its options, train seconds, updates, valid sacreBLEU of the 5-checkpoint average every 100 updates from
half-way (the curve that says how many updates are worth their time), and at the end per decoding and averaging.
Runs go under ``--root`` (default runs/bundled_sweep).
"""
import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

from attn_kit.cli import ArgumentParser, Number, UserError, add_force_option, check_output, log, write_json_atomic
from attn_kit.pipeline.lock import workdir_lock
from attn_kit.results import provenance
from attn_kit.checkout import REPO
from attn_kit.fairseq_layer.fairseq_commands import DecodePlan
from attn_kit.metrics.scores import detokenize, sacrebleu_score
from attn_kit.recipes.common import generate_command, read_hypotheses

STAGES_OF_THE_DATA = ("download", "extract", "tokenize", "bpe", "binarize")

DEFAULT_CONFIGS = {
    "default": "",
    "bpe4k": "--bpe-merges 4000",
    "lr1.2": "--lr-scale 1.2",
    "warm200": "--warmup-updates 200",
    "tok3072": "--tokens-per-update 3072 --max-tokens-per-gpu 3072",
}

# Decodings tried on the validation split for every configuration.
DECODINGS = {
    **{f"beam4_lenpen{p}": DecodePlan(beam=4, max_len_b=50, batch_size=128, lenpen=p) for p in (1.0, 0.6, 1.4)},
    "beam4_gnmt0.6": DecodePlan(beam=4, max_len_b=50, batch_size=128, alpha=0.6),
    "beam1": DecodePlan(beam=1, max_len_b=50, batch_size=128),
}


def recipe(argv, env=None):
    cmd = [sys.executable, "-m", "attn_kit.recipes.translation", "--pair", "en-de", "--bundled", *argv]
    log("$ " + " ".join(shlex.quote(str(c)) for c in cmd), sys.stderr)
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise UserError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "the recipe failed")
    return proc


def share_data(base: Path, work: Path):
    """Hard-link the prepared data (raw, tok, bpe, data-bin and their stage stamps) into ``work``."""
    for d in ("raw", "tok", "bpe", "data-bin"):
        if not (work / d).exists():
            shutil.copytree(base / d, work / d, copy_function=os.link)
    (work / ".stages").mkdir(parents=True, exist_ok=True)
    for stage in STAGES_OF_THE_DATA:
        shutil.copy(base / ".stages" / f"{stage}.done", work / ".stages" / f"{stage}.done")


@dataclasses.dataclass(frozen=True)
class SweepSettings:
    """The sweep's options, read once (:func:`build`)."""
    configs: Dict[str, str]  # name: recipe options on top of --bundled
    root: Path
    output: Path
    threads: str
    max_update: int
    curve_every: int
    force: bool
    ngpus: int = 0  # every decoding runs on the CPU (attn_kit.recipes.common.generate_command)

    def results_file(self, name: str) -> Path:
        return self.output.with_name(f"{self.output.stem}.{name}.json")


def build(argv=None) -> SweepSettings:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", default=[], metavar="NAME=FLAGS",
                   help="a configuration: recipe options on top of --bundled (repeatable; default: the table)")
    p.add_argument("--root", type=Path, default=REPO / "runs" / "bundled_sweep")
    p.add_argument("--output", type=Path, default=REPO / "recipes" / "results" / "bundled_sweep.json")
    p.add_argument("--threads", default="1", help="threads per training and decoding (default 1, so that two "
                                                  "configurations can run side by side on 2 cores)")
    p.add_argument("--max-update", type=Number(int, minimum=1), default=1000,
                   help="updates each configuration trains (default 1000)")
    p.add_argument("--curve-every", type=Number(int, minimum=1), default=100,
                   help="valid BLEU of the 5-checkpoint average ending every N updates from half-way on")
    add_force_option(p, "the results files")
    a = p.parse_args(argv)
    configs = dict(c.split("=", 1) for c in a.config) if a.config else DEFAULT_CONFIGS
    return SweepSettings(configs, a.root, a.output, a.threads, a.max_update, a.curve_every, a.force)


def valid_bleu(s: SweepSettings, work: Path, checkpoint: Path, name: str) -> float:
    """sacreBLEU of ``checkpoint`` on the bundled valid split, decoded as the recipe decodes
    (:func:`attn_kit.recipes.common.generate_command`) with the plan DECODINGS[``name``]."""
    cmd = generate_command(s, work / "data-bin", checkpoint, "valid", DECODINGS[name])
    env = dict(os.environ, OMP_NUM_THREADS=s.threads, MKL_NUM_THREADS=s.threads, PYTHONWARNINGS="ignore")
    out = work / "sweep" / f"valid.{checkpoint.stem}.{name}.out"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        proc = subprocess.run([str(Path(sys.executable).parent / cmd[0]), *map(str, cmd[1:])], stdout=f,
                              stderr=subprocess.PIPE, text=True, env=env)
    if proc.returncode != 0:
        raise UserError(f"fairseq-generate failed: {proc.stderr.strip().splitlines()[-1:]}")
    refs = (work / "raw" / "valid.de").read_text(encoding="utf-8").split("\n")[:-1]
    return sacrebleu_score(detokenize(read_hypotheses(out, len(refs)), "de"), refs)


def average(work: Path, n: int, upper: int) -> Path:
    """The average of the ``n`` checkpoints ending at update ``upper``."""
    out = work / "sweep" / f"avg{n}_{upper}.pt"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "attn_kit.fairseq_layer.checkpoints", "--inputs",
                        str(work / "checkpoints"), "--num-update-checkpoints", str(n), "--checkpoint-upper-bound",
                        str(upper), "--output", str(out)], check=True, capture_output=True)
    return out


def run_config(s: SweepSettings, name: str, flags: str):
    """One configuration: its data (shared by BPE size), its training, its evaluation, its results file."""
    argv = shlex.split(flags)
    merges = argv[argv.index("--bpe-merges") + 1] if "--bpe-merges" in argv else "default"
    base = s.root / f"data-bpe{merges}"
    if not (base / ".stages" / "binarize.done").exists():
        recipe([*argv, "--workdir", base, "--stop-stage", "binarize"])
    work = s.root / name
    with workdir_lock(work):  # the recipe below takes it for itself: not held across that
        share_data(base, work)
    keep = max(10, s.max_update // 2 // s.curve_every + 5)
    recipe([*argv, "--workdir", work, "--threads", s.threads, "--max-update", str(s.max_update),
            "--average", str(keep)])
    with workdir_lock(work):
        entry = evaluate(s, work, flags)
    data = {"what": "one configuration of the sweep of the bundled EN-DE run's settings; selection on the "
                    "valid split (1000 pairs), test scored by the recipe",
            **provenance(), "threads": s.threads,
            "decodings": {k: " ".join(["--beam", str(v.beam), *v.penalty_flags()]) for k, v in DECODINGS.items()},
            "name": name, "result": entry}
    write_json_atomic(s.results_file(name), data)
    log(f"wrote {s.results_file(name)}", sys.stderr)


def main(argv=None):
    s = build(argv)
    for name in s.configs:  # every results file checked before anything trains
        check_output(s.results_file(name), "--output", s.force)
    for name, flags in s.configs.items():
        run_config(s, name, flags)


def evaluate(s: SweepSettings, work: Path, flags: str) -> dict:
    """The finished run in ``work``: its test score, and valid BLEU of averages along the way
    and of each decoding setting at the end."""
    name = work.name
    r = json.loads((work / "results.json").read_text())
    entry = {"flags": flags, "updates": r["updates"], "stage_seconds": r.get("stage_seconds"),
             "tokens_per_update": r.get("tokens_per_update"), "train_command": r.get("train_command"),
             "test_sacrebleu_avg": {"checkpoints": len(r["averaged_updates"]), "sacrebleu": r["sacrebleu"]}}
    final = r["updates"]
    curve = {}
    for upper in range(max(s.max_update // 2, 5 * s.curve_every), final + 1, s.curve_every):
        curve[upper] = valid_bleu(s, work, average(work, 5, upper), "beam4_lenpen1.0")
        log(f"{name}: avg5 ending at {upper}: valid {curve[upper]}", sys.stderr)
    entry["valid_bleu_avg5_by_update"] = curve
    decodings = {}
    saved = len(list((work / "checkpoints").glob("checkpoint_*_*.pt")))
    many = min(10, saved)
    for which, ckpt, names in (("avg5", average(work, 5, final), DECODINGS),
                               (f"avg{many}", average(work, many, final), ["beam4_lenpen1.0"]),
                               ("last", work / "checkpoints" / "checkpoint_last.pt", ["beam4_lenpen1.0"])):
        for dname in names:
            decodings[f"{which}_{dname}"] = valid_bleu(s, work, ckpt, dname)
    entry["valid_bleu_final"] = decodings
    log(f"{name}: {json.dumps(entry['valid_bleu_final'])}", sys.stderr)
    return entry
