"""English constituency parsing on the Penn Treebank WSJ (Sec. 6.3, Table 4),
run it through recipes/wsj_parsing.sh.

Parsing as sequence to sequence (Vinyals et al., 2015): the input is the
sentence's words, the output its tree as a depth-first bracket sequence,
(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S. Model attn_paper_parse (4
layers, d_model 1024, otherwise the base model: h 8, d_ff 2048, P_drop 0.1;
attention dropout 0.2, warmup 16000 and 0.5 x eq. 3's rate from the authors'
tensor2tensor transformer_parsing_base, where the paper gives no values),
beam 21, GNMT length penalty alpha 0.3, output length up to input + 300, the
last checkpoints averaged; F1 by EVALB (COLLINS.prm) on section 22 (dev) and
section 23 (test).

Modes:
  --ptb DIR              WSJ only (Table 4: 91.3 F1): sections 02-21 train, 22 dev,
                         23 test; BPE vocabulary of 16K
  --ptb DIR --extra-trees FILE
                         semi-supervised (Table 4: 92.7 F1): FILE's silver trees
                         (one bracketed tree per line) added to training; 32K vocabulary
  --smoke                every stage on CPU in a few minutes: the repo's own
                         hand-written trees (data/wsj-smoke) and a tiny model
                         (with --ptb DIR: the tiny model on your treebank)
  --tune [--tune-grid SPEC]
                         Sec. 6.3: "a small number of experiments to select the
                         dropout, both attention and residual, learning rates
                         and beam size on the Section 22 development set":
                         one training per (dropout, attention dropout, lr
                         scale) of the grid, each decoded on section 22 with
                         every (beam, alpha); the best dev F1 is decoded once
                         on section 23. SPEC is 'KEY=V,V,...;KEY=V,...' or a
                         JSON file {"KEY": [V, ...], ...}. Default grid: 8
                         trainings x 4 decodings (--smoke: 2 x 2), tune_grid in
                         recipes/configs/wsj.yaml.

The Penn Treebank is licensed by the LDC (Treebank-3, LDC99T42) and cannot be
downloaded here: --ptb is your copy, the folder that holds
parsed/mrg/wsj/NN/wsj_NNNN.mrg (NN = 00..24).

Stages: prepare, bpe, binarize, train, average, generate, trees, score.
With --tune: prepare, bpe, binarize, one tune-d<D>-a<A>-lr<L> stage per
training setting (train, average, decode and score section 22 for every
decoding setting, in WORKDIR/tune/d<D>-a<A>-lr<L>/), select, generate (section
23 with the selected setting), trees, score.
Each stage skips work whose complete output exists; --dry-run prints the
commands; a killed run resumes where it stopped (training from its last
checkpoint) when the same command is run again; with --tune, a trial that
finished training is never trained again, and the grid may grow between runs
in the same WORKDIR (the new trials run, the selection is made again).
Results: WORKDIR/results.json.
"""
import argparse
import itertools
import json
import math
import os
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

from ..cli import UsageError, UserError, log, main_guard, write_json_atomic
from ..metrics.trees import (REPAIRS, TreeError, delinearize, gold_tree, linearize, read_mrg, read_tree_lines,
                             strip_tree)
from ..paper import TABLE4_F1
from ..pipeline import verify
from ..pipeline.lock import workdir_lock
from ..pipeline.progress import watch_output
from ..fairseq_commands import average_checkpoints, binarize
from ..pipeline.stages import Stage
from . import canary, common, config, scale
from ..checkout import REPO

SMOKE_PTB = REPO / "data" / "wsj-smoke"
LDC = "Treebank-3 (LDC99T42), licensed from the Linguistic Data Consortium: https://catalog.ldc.upenn.edu/LDC99T42"

# --tune (Sec. 6.3): training keys (one training each) and decoding keys (tried on section 22 with
# every trained model, no retraining). The grids are in recipes/configs/wsj.yaml.
TRAIN_KEYS = ("dropout", "attention_dropout", "lr_scale")
DECODE_KEYS = ("beam", "alpha")
TUNE_GRID_HELP = ("the --tune grid: 'KEY=V,V,...;KEY=V,...' or a JSON file {\"KEY\": [V, ...], ...}; keys "
                  "dropout, attention_dropout, lr_scale (one training per combination), beam, alpha (each tried on "
                  "section 22 with every trained model). A key left out is fixed at its option's value "
                  "(--dropout, --attention-dropout, --lr-scale, --beam, --alpha). Implies --tune. An option given "
                  "on the command line fixes its key in the default grid (recipes/configs/wsj.yaml). E.g. "
                  "'dropout=0.1,0.2,0.3;beam=21'.")


def grid_spec(grid: dict) -> str:
    """A grid as --tune-grid's SPEC: 'dropout=0.1,0.2;beam=21'."""
    return ";".join(f"{k}={','.join(f'{v:g}' for v in values)}" for k, values in grid.items())


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
            raise UserError(f"bad section list {spec!r}; use e.g. 02-21, 22 or 00,01")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if not 0 <= a <= b <= 24:
            raise UserError(f"bad section range {part.strip()!r}: WSJ sections are 00-24")
        out += [f"{s:02d}" for s in range(a, b + 1)]
    return out


