#!/usr/bin/env python
"""English constituency parsing on the Penn Treebank WSJ (Sec. 6.3, Table 4),
run it through recipes/wsj_parsing.sh.

Parsing as sequence to sequence (Vinyals et al., 2015): the input is the
sentence's words, the output its tree as a depth-first bracket sequence,
(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S. Model attn_paper_parse (4
layers, d_model 1024), beam 21, GNMT length penalty alpha 0.3, output length
up to input + 300, the last checkpoints averaged; F1 by EVALB (COLLINS.prm)
on section 22 (dev) and section 23 (test).

Modes:
  --ptb DIR              WSJ only (Table 4: 91.3 F1): sections 02-21 train, 22 dev,
                         23 test; BPE vocabulary of 16K
  --ptb DIR --extra-trees FILE
                         semi-supervised (Table 4: 92.7 F1): FILE's silver trees
                         (one bracketed tree per line) added to training; 32K vocabulary
  --smoke                every stage on CPU in a few minutes: the repo's own
                         hand-written trees (data/wsj-smoke) and a tiny model
                         (with --ptb DIR: the tiny model on your treebank)

The Penn Treebank is licensed by the LDC (Treebank-3, LDC99T42) and cannot be
downloaded here: --ptb is your copy, the folder that holds
parsed/mrg/wsj/NN/wsj_NNNN.mrg (NN = 00..24).

Stages: prepare, bpe, binarize, train, average, generate, trees, score.
Each stage skips work whose complete output exists; --dry-run prints the
commands; a killed run resumes where it stopped (training from its last
checkpoint) when the same command is run again. Results: WORKDIR/results.json.
"""
import argparse
import json
import math
import os
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recipes.lib.stages import (RecipeError, Stage, average_checkpoints, log, main_guard,  # noqa: E402
                                 run_recipe, write_json_atomic)
from recipes.lib.stages import binarize as binarize_step  # noqa: E402
from recipes.lib.trees import (REPAIRS, TreeError, delinearize, gold_tree, linearize, read_mrg,  # noqa: E402
                               read_tree_lines, strip_tree)

USER_DIR = REPO / "attn_plugin"
SMOKE_PTB = REPO / "data" / "wsj-smoke"
LDC = "Treebank-3 (LDC99T42), licensed from the Linguistic Data Consortium: https://catalog.ldc.upenn.edu/LDC99T42"

# Table 4, WSJ section 23 F1 of the Transformer (4 layers).
PAPER_F1 = {"wsj": 91.3, "semi-supervised": 92.7}

# --smoke: a tiny configuration of attn_plugin's parsing model, so that training takes about a
# minute on 2 CPU cores. Its default --lr-scale 0.25 gives it the learning rate that eq. 3 gives
# the real model: (64)^-0.5 * 0.25 = (1024)^-0.5.
SMOKE_MODEL = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64",
               "--decoder-embed-dim", "64", "--encoder-ffn-embed-dim", "256", "--decoder-ffn-embed-dim", "256",
               "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--dropout", "0.1"]


def _smoke_progress(line: str) -> bool:
    """Training lines worth echoing with --smoke (its epochs are a few updates long,
    so fairseq's end-of-epoch lines are left in the log)."""
    return any(k in line for k in ("| train_inner |", "| valid |", "done training"))


SPLITS = ("train", "valid", "test")
SRC, TGT = "words", "tree"


