#!/usr/bin/env python
"""The sweep that chose the bundled run's settings (recipes/wmt14.py MODES["bundled"]).

Each configuration is the bundled recipe with some options changed
(``NAME=--flag value ...``); each trains a fixed number of updates with the
paper's optimizer, schedule and criterion. Selection is on the bundled
*validation* split (1000 pairs), decoded several ways from the averaged and
from the final checkpoint; the test split is scored once per configuration by
the recipe itself (what ``results.json`` reports). Data preparation is shared
between configurations with the same BPE size.

    python scripts/bundled_sweep.py                       # the default table below
    python scripts/bundled_sweep.py --config lr1.2="--lr-scale 1.2" --config bpe4k="--bpe-merges 4000"

Writes one file per configuration, ``recipes/results/bundled_sweep.NAME.json``:
the command, git commit, machine, date, its options, train seconds, updates,
valid sacreBLEU of the 5-checkpoint average every 100 updates from half-way
(the curve that says how many updates are worth their time), and at the end
per decoding and averaging. Runs go under ``--root`` (default runs/bundled_sweep).
"""
import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

DEFAULT_CONFIGS = {
    "default": "",
    "bpe4k": "--bpe-merges 4000",
    "lr1.2": "--lr-scale 1.2",
    "warm200": "--warmup-updates 200",
    "tok3072": "--tokens-per-update 3072 --max-tokens-per-gpu 3072",
}

# Decodings tried on the validation split for every configuration.
DECODINGS = {
    "beam4_lenpen1.0": ["--beam", "4", "--lenpen", "1.0"],
    "beam4_lenpen0.6": ["--beam", "4", "--lenpen", "0.6"],
    "beam4_lenpen1.4": ["--beam", "4", "--lenpen", "1.4"],
    "beam4_gnmt0.6": ["--beam", "4", "--gnmt-alpha", "0.6"],
    "beam1": ["--beam", "1"],
}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def recipe(argv, env=None):
    cmd = [sys.executable, str(REPO / "recipes" / "wmt14.py"), "--pair", "en-de", "--bundled", *argv]
    log("$ " + " ".join(shlex.quote(str(c)) for c in cmd))
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"error: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'recipe failed'}")
    return proc


def share_data(base: Path, work: Path):
    """Hard-link the prepared data (raw, tok, bpe, data-bin and their stage stamps) into ``work``."""
    for d in ("raw", "tok", "bpe", "data-bin"):
        if not (work / d).exists():
            shutil.copytree(base / d, work / d, copy_function=os.link)
    (work / ".stages").mkdir(parents=True, exist_ok=True)
    for stage in ("extract", "tokenize", "bpe", "binarize"):
        shutil.copy(base / ".stages" / f"{stage}.done", work / ".stages" / f"{stage}.done")


def valid_bleu(work: Path, checkpoint: Path, flags, threads: str) -> float:
    """sacreBLEU of ``checkpoint`` on the bundled valid split, decoded with ``flags``."""
    import sacrebleu
    from sacremoses import MosesDetokenizer

    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONWARNINGS="ignore")
    bindir = Path(sys.executable).parent
    cmd = [bindir / "fairseq-generate", work / "data-bin", "--user-dir", REPO / "attn_plugin",
           "--task", "attn_translation", "--path", checkpoint, "--gen-subset", "valid", *flags,
           "--max-len-a", "1", "--max-len-b", "50", "--batch-size", "128", "--required-batch-size-multiple", "1",
           "--remove-bpe", "--cpu"]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"error: fairseq-generate failed: {proc.stderr.strip().splitlines()[-1:]}")
    hyps = {}
    for line in proc.stdout.splitlines():
        if line.startswith("D-"):
            idx, _, text = line.split("\t", 2)
            hyps[int(idx[2:])] = text
    refs = (work / "raw" / "valid.de").read_text(encoding="utf-8").split("\n")[:-1]
    detok = MosesDetokenizer(lang="de")
    out = [detok.detokenize(hyps[i].split()) for i in range(len(refs))]
    return round(sacrebleu.corpus_bleu(out, [refs]).score, 2)