def _grid_value(key: str, text, where: str):
    """One value of a --tune-grid key, checked; a UserError names ``where``."""
    try:
        if isinstance(text, bool):
            raise ValueError
        if key == "beam":
            value = int(text) if not isinstance(text, float) or text.is_integer() else None
            if value is None or value < 1:
                raise ValueError
            return value
        value = float(text)
        if not math.isfinite(value):
            raise ValueError
    except (TypeError, ValueError):
        kind = "an integer >= 1" if key == "beam" else "a number"
        raise UserError(f"--tune-grid {where}: {key} value {text!r} is not {kind}") from None
    if key in ("dropout", "attention_dropout") and not 0 <= value < 1:
        raise UserError(f"--tune-grid {where}: {key} {value:g} is not in [0, 1)")
    if key == "lr_scale" and value <= 0:
        raise UserError(f"--tune-grid {where}: lr_scale {value:g} must be > 0")
    if key == "alpha" and value < 0:
        raise UserError(f"--tune-grid {where}: alpha {value:g} must be >= 0")
    return value


def parse_tune_grid(spec: str) -> dict:
    """``--tune-grid``: 'dropout=0.1,0.2;lr_scale=0.5,1;beam=21' or the path of a JSON
    file {"dropout": [0.1, 0.2], "beam": 21, ...} -> {key: [values]} in the order
    given, repeated values dropped. Keys: TRAIN_KEYS + DECODE_KEYS (- or _)."""
    keys = TRAIN_KEYS + DECODE_KEYS
    path = Path(spec).expanduser()
    try:
        is_file = path.is_file()
    except OSError:  # e.g. a long KEY=V list is too long a file name
        is_file = False
    if spec.strip().endswith(".json") or is_file:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UserError(f"--tune-grid {spec}: cannot read it ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise UserError(f"--tune-grid {spec}: not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise UserError(f"--tune-grid {spec}: expected a JSON object such as "
                              '{"dropout": [0.1, 0.2], "beam": [10, 21]}')
        items = [(str(k), v if isinstance(v, list) else [v]) for k, v in raw.items()]
        where = spec
    else:
        items = []
        for part in filter(str.strip, spec.split(";")):
            key, eq, values = part.partition("=")
            if not eq:
                raise UserError(f"--tune-grid {spec!r}: {part.strip()!r} is not KEY=V,V,... "
                                  "(e.g. dropout=0.1,0.2;beam=10,21)")
            items.append((key, [v.strip() for v in values.split(",")]))
        where = repr(spec)
    grid = {}
    for key, values in items:
        name = key.strip().replace("-", "_")
        if name not in keys:
            raise UserError(f"--tune-grid {where}: unknown key {key.strip()!r}; keys: {', '.join(keys)}")
        if name in grid:
            raise UserError(f"--tune-grid {where}: {name} is given twice")
        if not values or values == [""]:
            raise UserError(f"--tune-grid {where}: {name} has no values")
        grid[name] = list(dict.fromkeys(_grid_value(name, v, where) for v in values))
    if not grid:
        raise UserError(f"--tune-grid {where}: empty; give e.g. dropout=0.1,0.2;beam=10,21")
    return grid


def arch_dropouts(arch: str) -> dict:
    """``arch``'s own dropout and attention dropout (the values a --tune key takes when
    neither the grid nor an option sets it), as fairseq-train would parse them."""
    from ..build import parse_train_args, plugin_flags

    parsed = parse_train_args(plugin_flags(arch=arch))
    return {"dropout": parsed.dropout, "attention_dropout": parsed.attention_dropout}


def tune_grid(args, given: dict, default_grid: dict) -> dict:
    """The full --tune grid: ``--tune-grid``'s keys, else ``default_grid``'s; an option
    given on the command line fixes its key (an error if --tune-grid also sets it);
    keys still unset take their option's value (dropouts: the arch's)."""
    options = {"dropout": args.dropout, "attention_dropout": args.attention_dropout, "lr_scale": given["lr_scale"],
               "beam": given["beam"], "alpha": given["alpha"]}
    grid = dict(args.tune_grid) if args.tune_grid else {k: list(v) for k, v in default_grid.items()}
    for key, value in options.items():
        if value is None:
            continue
        if args.tune_grid and key in args.tune_grid:
            raise UsageError(f"--{key.replace('_', '-')} and --tune-grid both set {key}; give it in one place")
        grid[key] = [value]
    fallback = {"lr_scale": args.lr_scale, "beam": args.beam, "alpha": args.alpha}
    if any(key not in grid for key in ("dropout", "attention_dropout")):
        fallback.update(arch_dropouts(args.arch))
    return {key: grid[key] if key in grid else [fallback[key]] for key in TRAIN_KEYS + DECODE_KEYS}


def parse_args(argv=None):
    W, S = config.settings("wsj", "wsj"), config.settings("wsj", "wsj", "smoke")
    grids = (f"Default --tune grid (tune_grid in recipes/configs/wsj.yaml):\n    {grid_spec(W['tune_grid'])}\n"
             f"    --smoke: {grid_spec(S['tune_grid'])}\n")
    p = argparse.ArgumentParser(prog="recipes/wsj_parsing.sh", usage=scale.USAGE, description=__doc__ + "\n" + grids,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true",
                   help="all stages on CPU in minutes on the repo's hand-written trees (data/wsj-smoke), tiny model; "
                        "with --ptb, the tiny model on your treebank")
    common.add_run_options(p, "runs/wsj_<mode>")
    p.add_argument("--tune", action="store_true",
                   help="select dropout, attention dropout, learning rate, beam and alpha on section 22 as the "
                        "paper did (Sec. 6.3): train every training setting of --tune-grid, decode section 22 "
                        "with every decoding setting, pick the best dev F1, decode section 23 once with it")
    p.add_argument("--tune-grid", metavar="SPEC", help=TUNE_GRID_HELP.replace("%", "%%"))
    g = p.add_argument_group("data")
    g.add_argument("--ptb", type=Path, help="your Penn Treebank: the folder holding parsed/mrg/wsj/NN/wsj_NNNN.mrg "
                                           f"({LDC}); the wsj folder itself also works")
    g.add_argument("--extra-trees", type=Path, metavar="FILE",
                   help="semi-supervised setting: silver trees, one bracketed tree per line, added to training")
    g.add_argument("--train-sections", help=f"training sections (default {W['train_sections']}; data/wsj-smoke: 02)")
    g.add_argument("--dev-sections", help=f"development sections (default {W['dev_sections']})")
    g.add_argument("--test-sections", help=f"test sections (default {W['test_sections']})")
    g.add_argument("--pos-tags", default="xx", choices=["xx", "keep"],
                   help="output leaves: xx = every POS tag normalized to XX as in Vinyals et al. (default; the "
                        "scored trees get the gold tags back), keep = predict the POS tags")
    g.add_argument("--vocab", type=int, help=f"BPE vocabulary of the input words (subword-nmt -s N --total-symbols; "
                                             f"default {W['vocab']}, "
                                             f"{config.settings('wsj', 'semi-supervised')['vocab']} with "
                                             f"--extra-trees, Sec. 6.3; --smoke {S['vocab']})")
    g.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="processes for BPE and binarization (default: CPUs, at most 8)")
    g = p.add_argument_group("training")
    g.add_argument("--arch", default="attn_paper_parse", help="model (default attn_paper_parse: 4 layers, d_model "
                                                              f"1024; --smoke shrinks it: {common.SIZES[S['size']].describe()})")
    g.add_argument("--dropout", type=float, help="P_drop, residual dropout (default: the arch's, 0.1 as the base "
                                                 "model; the paper tuned it on section 22, t2t used 0.2)")
    g.add_argument("--attention-dropout", type=float,
                   help="dropout on the attention weights, fairseq's --attention-dropout (default: the arch's, 0.2 "
                        "as t2t transformer_parsing_base; the paper tuned it on section 22)")
    common.add_device_options(g)
    g.add_argument("--tokens-per-update", type=int,
                   help=f"tokens per update over all GPUs (default {W['tokens_per_update']} as the base model, "
                        f"Sec. 5.1; --smoke {S['tokens_per_update']})")
    g.add_argument("--max-tokens-per-gpu", type=int,
                   help=f"most tokens one device holds per step; --update-freq makes up the rest (default "
                        f"{W['max_tokens_per_gpu']})")
    g.add_argument("--max-update", type=int, help=f"updates (default {W['max_update']} as the base model; --smoke "
                                                  f"{S['max_update']})")
    g.add_argument("--warmup-updates", type=int, help=f"eq. 3 warmup (default {W['warmup_updates']} as t2t "
                                                      f"transformer_parsing_base; --smoke {S['warmup_updates']})")
    g.add_argument("--lr-scale", type=float, help=f"multiplies eq. 3's learning rate (default {W['lr_scale']:g}: t2t "
                                                  "transformer_parsing_base's learning_rate 0.05 is 0.5 x eq. 3; "
                                                  f"--smoke {S['lr_scale']:g}; the paper tuned the rate on section 22)")
    g.add_argument("--save-interval-updates", type=int, help=f"checkpoint every N updates (default "
                                                             f"{W['save_interval_updates']}; --smoke "
                                                             f"{S['save_interval_updates']})")
    g.add_argument("--average", type=int, help=f"average the last N checkpoints (default {W['average']}, Sec. 6.1)")
    g = p.add_argument_group("decoding and scoring")
    g.add_argument("--beam", type=int, help=f"beam size (default {W['beam']}, Sec. 6.3)")
    g.add_argument("--alpha", type=float, help=f"GNMT length penalty alpha (default {W['alpha']:g}, Sec. 6.3)")
    common.add_beam_stop_option(g)
    g.add_argument("--max-len-b", type=int, help=f"longest output = input length + this (default {W['max_len_b']})")
    g.add_argument("--evalb", type=Path, metavar="PATH",
                   help="score with the official EVALB binary at PATH (default: scripts/evalb.py, the same numbers)")
    args = scale.parse(p, argv)

    args.mode = "smoke" if args.smoke else "semi-supervised" if args.extra_trees else "wsj"
    settings = config.settings("wsj", "wsj", "semi-supervised" if args.extra_trees else None,
                               "smoke" if args.smoke else None)
    bundled = args.smoke and not args.ptb  # --smoke --ptb DIR: the tiny model on your treebank
    if bundled:
        args.ptb = SMOKE_PTB
        settings["train_sections"] = "02"
    given = {"lr_scale": args.lr_scale, "beam": args.beam, "alpha": args.alpha}
    default_grid = settings.pop("tune_grid")  # --tune-grid's default, as data (not a SPEC)
    args.size = common.model_size(settings, {})
    args.model = args.size.flags() if args.size else []
    common.apply_settings(args, settings)
    args.validate_interval_updates = args.save_interval_updates  # WSJ validates at every checkpoint
    args.length_penalty = "gnmt"
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
            raise UserError(f"--evalb {args.evalb}: not an executable file (EVALB builds with 'make' in its "
                            "folder: https://nlp.cs.nyu.edu/evalb/)")
    if args.vocab < 1:
        raise UsageError("--vocab must be >= 1")
    for name in ("dropout", "attention_dropout"):
        if getattr(args, name) is not None and not 0 <= getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be in [0, 1)")
    args.tune = args.tune or args.tune_grid is not None
    if args.canary and args.tune:
        raise UsageError("--canary checks one training run; each --tune trial is a run like it: run the canary "
                         "without --tune (its prediction times one trial)")
    if args.tune_grid is not None:
        args.tune_grid = parse_tune_grid(args.tune_grid)
    args.grid = tune_grid(args, given, default_grid) if args.tune else None
    args.recipe_module = "attn_kit.recipes.wsj"
    args.vocab_estimate = (args.vocab + 60, " (about --vocab BPE symbols and ~60 bracket symbols, until the binarize "
                                            "stage made the dictionary)")
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
        raise UserError(f"--ptb DIR is required: {expected}. (--smoke runs on the repo's own trees)")
    if not ptb.is_dir():
        raise UserError(f"--ptb {ptb}: no such folder; {expected}")
    candidates = [ptb / "parsed" / "mrg" / "wsj", ptb / "treebank_3" / "parsed" / "mrg" / "wsj",
                  ptb / "mrg" / "wsj", ptb / "wsj", ptb]
    wsj = next((c for c in candidates if c.is_dir() and any((c / s).is_dir() for s in sections)), None)
    if wsj is None:
        raise UserError(f"--ptb {ptb}: no WSJ section folders (such as {ptb / 'parsed/mrg/wsj/02'}) in it; "
                          f"{expected}")
    for s in sections:
        if not (wsj / s).is_dir():
            raise UserError(f"--ptb {ptb}: section {s} is missing (no folder {wsj / s}); {expected}")
        if not any((wsj / s).glob("*.mrg")):
            raise UserError(f"--ptb {ptb}: section folder {wsj / s} holds no .mrg files; {expected} "
                              "(the combined/ or tagged/ files of other releases are not tree files)")
    return wsj