def section_list(spec: str):
    """'02-21' -> ['02', ..., '21']; '22' -> ['22']; '00,01' -> ['00', '01']."""
    out = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d{1,2})\s*(?:-\s*(\d{1,2})\s*)?", part)
        if not m:
            raise RecipeError(f"bad section list {spec!r}; use e.g. 02-21, 22 or 00,01")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if not 0 <= a <= b <= 24:
            raise RecipeError(f"bad section range {part.strip()!r}: WSJ sections are 00-24")
        out += [f"{s:02d}" for s in range(a, b + 1)]
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="recipes/wsj_parsing.sh", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true",
                   help="all stages on CPU in minutes on the repo's hand-written trees (data/wsj-smoke), tiny model; "
                        "with --ptb, the tiny model on your treebank")
    p.add_argument("--workdir", type=Path, help="where everything goes (default runs/wsj_<mode>); use a fresh one "
                                               "when you change options")
    p.add_argument("--dry-run", action="store_true", help="print every command, run nothing")
    p.add_argument("--stage", default="1", help="first stage to run: a 1-based number or a stage name (default 1)")
    p.add_argument("--stop-stage", help="last stage to run: a number or a stage name (default: the last)")
    g = p.add_argument_group("data")
    g.add_argument("--ptb", type=Path, help="your Penn Treebank: the folder holding parsed/mrg/wsj/NN/wsj_NNNN.mrg "
                                           f"({LDC}); the wsj folder itself also works")
    g.add_argument("--extra-trees", type=Path, metavar="FILE",
                   help="semi-supervised setting: silver trees, one bracketed tree per line, added to training")
    g.add_argument("--train-sections", help="training sections (default 02-21; data/wsj-smoke: 02)")
    g.add_argument("--dev-sections", default="22", help="development sections (default 22)")
    g.add_argument("--test-sections", default="23", help="test sections (default 23)")
    g.add_argument("--pos-tags", default="xx", choices=["xx", "keep"],
                   help="output leaves: xx = every POS tag normalized to XX as in Vinyals et al. (default; the "
                        "scored trees get the gold tags back), keep = predict the POS tags")
    g.add_argument("--vocab", type=int, help="BPE vocabulary of the input words (subword-nmt -s N --total-symbols; "
                                             "default 16000, 32000 with --extra-trees, Sec. 6.3; --smoke 300)")
    g.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="processes for BPE and binarization (default: CPUs, at most 8)")
    g = p.add_argument_group("training")
    g.add_argument("--arch", default="attn_paper_parse", help="model (default attn_paper_parse: 4 layers, d_model "
                                                              "1024; --smoke shrinks it, see SMOKE_MODEL)")
    g.add_argument("--dropout", type=float, help="P_drop (default: the arch's, 0.3; the paper tuned it on section 22)")
    g.add_argument("--ngpus", type=int, help="GPUs (default 8; 0 = CPU; --smoke: 0)")
    g.add_argument("--precision", default="auto", choices=["auto", "fp32", "fp16"],
                   help="GPU training precision (default auto = fp16 mixed precision on GPUs, fp32 on CPU; "
                        "fairseq 0.12's --bf16 means TPU and is not offered)")
    g.add_argument("--tokens-per-update", type=int,
                   help="tokens per update over all GPUs (default 25000 as the base model, Sec. 5.1; --smoke 200)")
    g.add_argument("--max-tokens-per-gpu", type=int,
                   help="most tokens one device holds per step; --update-freq makes up the rest (default 4096)")
    g.add_argument("--max-update", type=int, help="updates (default 100000 as the base model; --smoke 600)")
    g.add_argument("--warmup-updates", type=int, help="eq. 3 warmup (default 4000; --smoke 100)")
    g.add_argument("--lr-scale", type=float, help="multiplies eq. 3's learning rate (default 1; --smoke 0.25; "
                                                  "the paper tuned the rate on section 22)")
    g.add_argument("--save-interval-updates", type=int, help="checkpoint every N updates (default 1500; --smoke 25)")
    g.add_argument("--average", type=int, help="average the last N checkpoints (default 5, Sec. 6.1)")
    g = p.add_argument_group("decoding and scoring")
    g.add_argument("--beam", type=int, default=21, help="beam size (default 21, Sec. 6.3)")
    g.add_argument("--alpha", type=float, default=0.3, help="GNMT length penalty alpha (default 0.3, Sec. 6.3)")
    g.add_argument("--max-len-b", type=int, default=300, help="longest output = input length + this (default 300)")
    g.add_argument("--evalb", type=Path, metavar="PATH",
                   help="score with the official EVALB binary at PATH (default: scripts/evalb.py, the same numbers)")
    args = p.parse_args(argv)

    args.mode = "smoke" if args.smoke else "semi-supervised" if args.extra_trees else "wsj"
    bundled = args.smoke and not args.ptb  # --smoke --ptb DIR: the tiny model on your treebank
    if bundled:
        args.ptb = SMOKE_PTB
    if args.train_sections is None:
        args.train_sections = "02" if bundled else "02-21"
    args.sections = {"train": section_list(args.train_sections), "valid": section_list(args.dev_sections),
                     "test": section_list(args.test_sections)}
    args.workdir = (args.workdir or REPO / "runs" / f"wsj_{args.mode.replace('-', '_')}").resolve()
    if args.ptb:
        args.ptb = args.ptb.expanduser().resolve()
    if args.extra_trees:
        args.extra_trees = args.extra_trees.expanduser().resolve()
    if args.evalb:
        args.evalb = args.evalb.expanduser().resolve()
        if not args.dry_run and not (args.evalb.is_file() and os.access(args.evalb, os.X_OK)):
            raise RecipeError(f"--evalb {args.evalb}: not an executable file (EVALB builds with 'make' in its "
                              "folder: https://nlp.cs.nyu.edu/evalb/)")
    smoke = args.smoke
    defaults = dict(
        vocab=300 if smoke else 32000 if args.extra_trees else 16000,
        ngpus=0 if smoke else 8,
        tokens_per_update=200 if smoke else 25000,
        max_tokens_per_gpu=200 if smoke else 4096,
        max_update=600 if smoke else 100000,
        warmup_updates=100 if smoke else 4000,
        lr_scale=0.25 if smoke else 1.0,
        save_interval_updates=25 if smoke else 1500,
        average=5,
    )
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.ngpus < 0:
        raise RecipeError("--ngpus must be >= 0")
    for name in ("vocab", "tokens_per_update", "max_tokens_per_gpu", "max_update", "warmup_updates",
                 "save_interval_updates", "average", "beam"):
        if getattr(args, name) < 1:
            raise RecipeError(f"--{name.replace('_', '-')} must be >= 1")
    if args.lr_scale <= 0:
        raise RecipeError("--lr-scale must be > 0")
    return args


