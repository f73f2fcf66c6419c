"""What learning BPE on a sample of the training pairs costs in BLEU, measured: the recipe's small
preset (the bundled run's settings) on a Tatoeba corpus, BPE learned on every training pair and on
the share of them the WMT14 recipe samples for that pair (``--bpe-learn-pairs``: 1M of EN-DE's 4.5M
pairs, 1M of EN-FR's 36M), the same training seeds both ways.

Each run is ``recipes/parallel.sh`` with the bundled settings; the two ways share nothing but the
split (each has its own data folder, the seeds of one way share it). The results file is written
after every run, so a stopped benchmark keeps what finished; a second call skips the runs the
results file holds (and the recipe's stages skip their complete outputs).
"""
import argparse
import json
import lzma
import subprocess
import sys
import time
from pathlib import Path
from typing import List

from attn_kit.checkout import REPO
from attn_kit.cli import ArgumentParser, UserError, add_output_option, log, write_json_atomic, write_text_atomic
from attn_kit.recipes import config
from attn_kit.recipes.wmt14_data import PAIRS
from attn_kit.results import provenance


def bundled_argv() -> List[str]:
    """The bundled run's own settings (recipes/configs/wmt14.yaml, ``bundled:``, but its data) as
    recipes/parallel.sh's options."""
    own = {k: v for k, v in config.load("wmt14")["bundled"].items() if k not in ("pair", "data")}
    argv = []
    for key, value in own.items():
        flag = key.replace("_", "-")
        argv += ([f"--{flag}"] if value else [f"--no-{flag}"]) if isinstance(value, bool) else [f"--{flag}", str(value)]
    return argv


def parse_args(argv=None):
    p = ArgumentParser(prog="python benchmarks/bpe_sample.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", type=Path, required=True,
                   help="a Tatoeba export, English<TAB>other per line (../shared/data/tatoeba/fra-eng.txt)")
    p.add_argument("--lang", default="fr", help="the other language and WMT14 pair (en-LANG; default fr)")
    p.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 3],
                   help="training seeds, each run both ways (default 1,2,3)")
    p.add_argument("--workdir", type=Path, default=None, help="where the runs go (default runs/bpe_sample_en_LANG)")
    add_output_option(p, "the results file", default=None)
    args = p.parse_args(argv)
    if not args.source.is_file():
        raise UserError(f"--source {args.source}: no such file (a Tatoeba export: ../shared/data/tatoeba/)")
    args.workdir = args.workdir or REPO / "runs" / f"bpe_sample_en_{args.lang}"
    args.out = args.out or REPO / "recipes" / "results" / f"bpe_sample_en_{args.lang}.json"
    return args


def split(args) -> Path:
    """The corpus split as the bundled EN-DE one was made (scripts/make_bundled_data.py: test 2000,
    valid 1000, the rest train, no English sentence in two splits), as raw text files PREFIX.en/.LANG."""
    folder = args.workdir / "split"
    text = args.workdir / "text"
    if not (text / f"train.{args.lang}").exists():
        args.workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_bundled_data.py"), "--source", str(args.source),
                        "--lang", args.lang, "--output", str(folder), "--force"], check=True)
        text.mkdir(parents=True, exist_ok=True)
        for name in ("train", "valid", "test"):
            with lzma.open(folder / f"{name}.en-{args.lang}.tsv.xz", "rt", encoding="utf-8") as f:
                pairs = [line.rstrip("\n").split("\t") for line in f]
            for i, lang in enumerate(("en", args.lang)):
                write_text_atomic(text / f"{name}.{lang}", "".join(p[i] + "\n" for p in pairs))
    return text


def sample_pairs(lang: str, train_pairs: int) -> dict:
    """The WMT14 recipe's sample for en-``lang`` scaled to this corpus: the same share of its pairs."""
    default = config.settings("wmt14", "paper")["bpe_learn_pairs"]
    wmt = PAIRS[f"en-{lang}"].train_pairs
    return {"pairs": round(train_pairs * default / wmt), "of": train_pairs, "default": default, "wmt14_pairs": wmt}


def run_argv(args, text: Path, way: str, seed: int, learn: dict) -> List[str]:
    return ["bash", str(REPO / "recipes" / "parallel.sh"), "--src", "en", "--tgt", args.lang,
            "--train", str(text / "train"), "--valid", str(text / "valid"), "--test", str(text / "test"),
            *bundled_argv(), "--seed", str(seed), "--workdir", str(args.workdir / f"{way}_seed{seed}"),
            "--data-workdir", str(args.workdir / f"{way}_data"),
            *(["--bpe-learn-pairs", str(learn["pairs"])] if way == "sample" else [])]


def main(argv=None) -> int:
    args = parse_args(argv)
    text = split(args)
    with open(text / "train.en", encoding="utf-8") as f:
        train_pairs = sum(1 for _ in f)
    learn = sample_pairs(args.lang, train_pairs)
    out = {"benchmark": "bpe_sample", **provenance(), "settings": {"bundled": bundled_argv(), "seeds": args.seeds},
           "bpe_learn": learn, "runs": []}
    if args.out.exists():  # runs filed by an earlier call are kept
        out["runs"] = json.loads(args.out.read_text())["runs"]
    done = {(r["way"], r["seed"]) for r in out["runs"]}
    for seed in args.seeds:
        for way in ("sample", "all"):
            if (way, seed) in done:
                continue
            cmd = run_argv(args, text, way, seed, learn)
            log(f"{way}, seed {seed}: {' '.join(cmd)}")
            t0 = time.time()
            proc = subprocess.run(cmd)
            work = args.workdir / f"{way}_seed{seed}"
            if proc.returncode != 0 or not (work / "results.json").exists():
                raise UserError(f"the {way} run of seed {seed} failed (exit {proc.returncode}): see {work}")
            result = json.loads((work / "results.json").read_text())
            bpe = args.workdir / f"{way}_data" / "bpe" / "learn.json"
            out["runs"].append({"way": way, "seed": seed, "command": " ".join(cmd[1:]),
                                "wall_seconds": round(time.time() - t0),
                                "bpe_learn_json": json.loads(bpe.read_text()) if bpe.exists() else None,
                                **{k: result[k] for k in ("sacrebleu", "sacrebleu_signature", "bleu_t2t", "vocabulary",
                                                          "updates", "test_sentences")}})
            write_json_atomic(args.out, out)
            log(f"{way}, seed {seed}: sacreBLEU {result['sacrebleu']}; wrote {args.out}")
    return 0