def prepare_data(args, out: Path):
    """Read the sections, strip and linearize the trees; write, per split,
    ``.words`` (input), ``.tree`` (linearized output), ``.tags`` (gold POS tags),
    ``.gold`` (the treebank's trees for EVALB, one per line) and ``stats.json``."""
    wsj = find_wsj(args.ptb, sorted({s for v in args.sections.values() for s in v}))
    if args.extra_trees and not args.extra_trees.is_file():
        raise UserError(f"--extra-trees {args.extra_trees}: no such file (expected silver trees, one bracketed "
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
                raise UserError(f"no trees in sections {', '.join(args.sections[split])} of {wsj}")
        if args.extra_trees:
            stats["extra_trees"] = extra[0]
    except TreeError as exc:
        raise UserError(f"malformed tree: {exc}") from None
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    log("trees: " + ", ".join(f"{k} {stats[f'{k}_trees']}" for k in SPLITS)
        + (f" (of which {stats['extra_trees']} extra)" if args.extra_trees else ""))


# ---------------------------------------------------------------------------
# From the model's output back to trees, and scoring
# ---------------------------------------------------------------------------
def _lines(path: Path):
    return path.read_text(encoding="utf-8", errors="surrogateescape").split("\n")[:-1]


def rebuild_trees(prep: Path, gen_out: Path, out: Path, split: str, pos_tags: str, gold_tags: bool = True) -> dict:
    """Delinearize every hypothesis with its input words into ``out`` (one tree per
    line); return the repair counts. With ``gold_tags`` (and POS tags predicted as XX)
    the leaves get the gold tags, for EVALB; without, the model's own (what
    scripts/translate.py gives for raw text)."""
    words, tags = _lines(prep / f"{split}.{SRC}"), _lines(prep / f"{split}.tags")
    hyps = common.read_hypotheses(gen_out, len(words))
    totals, repaired = Counter(), 0
    with open(out, "w", encoding="utf-8", errors="surrogateescape") as f:
        for hyp, w, t in zip(hyps, words, tags):
            tree, repairs = delinearize(hyp.split(), w.split(), t.split() if gold_tags and pos_tags == "xx" else None)
            f.write(str(tree) + "\n")
            totals.update(repairs)
            repaired += bool(repairs)
    return {"sentences": len(words), "repaired_sentences": repaired, **{k: totals.get(k, 0) for k in REPAIRS}}


def evalb_command(args, gold: Path, test: Path):
    cmd = [sys.executable, "-m", "attn_kit.metrics.evalb", "-e", "1000000"]
    if args.evalb:
        cmd += ["--evalb", args.evalb]
    return cmd + [gold, test]


def _clean(summary: dict) -> dict:
    """EVALB's numbers rounded as it prints them; NaN (an F1 of 0/0) as null."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else round(v, 2) if isinstance(v, float) else v)
            for k, v in summary.items()}


def evalb_blocks(path: Path):
    """EVALB's ``-- All --`` and ``-- len<=40 --`` blocks of the report in ``path``, cleaned."""
    from ..metrics.evalb import parse_summary

    try:
        summary = parse_summary(path.read_text(encoding="latin-1"))
    except ValueError as exc:
        raise UserError(f"{path}: {exc}") from None
    return _clean(summary["all"]), _clean(summary.get("len<=40", {}))


def write_results(args):
    W = args.workdir
    sel = json.loads((W / "tune" / "selected.json").read_text())["selected"] if args.tune else None
    out = {"mode": args.mode, "arch": args.arch, "model_overrides": args.model,
           "lr_scale": sel["lr_scale"] if sel else args.lr_scale, "warmup_updates": args.warmup_updates,
           "max_update": args.max_update}
    for key in ("dropout", "attention_dropout"):
        value = sel[key] if sel else getattr(args, key)
        if value is not None:
            out[key] = value
    repairs = json.loads((W / "eval" / "repairs.json").read_text())
    for split, name in (("valid", "dev"), ("test", "test")):
        all_, short = evalb_blocks(W / "eval" / f"{split}.evalb")
        out[f"{name}_f1"] = all_.get("f1")
        out[name] = {"sections": ",".join(args.sections[split]), "evalb_all": all_, "evalb_len<=40": short,
                     "repairs": repairs[split]}
    if args.mode in TABLE4_F1:
        out["paper_test_f1"] = TABLE4_F1[args.mode]
    # what scripts/translate.py RUN_DIR --tokenized reproduces: the test words in, the trees out (model's tags)
    # relative to the run directory (attn_plugin.run_cards resolves them there): a copied run works
    out.update({"test_source": common.run_path(W, W / "prep" / f"test.{SRC}"), "test_source_tokenized": True,
                "test_output": common.run_path(W, W / "eval" / "test.trees")})
    out["data"] = json.loads((W / "prep" / "stats.json").read_text())
    vocab = common.dictionary_size(W / "data-bin" / f"dict.{SRC}.txt")
    if vocab:
        out["vocabulary"] = vocab
    out["bpe_symbols"] = args.vocab
    out["scorer"] = (f"EVALB binary {args.evalb} with COLLINS.prm settings" if args.evalb
                     else "attn_kit.metrics.evalb (EVALB with COLLINS.prm)")
    if args.pos_tags == "xx":
        out["tagging_accuracy_note"] = "POS tags predicted as XX; scored trees carry the gold tags"
    # a --tune run's selected trial: its own training log, command and average
    folder = Path(sel["workdir"]) if sel else W
    train_log = W / "logs" / (f"{sel['stage']}.log" if sel else "train.log")
    out.update(common.run_record(args, train_log, folder / "checkpoint_avg.pt", folder / "train_command.json"))
    if sel:
        out["updates"] = sel["updates"]
    p = common.plan(args)
    beam, alpha = (sel["beam"], sel["alpha"]) if sel else (args.beam, args.alpha)
    out.update({
        "gpus": args.ngpus * args.nnodes, "max_tokens": p.max_tokens, "update_freq": p.update_freq,
        "max_tokens_per_update": p.tokens_per_update,
        "decoding": {"beam": beam, "length_penalty": f"GNMT alpha {alpha:g}", "beam_stop": common.beam_stop(args),
                     "max_len": f"input + {args.max_len_b}"},
    })
    if sel:
        tuned = json.loads((W / "tune" / "selected.json").read_text())
        out["tune"] = {k: tuned[k] for k in ("grid", "selection", "trials", "selected")}
    write_json_atomic(W / "results.json", out)


# ---------------------------------------------------------------------------
# Dev-set tuning (Sec. 6.3)
# ---------------------------------------------------------------------------
def tune_trials(args):
    """The training settings of ``args.grid``, in grid order: name (its folder
    under WORKDIR/tune), stage (its stage name) and the TRAIN_KEYS values."""
    out = []
    for d, a, lr in itertools.product(*(args.grid[k] for k in TRAIN_KEYS)):
        name = f"d{d:g}-a{a:g}-lr{lr:g}"
        out.append({"name": name, "stage": f"tune-{name}", "dropout": d, "attention_dropout": a, "lr_scale": lr})
    return out


def decode_settings(args):
    """The decoding settings of ``args.grid``: name, beam, alpha."""
    return [{"name": f"beam{b}-alpha{al:g}", "beam": b, "alpha": al}
            for b, al in itertools.product(args.grid["beam"], args.grid["alpha"])]


def _f1_key(i_trial):
    """max() key: the highest dev F1 (an undefined F1 lowest), ties to the earlier trial."""
    i, trial = i_trial
    return (trial["dev_f1"] is not None, trial["dev_f1"] or 0.0, -i)


SELECTION = ("the highest section 22 (dev) EVALB F1 over every training x decoding setting; "
             "a tie goes to the earlier setting in trials")


def select_trial(args) -> dict:
    """Gather every trial's section-22 F1, pick the best, write WORKDIR/tune/selected.json."""
    trials, wanted = [], [d["name"] for d in decode_settings(args)]
    for t in tune_trials(args):
        info = json.loads((args.workdir / "tune" / t["name"] / "trial.json").read_text())
        done = {dec["name"]: dec for dec in info["decodings"]}
        missing = [name for name in wanted if name not in done]
        if missing:
            raise UserError(f"{t['stage']}: no section 22 score for {missing[0]}; run the stage {t['stage']} again")
        for dec in (done[name] for name in wanted):
            trials.append({"name": f"{t['stage']}/{dec['name']}", "stage": t["stage"], "workdir": info["workdir"],
                           **{k: t[k] for k in TRAIN_KEYS}, "beam": dec["beam"], "alpha": dec["alpha"],
                           "dev_f1": dec["dev_f1"], "dev_output": dec["output"], "updates": info["updates"],
                           "checkpoint": info["checkpoint"], "averaged_updates": info.get("averaged_updates")})
    best = max(enumerate(trials), key=_f1_key)[1]
    selected = {"grid": args.grid, "selection": SELECTION, "trials": trials, "selected": best}
    write_json_atomic(args.workdir / "tune" / "selected.json", selected)
    f1 = "n/a" if best["dev_f1"] is None else f"{best['dev_f1']:.2f}"
    log(f"selected {best['name']}: dev F1 {f1} (best of {len(trials)})")
    return selected


def forget_stale_selection(args):
    """When the --tune grid differs from the one WORKDIR/tune/selected.json was chosen
    from, or a trial was scored again since, remove it, so that the select stage (and
    the section 23 stages after it) run again. Trained trials are kept."""
    path = args.workdir / "tune" / "selected.json"
    if args.dry_run or not args.tune or not path.exists():
        return
    try:
        grid = json.loads(path.read_text()).get("grid")
    except ValueError:
        grid = None
    if grid != json.loads(json.dumps(args.grid)):
        log("the --tune grid changed since the last selection: selecting again")
        path.unlink()
        return
    chosen = path.stat().st_mtime
    for t in tune_trials(args):
        trial = args.workdir / "tune" / t["name"] / "trial.json"
        if trial.exists() and trial.stat().st_mtime > chosen:
            log(f"{t['stage']} was scored again since the last selection: selecting again")
            path.unlink()
            return


def write_trial(args, trial: dict, folder: Path, decodings: list):
    """WORKDIR/tune/NAME/trial.json: the training setting, its updates, and the
    section 22 F1 of each decoding setting."""
    avg = folder / "checkpoint_avg.pt"
    done = json.loads((folder / "train.done").read_text())
    info = {"name": trial["name"], "stage": trial["stage"], "workdir": str(folder),
            **{k: trial[k] for k in TRAIN_KEYS}, "updates": done.get("updates"), "checkpoint": str(avg),
            **common.averaged_record(avg), "decodings": []}
    for dec, repairs in decodings:
        all_, short = evalb_blocks(folder / "eval" / f"valid.{dec['name']}.evalb")
        info["decodings"].append({**dec, "dev_f1": all_.get("f1"),
                                  "output": str(folder / "gen" / f"valid.{dec['name']}.out"),
                                  "evalb_all": all_, "evalb_len<=40": short, "repairs": repairs})
    write_json_atomic(folder / "trial.json", info)
    log(f"{trial['stage']}: dev F1 " + ", ".join(
        f"{d['name']} {'n/a' if d['dev_f1'] is None else format(d['dev_f1'], '.2f')}" for d in info["decodings"]))


# ---------------------------------------------------------------------------
# The stages
# ---------------------------------------------------------------------------
def model_flags(args, dropout=None, attention_dropout=None) -> list:
    """The model's size (--smoke's tiny one) and dropouts (None: the arch's)."""
    return [*args.model, *(["--dropout", f"{dropout:g}"] if dropout is not None else []),
            *(["--attention-dropout", f"{attention_dropout:g}"] if attention_dropout is not None else [])]


def decode_batch_size(args) -> int:
    return 64 if args.ngpus > 0 else 16


def decode_command(args, data_bin: Path, checkpoint, split: str, beam, alpha):
    """fairseq-generate: beam search with GNMT's length penalty, outputs up to input + --max-len-b."""
    return common.generate_command(args, data_bin, checkpoint, split, beam,
                                   ["--gnmt-alpha", str(alpha), *common.beam_stop_flags(args)],
                                   args.max_len_b, decode_batch_size(args))


def write_run_card(args):
    """WORKDIR/inference.json: the evaluated model (a --tune run's selected one) with the treebank
    tokenizer, the run's BPE and its decoding, for scripts/translate.py (raw sentence -> tree)."""
    W = args.workdir
    sel = json.loads((W / "tune" / "selected.json").read_text())["selected"] if args.tune else None
    checkpoint, beam, alpha = (Path(sel["checkpoint"]), sel["beam"], sel["alpha"]) if sel else \
        (W / "checkpoint_avg.pt", args.beam, args.alpha)
    common.write_run_card(W, "parsing", checkpoint, W / "data-bin", SRC, TGT, {
        "tokenizer": "attn_treebank", "bpe": "attn_subword_nmt", "bpe_codes": W / "bpe" / "codes"},
        beam, ["--gnmt-alpha", str(alpha), *common.beam_stop_flags(args)], args.max_len_b, decode_batch_size(args))


def stages(args):
    W = args.workdir
    prep, bpe, data_bin, ckpt = W / "prep", W / "bpe", W / "data-bin", W / "checkpoints"
    avg, gen, ev = W / "checkpoint_avg.pt", W / "gen", W / "eval"
    texts = [f"{split}.{lang}" for split in SPLITS for lang in (SRC, TGT)]
    cpu_env = common.thread_env(args)
    train_tail = _smoke_progress if args.smoke else None

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

    def binarize_stage(ctx):
        binarize(ctx, SRC, TGT, bpe, data_bin, args.workers)

    def train(ctx):
        cmd = common.train_command(args, data_bin, ckpt, model_flags(args, args.dropout, args.attention_dropout))
        common.run_training(ctx, args, cmd, tail=train_tail, model=model_flags(args))

    def average(ctx):
        average_checkpoints(ctx, ckpt, avg, args.average)

    def decode(ctx, checkpoint, split, beam, alpha, out: Path):
        """Decode ``split`` into ``out`` unless a complete ``out`` exists."""
        if out.exists() and not ctx.dry_run:
            print(f"  # decode {split} into {out}: done already", flush=True)
            return
        with ctx.output(out) as tmp, watch_output(ctx, tmp, prep / f"{split}.{SRC}", f"parse {split}", "sentences",
                                                  b"D-"):
            ctx.sh(decode_command(args, data_bin, checkpoint, split, beam, alpha), stdout=tmp, tail=1, env=cpu_env)

    def generate(ctx):
        for split in ("valid", "test"):
            decode(ctx, avg, split, args.beam, args.alpha, gen / f"{split}.out")

    def log_of(stage: str) -> Path:  # where Context.sh logs a stage's commands
        return W / "logs" / f"{stage}.log"

    def trial_stage(trial):
        """One --tune training setting: train (once: ``train.done`` marks a finished
        training), average, decode section 22 with every decoding setting, score it."""
        folder = W / "tune" / trial["name"]

        def run(ctx):
            t_ckpt, t_avg, done = folder / "checkpoints", folder / "checkpoint_avg.pt", folder / "train.done"
            stage_log = ctx.log_dir / f"{ctx.stage}.log"
            if done.exists() and not ctx.dry_run:
                print(f"  # train: done already ({done})", flush=True)
            else:
                cmd = common.train_command(args, data_bin, t_ckpt, model_flags(args, trial["dropout"],
                                                                                trial["attention_dropout"]),
                                           lr_scale=trial["lr_scale"])
                common.run_training(ctx, args, cmd, tail=train_tail, record=folder / "train_command.json",
                                    model=args.model)
                ctx.step(f"mark {done}", lambda: write_json_atomic(done, {"updates": common.last_update(stage_log)}))
            if t_avg.exists() and not ctx.dry_run:
                print(f"  # average: done already ({t_avg})", flush=True)
            else:
                average_checkpoints(ctx, t_ckpt, t_avg, args.average)
            decodings = []
            for dec in decode_settings(args):
                out = folder / "gen" / f"valid.{dec['name']}.out"
                parsed, report = (folder / "eval" / f"valid.{dec['name']}.{ext}" for ext in ("parsed", "evalb"))
                decode(ctx, t_avg, "valid", dec["beam"], dec["alpha"], out)

                def rebuild(out=out, parsed=parsed):
                    with ctx.output(parsed) as tmp:
                        return rebuild_trees(prep, out, tmp, "valid", args.pos_tags)

                repairs = ctx.step(f"delinearize {out} into {parsed}, repairing malformed output", rebuild)
                with ctx.output(report) as tmp:
                    ctx.sh(evalb_command(args, prep / "valid.gold", parsed), stdout=tmp)
                decodings.append((dec, repairs))
            ctx.step(f"write {folder / 'trial.json'}: section 22 F1 of each decoding setting", write_trial,
                     args, trial, folder, decodings)

        return Stage(trial["stage"], run, f"train with dropout {trial['dropout']:g}, attention dropout "
                                          f"{trial['attention_dropout']:g}, lr scale {trial['lr_scale']:g}; average; "
                                          f"section 22 with {len(decode_settings(args))} decoding settings",
                     inputs=train_data, scratch=[folder, log_of(trial["stage"])],
                     options=common.train_options(args, model_flags(args, trial["dropout"], trial["attention_dropout"]),
                                                  lr_scale=trial["lr_scale"]),
                     resumable=common.RESUMABLE_TRAIN_OPTIONS,
                     # a decoding setting added to the grid makes the stage run again (training is not redone)
                     outputs=[folder / "trial.json",
                              *(folder / "eval" / f"valid.{dec['name']}.evalb" for dec in decode_settings(args))])

    def select(ctx):
        def run():
            # a new selection makes the section 23 output and scores of an earlier one stale
            for stale in (gen, ev, W / "results.json"):
                if stale.is_dir():
                    shutil.rmtree(stale)
                elif stale.exists():
                    stale.unlink()
            select_trial(args)

        ctx.step(f"pick the highest section 22 F1 of {len(tune_trials(args)) * len(decode_settings(args))} "
                 f"settings; write {W / 'tune' / 'selected.json'}", run)

    def generate_selected(ctx):
        if ctx.dry_run:  # the selection is not made yet
            sel = {"checkpoint": W / "tune" / "SELECTED" / "checkpoint_avg.pt", "beam": "SELECTED_BEAM",
                   "alpha": "SELECTED_ALPHA", "dev_output": W / "tune" / "SELECTED" / "gen" / "valid.SELECTED.out"}
        else:
            sel = json.loads((W / "tune" / "selected.json").read_text())["selected"]

        def copy():
            with ctx.output(gen / "valid.out") as tmp:
                shutil.copyfile(sel["dev_output"], tmp)

        ctx.step(f"section 22: the selected setting's output {sel['dev_output']} -> {gen / 'valid.out'}", copy)
        decode(ctx, sel["checkpoint"], "test", sel["beam"], sel["alpha"], gen / "test.out")

    def trees(ctx):
        def run():
            ev.mkdir(parents=True, exist_ok=True)
            counts = {}
            for split in ("valid", "test"):
                with ctx.output(ev / f"{split}.parsed") as tmp:
                    counts[split] = rebuild_trees(prep, gen / f"{split}.out", tmp, split, args.pos_tags)
                log(f"{split}: {counts[split]['repaired_sentences']} of {counts[split]['sentences']} "
                    "outputs needed repairs")
            with ctx.output(ev / "test.trees") as tmp:  # as scripts/translate.py parses test.words
                rebuild_trees(prep, gen / "test.out", tmp, "test", args.pos_tags, gold_tags=False)
            write_json_atomic(ev / "repairs.json", counts)
            write_run_card(args)

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

    train_data = [data_bin / f"dict.{SRC}.txt", data_bin / f"dict.{TGT}.txt",
                  *(data_bin / f"{split}.{SRC}-{TGT}.{lang}.{ext}" for split in ("train", "valid")
                    for lang in (SRC, TGT) for ext in ("bin", "idx"))]
    data = [
        Stage("prepare", prepare, "read the treebank, strip, linearize",
              inputs=[p for p in (args.ptb, args.extra_trees) if p],
              outputs=[prep / f"{split}.{ext}" for split in SPLITS for ext in (SRC, TGT, "tags")]
              + [prep / "valid.gold", prep / "test.gold", prep / "stats.json"],
              options={"sections": args.sections, "pos_tags": args.pos_tags}),
        Stage("bpe", learn_apply_bpe, f"BPE on the input words, {args.vocab} symbols (subword-nmt)",
              inputs=[prep / t for t in texts], outputs=[bpe / "codes", *(bpe / t for t in texts)],
              options={"vocab": args.vocab}),
        Stage("binarize", binarize_stage, "fairseq-preprocess --joined-dictionary",
              inputs=[bpe / t for t in texts], outputs=[data_bin / f"dict.{SRC}.txt", data_bin / f"dict.{TGT}.txt"],
              check=lambda: verify.binarized(data_bin, SRC, TGT, SPLITS)),
    ]
    scoring = [
        Stage("trees", trees, "output sequences -> trees, with repairs",
              inputs=[gen / "valid.out", gen / "test.out"],
              outputs=[ev / "valid.parsed", ev / "test.parsed", ev / "test.trees", ev / "repairs.json",
                       W / "inference.json"]),
        Stage("score", score, "EVALB (COLLINS.prm) F1 on dev (22) and test (23)",
              inputs=[ev / "valid.parsed", ev / "test.parsed", prep / "valid.gold", prep / "test.gold"],
              outputs=[W / "results.json"]),
    ]
    if args.canary:
        return [*data, canary.stage(
            args, data_bin, [s.name for s in data],
            lambda c, save_dir: common.train_command(c, data_bin, save_dir,
                                                     model_flags(args, args.dropout, args.attention_dropout)),
            lambda checkpoint: decode_command(args, data_bin, checkpoint, "test", args.beam, args.alpha),
            [(bpe / f"{split}.{SRC}", bpe / f"{split}.{TGT}") for split in ("valid", "test")], model_flags(args),
            train_data)]
    if args.tune:
        trials = tune_trials(args)
        return [
            *data, *(trial_stage(t) for t in trials),
            Stage("select", select, "the best section 22 F1 over the tuning grid (Sec. 6.3)",
                  inputs=[W / "tune" / t["name"] / "trial.json" for t in trials],
                  outputs=[W / "tune" / "selected.json"]),
            Stage("generate", generate_selected, "fairseq-generate on test with the selected setting",
                  inputs=[W / "tune" / "selected.json", data_bin / f"test.{SRC}-{TGT}.{SRC}.bin"],
                  outputs=[gen / "valid.out", gen / "test.out"], options={"beam_stop": common.beam_stop(args)}),
            *scoring,
        ]
    return [
        *data,
        Stage("train", train, f"fairseq-train --arch {args.arch}{' (tiny)' if args.smoke else ''}, "
                              f"{args.max_update} updates, {args.ngpus or 'no'} GPU{'s' if args.ngpus != 1 else ''}",
              inputs=train_data, outputs=[ckpt / "checkpoint_last.pt"], scratch=[ckpt, *common.train_records(args)],
              options=common.train_options(args, model_flags(args, args.dropout, args.attention_dropout)),
              resumable=common.RESUMABLE_TRAIN_OPTIONS),
        Stage("average", average, f"average the last {args.average} checkpoints", inputs=[ckpt], outputs=[avg]),
        Stage("generate", generate, f"fairseq-generate on dev and test: beam {args.beam}, GNMT alpha "
                                    f"{args.alpha:g}, max length input + {args.max_len_b}, "
                                    f"{common.BEAM_STOP_NAMES[common.beam_stop(args)]}",
              inputs=[avg, data_bin / f"test.{SRC}-{TGT}.{SRC}.bin"], outputs=[gen / "valid.out", gen / "test.out"],
              options={"beam": args.beam, "alpha": args.alpha, "max_len_b": args.max_len_b,
                       "beam_stop": common.beam_stop(args)}),
        *scoring,
    ]


def report(r: dict):
    """Print F1 and repair counts."""

    def f1(v):
        return "n/a" if v is None else f"{v:.2f}"

    paper = f" (paper, Table 4: {r['paper_test_f1']})" if "paper_test_f1" in r else ""
    if "tune" in r:
        print("\nsection 22 (dev) F1 of every tried setting:")
        for t in r["tune"]["trials"]:
            mark = "  <- selected" if t["name"] == r["tune"]["selected"]["name"] else ""
            print(f"  {t['name']}: {f1(t['dev_f1'])}{mark}")
    print(f"\nEVALB F1: dev {f1(r['dev_f1'])}, test {f1(r['test_f1'])}{paper}")
    for name in ("dev", "test"):
        rep = r[name]["repairs"]
        fixes = ", ".join(f"{k} {rep[k]}" for k in REPAIRS if rep.get(k))
        print(f"{name}: {rep['repaired_sentences']} of {rep['sentences']} outputs repaired" + (f" ({fixes})" if fixes
                                                                                              else ""))
    common.report_training(r)


def main(argv=None):
    args = parse_args(argv)
    report_ = canary.report if args.canary else report
    if args.dry_run:
        scale.run(args, stages(args), report_)
        return
    scale.check_devices(args, stages(args))  # scale.run checks too; here it comes before anything is written
    with workdir_lock(args.workdir):  # run_recipe holds it too; taken here so that nothing writes before it
        forget_stale_selection(args)
        scale.run(args, stages(args), report_)


if __name__ == "__main__":
    main_guard(main, interrupted="interrupted; finished stages are kept, run the same command again to resume")