# ---------------------------------------------------------------------------
# Data: the user's treebank
# ---------------------------------------------------------------------------
def find_wsj(ptb: Path, sections) -> Path:
    """The folder holding the section folders NN/ of ``ptb``, checked to hold
    every section the recipe needs; a clear error otherwise."""
    expected = (f"expected the Penn Treebank WSJ files as DIR/parsed/mrg/wsj/NN/wsj_NNNN.mrg (NN = 00..24), "
                f"from {LDC}")
    if ptb is None:
        raise RecipeError(f"--ptb DIR is required: {expected}. (--smoke runs on the repo's own trees)")
    if not ptb.is_dir():
        raise RecipeError(f"--ptb {ptb}: no such folder; {expected}")
    candidates = [ptb / "parsed" / "mrg" / "wsj", ptb / "treebank_3" / "parsed" / "mrg" / "wsj",
                  ptb / "mrg" / "wsj", ptb / "wsj", ptb]
    wsj = next((c for c in candidates if c.is_dir() and any((c / s).is_dir() for s in sections)), None)
    if wsj is None:
        raise RecipeError(f"--ptb {ptb}: no WSJ section folders (such as {ptb / 'parsed/mrg/wsj/02'}) in it; "
                          f"{expected}")
    for s in sections:
        if not (wsj / s).is_dir():
            raise RecipeError(f"--ptb {ptb}: section {s} is missing (no folder {wsj / s}); {expected}")
        if not any((wsj / s).glob("*.mrg")):
            raise RecipeError(f"--ptb {ptb}: section folder {wsj / s} holds no .mrg files; {expected} "
                              "(the combined/ or tagged/ files of other releases are not tree files)")
    return wsj