def average(work: Path, n: int, upper: int) -> Path:
    """The average of the ``n`` checkpoints ending at update ``upper``."""
    out = work / "sweep" / f"avg{n}_{upper}.pt"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(REPO / "scripts" / "average_checkpoints.py"), "--inputs",
                        str(work / "checkpoints"), "--num-update-checkpoints", str(n), "--checkpoint-upper-bound",
                        str(upper), "--output", str(out)], check=True, capture_output=True)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", default=[], metavar="NAME=FLAGS",
                   help="a configuration: recipe options on top of --bundled (repeatable; default: the table)")
    p.add_argument("--root", type=Path, default=REPO / "runs" / "bundled_sweep")
    p.add_argument("--output", type=Path, default=REPO / "recipes" / "results" / "bundled_sweep.json")
    p.add_argument("--threads", default="1", help="threads per training and decoding (default 1, so that two "
                                                  "configurations can run side by side on 2 cores)")
    p.add_argument("--max-update", type=int, default=1000, help="updates each configuration trains (default 1000)")
    p.add_argument("--curve-every", type=int, default=100,
                   help="valid BLEU of the 5-checkpoint average ending every N updates from half-way on")
    args = p.parse_args()
    configs = dict(c.split("=", 1) for c in args.config) if args.config else DEFAULT_CONFIGS
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    for name, flags in configs.items():
        out_path = args.output.with_name(f"{args.output.stem}.{name}.json")
        argv = shlex.split(flags)
        merges = argv[argv.index("--bpe-merges") + 1] if "--bpe-merges" in argv else "default"
        base = args.root / f"data-bpe{merges}"
        if not (base / ".stages" / "binarize.done").exists():
            recipe([*argv, "--workdir", base, "--stop-stage", "binarize"])
        work = args.root / name
        share_data(base, work)
        keep = max(10, args.max_update // 2 // args.curve_every + 5)
        recipe([*argv, "--workdir", work, "--threads", args.threads, "--max-update", str(args.max_update),
                "--average", str(keep)])
        r = json.loads((work / "results.json").read_text())
        entry = {"flags": flags, "updates": r["updates"], "stage_seconds": r.get("stage_seconds"),
                 "tokens_per_update": r.get("tokens_per_update"), "train_command": r.get("train_command"),
                 "test_sacrebleu_avg": {"checkpoints": len(r["averaged_updates"]), "sacrebleu": r["sacrebleu"]}}
        final = r["updates"]
        curve = {}
        for upper in range(max(args.max_update // 2, 5 * args.curve_every), final + 1, args.curve_every):
            curve[upper] = valid_bleu(work, average(work, 5, upper), DECODINGS["beam4_lenpen1.0"], args.threads)
            log(f"{name}: avg5 ending at {upper}: valid {curve[upper]}")
        entry["valid_bleu_avg5_by_update"] = curve
        decodings = {}
        saved = len(list((work / "checkpoints").glob("checkpoint_*_*.pt")))
        many = min(10, saved)
        for which, ckpt in (("avg5", average(work, 5, final)), (f"avg{many}", average(work, many, final)),
                            ("last", work / "checkpoints" / "checkpoint_last.pt")):
            for dname, dflags in DECODINGS.items():
                if which != "avg5" and dname != "beam4_lenpen1.0":
                    continue
                decodings[f"{which}_{dname}"] = valid_bleu(work, ckpt, dflags, args.threads)
        entry["valid_bleu_final"] = decodings
        log(f"{name}: {json.dumps(entry['valid_bleu_final'])}")
        data = {"what": "one configuration of the sweep of the bundled EN-DE run's settings; selection on the "
                        "valid split (1000 pairs), test scored by the recipe",
                "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]), "commit": commit,
                "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
                "date": time.strftime("%Y-%m-%d"), "threads": args.threads,
                "decodings": {k: " ".join(v) for k, v in DECODINGS.items()}, "name": name, "result": entry}
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(data, indent=2) + "\n")
        log(f"wrote {out_path}")


if __name__ == "__main__":
    main()