def prepare_data(args, out: Path):
    """Read the sections, strip and linearize the trees; write, per split,
    ``.words`` (input), ``.tree`` (linearized output), ``.tags`` (gold POS tags),
    ``.gold`` (the treebank's trees for EVALB, one per line) and ``stats.json``."""
    wsj = find_wsj(args.ptb, sorted({s for v in args.sections.values() for s in v}))
    if args.extra_trees and not args.extra_trees.is_file():
        raise RecipeError(f"--extra-trees {args.extra_trees}: no such file (expected silver trees, one bracketed "
                          "tree per line)")
    out.mkdir(parents=True, exist_ok=True)
    stats = {"ptb": str(wsj), "sections": {k: f"{v[0]}-{v[-1]}" if len(v) > 1 else v[0]
                                           for k, v in args.sections.items()},
             "pos_tags": args.pos_tags}

    def write(split, trees, gold: bool):
        n = skipped = 0
        names = [SRC, TGT, "tags"] + (["gold"] if gold else [])
        files = {k: open(out / f"{split}.{k}", "w", encoding="utf-8", errors="surrogateescape") for k in names}
        try:
            for tree in trees:
                stripped = strip_tree(tree)
                if stripped is None:  # nothing but empty elements
                    skipped += 1
                    continue
                files[SRC].write(" ".join(stripped.words()) + "\n")
                files[TGT].write(" ".join(linearize(stripped, args.pos_tags)) + "\n")
                files["tags"].write(" ".join(stripped.tags()) + "\n")
                if gold:
                    files["gold"].write(str(gold_tree(tree)) + "\n")
                n += 1
        finally:
            for f in files.values():
                f.close()
        return n, skipped

    def section_trees(split):
        for s in args.sections[split]:
            for path in sorted((wsj / s).glob("*.mrg")):
                yield from read_mrg(path)

    extra = [0]

    def train_trees():
        yield from section_trees("train")
        if args.extra_trees:
            for tree in read_tree_lines(args.extra_trees):
                extra[0] += 1
                yield tree

    try:
        for split in SPLITS:
            n, skipped = write(split, train_trees() if split == "train" else section_trees(split), split != "train")
            stats[f"{split}_trees"] = n
            if skipped:
                stats[f"{split}_skipped_empty"] = skipped
            if n == 0:
                raise RecipeError(f"no trees in sections {', '.join(args.sections[split])} of {wsj}")
        if args.extra_trees:
            stats["extra_trees"] = extra[0]
    except TreeError as exc:
        raise RecipeError(f"malformed tree: {exc}") from None
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    log("trees: " + ", ".join(f"{k} {stats[f'{k}_trees']}" for k in SPLITS)
        + (f" (of which {stats['extra_trees']} extra)" if args.extra_trees else ""))


# ---------------------------------------------------------------------------
# From the model's output back to trees, and scoring
# ---------------------------------------------------------------------------
def read_hypotheses(gen_out: Path, expected: int):
    """The D- lines of fairseq-generate's output, in input order."""
    hyps = {}
    with open(gen_out, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            if line.startswith("D-"):
                fields = line.rstrip("\n").split("\t")
                hyps[int(fields[0][2:])] = fields[2] if len(fields) > 2 else ""
    if len(hyps) != expected:
        raise RecipeError(f"{gen_out}: {len(hyps)} hypotheses for {expected} sentences")
    return [hyps[i] for i in range(expected)]


def _lines(path: Path):
    return path.read_text(encoding="utf-8", errors="surrogateescape").split("\n")[:-1]


def rebuild_trees(prep: Path, gen_out: Path, out: Path, split: str, pos_tags: str) -> dict:
    """Delinearize every hypothesis with its input words into ``out`` (one tree per
    line); return the repair counts."""
    words, tags = _lines(prep / f"{split}.{SRC}"), _lines(prep / f"{split}.tags")
    hyps = read_hypotheses(gen_out, len(words))
    totals, repaired = Counter(), 0
    with open(out, "w", encoding="utf-8", errors="surrogateescape") as f:
        for hyp, w, t in zip(hyps, words, tags):
            tree, repairs = delinearize(hyp.split(), w.split(), t.split() if pos_tags == "xx" else None)
            f.write(str(tree) + "\n")
            totals.update(repairs)
            repaired += bool(repairs)
    return {"sentences": len(words), "repaired_sentences": repaired, **{k: totals.get(k, 0) for k in REPAIRS}}


def evalb_command(args, gold: Path, test: Path):
    cmd = [sys.executable, REPO / "scripts" / "evalb.py", "-e", "1000000"]
    if args.evalb:
        cmd += ["--evalb", args.evalb]
    return cmd + [gold, test]


def _clean(summary: dict) -> dict:
    """EVALB's numbers rounded as it prints them; NaN (an F1 of 0/0) as null."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else round(v, 2) if isinstance(v, float) else v)
            for k, v in summary.items()}


def write_results(args):
    from scripts.evalb import parse_summary

    W = args.workdir
    out = {"mode": args.mode, "arch": args.arch, "model_overrides": SMOKE_MODEL if args.smoke else [],
           "lr_scale": args.lr_scale, "warmup_updates": args.warmup_updates, "max_update": args.max_update}
    if args.dropout is not None:
        out["dropout"] = args.dropout
    repairs = json.loads((W / "eval" / "repairs.json").read_text())
    for split, name in (("valid", "dev"), ("test", "test")):
        report = (W / "eval" / f"{split}.evalb").read_text(encoding="latin-1")
        try:
            summary = parse_summary(report)
        except ValueError as exc:
            raise RecipeError(f"{W / 'eval' / f'{split}.evalb'}: {exc}") from None
        all_, short = _clean(summary["all"]), _clean(summary.get("len<=40", {}))
        out[f"{name}_f1"] = all_.get("f1")
        out[name] = {"sections": ",".join(args.sections[split]), "evalb_all": all_, "evalb_len<=40": short,
                     "repairs": repairs[split]}
    if args.mode in PAPER_F1:
        out["paper_test_f1"] = PAPER_F1[args.mode]
    stats = json.loads((W / "prep" / "stats.json").read_text())
    out["data"] = stats
    vocab = W / "data-bin" / f"dict.{SRC}.txt"
    if vocab.exists():
        with open(vocab, encoding="utf-8") as f:
            out["vocabulary"] = sum(1 for _ in f) + 4  # fairseq's 4 special symbols
    out["bpe_symbols"] = args.vocab
    out["scorer"] = (f"EVALB binary {args.evalb} with COLLINS.prm settings" if args.evalb
                     else "scripts/evalb.py (EVALB with COLLINS.prm)")
    if args.pos_tags == "xx":
        out["tagging_accuracy_note"] = "POS tags predicted as XX; scored trees carry the gold tags"
    train_log = W / "logs" / "train.log"
    text = train_log.read_text(encoding="utf-8", errors="replace") if train_log.exists() else ""
    last = re.findall(r"@ (\d+) updates", text) or re.findall(r"num_updates[ =](\d+)", text)
    avg_log = W / "logs" / "average.log"
    averaged = re.findall(r"^averaging \d+ checkpoints: (.*)$",
                          avg_log.read_text(encoding="utf-8", errors="replace") if avg_log.exists() else "", re.M)
    from recipes.lib.launch import batch_plan

    plan = batch_plan(args.tokens_per_update, args.ngpus or 1, args.max_tokens_per_gpu)
    out.update({
        "updates": int(last[-1]) if last else None, "gpus": args.ngpus,
        "tokens_per_update": plan.tokens_per_update, "max_tokens": plan.max_tokens, "update_freq": plan.update_freq,
        "checkpoint": str(W / "checkpoint_avg.pt"),
        "averaged_checkpoints": averaged[-1].split(", ") if averaged else None,
        "decoding": {"beam": args.beam, "length_penalty": f"GNMT alpha {args.alpha:g}",
                     "max_len": f"input + {args.max_len_b}"},
    })
    write_json_atomic(W / "results.json", out)


# ---------------------------------------------------------------------------
# The stages
# ---------------------------------------------------------------------------
def train_command(args, data_bin: Path, save_dir: Path):
    """fairseq-train with the paper's optimizer, schedule and criterion (Sec. 5.3-5.4)."""
    from recipes.lib.launch import batch_plan, launcher, paper_optimization, precision_flags

    plan = batch_plan(args.tokens_per_update, args.ngpus or 1, args.max_tokens_per_gpu)
    cmd = launcher(args.ngpus, 1, log_dir=str(args.workdir / "logs"))
    # --required-batch-size-multiple 1: fairseq's main branch drops a last batch that is not a
    # multiple of it (default 8), which would empty the 6-sentence --smoke dev set.
    # Epochs of WSJ are short (~150 updates of 25000 tokens), so checkpoints and
    # validation follow updates, not epochs (--save-interval / --validate-interval
    # only keep fairseq from also doing both at every epoch's end).
    cmd += [data_bin, "--user-dir", USER_DIR, "--task", "attn_translation", "--arch", args.arch,
            *(SMOKE_MODEL if args.smoke else []), *(["--dropout", args.dropout] if args.dropout is not None else []),
            *paper_optimization(args.warmup_updates, args.lr_scale),
            "--max-tokens", plan.max_tokens, "--update-freq", plan.update_freq, "--required-batch-size-multiple", "1",
            *precision_flags(args.precision, args.ngpus), *(["--cpu"] if args.ngpus == 0 else []),
            "--max-update", args.max_update, "--seed", "1",
            "--save-dir", save_dir, "--save-interval-updates", args.save_interval_updates,
            "--keep-interval-updates", args.average, "--no-epoch-checkpoints", "--save-interval", "1000000",
            "--validate-interval-updates", args.save_interval_updates, "--validate-interval", "1000000",
            "--log-format", "simple", "--log-interval", "50" if args.smoke else "100", "--no-progress-bar"]
    return cmd


def stages(args):
    W = args.workdir
    prep, bpe, data_bin, ckpt = W / "prep", W / "bpe", W / "data-bin", W / "checkpoints"
    avg, gen, ev = W / "checkpoint_avg.pt", W / "gen", W / "eval"
    gpu = args.ngpus > 0
    texts = [f"{split}.{lang}" for split in SPLITS for lang in (SRC, TGT)]
    # The tiny --smoke model on CPU: one thread. Two threads on a 2-core machine that is busy
    # with anything else make every step wait on the other thread (seen: 30x slower).
    cpu_env = {"OMP_NUM_THREADS": "1"} if args.smoke and not gpu else None

    def prepare(ctx):
        with ctx.output(prep) as tmp:
            where = args.ptb if args.ptb else "PTB_DIR (give --ptb)"
            extra = f"; add {args.extra_trees} to training" if args.extra_trees else ""
            ctx.step(f"read {where}/parsed/mrg/wsj sections train {args.train_sections}, dev {args.dev_sections}, "
                     f"test {args.test_sections}{extra}; strip function tags and -NONE-; linearize "
                     f"(POS tags: {args.pos_tags}) into {prep}", prepare_data, args, tmp)

    def learn_apply_bpe(ctx):
        with ctx.output(bpe) as tmp:
            if not ctx.dry_run:
                tmp.mkdir(parents=True)
            ctx.sh(["subword-nmt", "learn-bpe", "-s", args.vocab, "--total-symbols",
                    "--input", prep / f"train.{SRC}", "--output", tmp / "codes"])
            for split in SPLITS:
                ctx.sh(["subword-nmt", "apply-bpe", "-c", tmp / "codes", "--num-workers", args.workers],
                       stdin=prep / f"{split}.{SRC}", stdout=tmp / f"{split}.{SRC}")
                ctx.step(f"copy {prep / f'{split}.{TGT}'} -> {bpe / f'{split}.{TGT}'} (bracket symbols need no BPE)",
                         lambda s=split: (tmp / f"{s}.{TGT}").write_bytes((prep / f"{s}.{TGT}").read_bytes()))

    def binarize(ctx):
        binarize_step(ctx, SRC, TGT, bpe, data_bin, args.workers)

    def train(ctx):
        ctx.sh(train_command(args, data_bin, ckpt), tail=_smoke_progress if args.smoke else 1, env=cpu_env)

    def average(ctx):
        average_checkpoints(ctx, ckpt, avg, args.average)

    def generate(ctx):
        if not ctx.dry_run:
            gen.mkdir(parents=True, exist_ok=True)
        for split in ("valid", "test"):
            if (gen / f"{split}.out").exists() and not ctx.dry_run:
                print(f"  # decode {split}: done already", flush=True)
                continue
            with ctx.output(gen / f"{split}.out") as tmp:
                ctx.sh(["fairseq-generate", data_bin, "--user-dir", USER_DIR, "--task", "attn_translation",
                        "--path", avg, "--gen-subset", split, "--beam", args.beam, "--gnmt-alpha", args.alpha,
                        "--max-len-a", "1", "--max-len-b", args.max_len_b,
                        "--batch-size", "64" if gpu else "16", "--required-batch-size-multiple", "1",
                        "--remove-bpe", *([] if gpu else ["--cpu"])], stdout=tmp, tail=1, env=cpu_env)

    def trees(ctx):
        def run():
            ev.mkdir(parents=True, exist_ok=True)
            counts = {}
            for split in ("valid", "test"):
                with ctx.output(ev / f"{split}.parsed") as tmp:
                    counts[split] = rebuild_trees(prep, gen / f"{split}.out", tmp, split, args.pos_tags)
                log(f"{split}: {counts[split]['repaired_sentences']} of {counts[split]['sentences']} "
                    "outputs needed repairs")
            write_json_atomic(ev / "repairs.json", counts)

        ctx.step(f"delinearize {gen}/{{valid,test}}.out with the input words into {ev}/{{valid,test}}.parsed, "
                 "repairing malformed output" + (" (gold POS tags for the XX leaves)" if args.pos_tags == "xx"
                                                else ""), run)

    def score(ctx):
        if not ctx.dry_run:
            ev.mkdir(parents=True, exist_ok=True)
        for split in ("valid", "test"):
            with ctx.output(ev / f"{split}.evalb") as tmp:
                ctx.sh(evalb_command(args, prep / f"{split}.gold", ev / f"{split}.parsed"), stdout=tmp)
        ctx.step(f"write {W / 'results.json'}: EVALB F1 on dev and test, repair counts", write_results, args)

    return [
        Stage("prepare", prepare, "read the treebank, strip, linearize",
              outputs=[prep / f"{split}.{ext}" for split in SPLITS for ext in (SRC, TGT, "tags")]
              + [prep / "valid.gold", prep / "test.gold", prep / "stats.json"]),
        Stage("bpe", learn_apply_bpe, f"BPE on the input words, {args.vocab} symbols (subword-nmt)",
              inputs=[prep / t for t in texts], outputs=[bpe / "codes", *(bpe / t for t in texts)]),
        Stage("binarize", binarize, "fairseq-preprocess --joined-dictionary",
              inputs=[bpe / t for t in texts], outputs=[data_bin / f"dict.{SRC}.txt", data_bin / f"dict.{TGT}.txt"]),
        Stage("train", train, f"fairseq-train --arch {args.arch}{' (tiny)' if args.smoke else ''}, "
                              f"{args.max_update} updates, {args.ngpus or 'no'} GPU{'s' if args.ngpus != 1 else ''}",
              inputs=[data_bin / f"dict.{SRC}.txt"], outputs=[ckpt / "checkpoint_last.pt"]),
        Stage("average", average, f"average the last {args.average} checkpoints", inputs=[ckpt], outputs=[avg]),
        Stage("generate", generate, f"fairseq-generate on dev and test: beam {args.beam}, GNMT alpha "
                                    f"{args.alpha:g}, max length input + {args.max_len_b}",
              inputs=[avg, data_bin / f"test.{SRC}-{TGT}.{SRC}.bin"], outputs=[gen / "valid.out", gen / "test.out"]),
        Stage("trees", trees, "output sequences -> trees, with repairs",
              inputs=[gen / "valid.out", gen / "test.out"],
              outputs=[ev / "valid.parsed", ev / "test.parsed", ev / "repairs.json"]),
        Stage("score", score, "EVALB (COLLINS.prm) F1 on dev (22) and test (23)",
              inputs=[ev / "valid.parsed", ev / "test.parsed", prep / "valid.gold", prep / "test.gold"],
              outputs=[W / "results.json"]),
    ]


def report(r: dict):
    """Print F1 and repair counts."""

    def f1(v):
        return "n/a" if v is None else f"{v:.2f}"

    paper = f" (paper, Table 4: {r['paper_test_f1']})" if "paper_test_f1" in r else ""
    print(f"\nEVALB F1: dev {f1(r['dev_f1'])}, test {f1(r['test_f1'])}{paper}")
    for name in ("dev", "test"):
        rep = r[name]["repairs"]
        fixes = ", ".join(f"{k} {rep[k]}" for k in REPAIRS if rep.get(k))
        print(f"{name}: {rep['repaired_sentences']} of {rep['sentences']} outputs repaired" + (f" ({fixes})" if fixes
                                                                                              else ""))


def main():
    args = parse_args()
    run_recipe(args, stages(args), report)


if __name__ == "__main__":
    main_guard(main)
