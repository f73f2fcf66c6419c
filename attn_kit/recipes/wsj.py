"""English constituency parsing on the Penn Treebank WSJ (Sec. 6.3, Table 4): recipes/wsj_parsing.sh.
Parsing as sequence to sequence (Vinyals et al., 2015), F1 by EVALB (COLLINS.prm); the trees come from
attn_kit.recipes.wsj_data, --tune's grid and selection from attn_kit.recipes.wsj_tune."""
import argparse
import dataclasses
import json
import os
import shutil
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Mapping, Optional, Tuple

from ..checkout import REPO
from ..cli import ArgumentParser, UsageError, UserError, log, main_guard, write_json_atomic
from ..metrics.trees import REPAIRS, delinearize
from ..planning.paper import TABLE4_F1
from ..pipeline.lock import workdir_lock
from ..pipeline.progress import watch_output
from ..fairseq_layer import fairseq_data
from ..fairseq_layer.fairseq_log import progress_line
from ..fairseq_layer.fairseq_commands import average_checkpoints, binarize
from ..pipeline.stages import Stage
from ..planning.step_model import PAPER_MAX_TOKENS
from .. import options
from . import canary, common, config, scale, settings
from .wsj_data import LDC, SMOKE_PTB, SPLITS, SRC, TGT, SilverTrees, Treebank, prepare_data
from .wsj_tune import (HELP as TUNE_GRID_HELP, decode_settings, evalb_blocks, forget_stale_selection,
                       grid_spec, parse_tune_grid, select_trial, tune_grid, tune_trials, write_trial)

DESCRIPTION = """\
English constituency parsing on the Penn Treebank WSJ (Sec. 6.3, Table 4),
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
                         one training per (P_drop, attention dropout, lr
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


def _smoke_progress(line: str) -> bool:
    """Training lines worth echoing with --smoke (its epochs are a few updates long,
    so fairseq's end-of-epoch lines are left in the log)."""
    return any(k in line for k in ("| train_inner |", "| valid |", "done training"))


# ---------------------------------------------------------------------------------------------------- options
def parser() -> argparse.ArgumentParser:
    """The recipe's command line; defaults from recipes/configs/wsj.yaml."""
    W, S = config.settings("wsj", "wsj"), config.settings("wsj", "wsj", "smoke")
    grids = (f"Default --tune grid (tune_grid in recipes/configs/wsj.yaml):\n    {grid_spec(W['tune_grid'])}\n"
             f"    --smoke: {grid_spec(S['tune_grid'])}\n")
    p = ArgumentParser(prog="recipes/wsj_parsing.sh", usage=scale.USAGE, description=DESCRIPTION + "\n" + grids,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add(p, "smoke", "on the repo's hand-written trees, data/wsj-smoke; with --ptb, the tiny model on your "
                            "treebank")
    settings.add_run_options(p, "runs/wsj_<mode>")
    p.add_argument("--tune", action="store_true",
                   help="select P_drop, attention dropout, learning rate, beam and alpha on section 22 as the "
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
    options.add(g, "vocab", f"of the input words, subword-nmt -s N --total-symbols; default {W['vocab']}, "
                            f"{config.settings('wsj', 'semi-supervised')['vocab']} with --extra-trees, Sec. 6.3; "
                            f"--smoke {S['vocab']}")
    options.add(g, "workers", "default: CPUs, at most 8", default=settings.default_workers())

    def default(key, note=""):  # "default 100000 as the base model; --smoke 60"
        return f"default {W[key]}{note}; --smoke {S[key]}"

    g = p.add_argument_group("training")
    options.add(g, "arch", "default attn_paper_parse: 4 layers, d_model 1024; --smoke shrinks it: "
                           f"{common.SIZES[S['size']].describe()}", default="attn_paper_parse")
    options.add(g, "p_drop", "default: the arch's, 0.1 as the base model; the paper tuned it on section 22, t2t "
                             "used 0.2")
    options.add(g, "attention_dropout", "default: the arch's, 0.2 as t2t transformer_parsing_base; the paper "
                                        "tuned it on section 22")
    settings.add_device_options(g, cpu_modes="--smoke")
    options.add(g, "tokens_per_update", default("tokens_per_update", " as the base model, Sec. 5.1"))
    options.add(g, "max_tokens_per_gpu", default("max_tokens_per_gpu") + f"; {PAPER_MAX_TOKENS} on a CPU or with "
                                         "no GPU known")
    options.add(g, "max_update", default("max_update", " as the base model"))
    options.add(g, "warmup_updates", default("warmup_updates", " as t2t transformer_parsing_base"))
    options.add(g, "lr_scale", default("lr_scale", ": t2t transformer_parsing_base's learning_rate 0.05 is 0.5 x "
                                                   "eq. 3") + "; the paper tuned the rate on section 22")
    options.add(g, "save_interval_updates", default("save_interval_updates"))
    options.add(g, "log_interval", f"default {W['log_interval']}")
    options.add(g, "average", f"default {W['average']}")

    g = p.add_argument_group("decoding and scoring")
    options.add(g, "beam", f"default {W['beam']}, Sec. 6.3")
    options.add(g, "alpha", f"default {W['alpha']:g}, Sec. 6.3")
    options.add(g, "beam_stop")
    options.add(g, "max_len_b", f"default {W['max_len_b']}")
    options.add(g, "evalb", "default: scripts/evalb.py, the same numbers")
    return p


@dataclasses.dataclass(frozen=True, kw_only=True)
class WsjSettings(settings.TrainSettings):
    """The settings of a WSJ parsing run (recipes/configs/wsj.yaml, the command line over it)."""
    mode: str  # wsj, semi-supervised or smoke: the YAML sections and results.json's mode
    smoke: bool
    tune: bool
    ptb: Optional[Path]  # --smoke without --ptb: the repo's own trees
    extra_trees: Optional[Path]
    train_sections: str
    dev_sections: str
    test_sections: str
    pos_tags: str
    vocab: int
    p_drop: Optional[float]  # None: the arch's
    attention_dropout: Optional[float]
    max_len_b: int
    evalb: Optional[Path]
    grid: Optional[Mapping[str, list]]  # --tune's full grid (attn_kit.recipes.wsj_tune), None without --tune

    @property
    def source(self):
        """Where the trees come from (attn_kit.recipes.wsj_data)."""
        treebank = Treebank(self.ptb, (self.train_sections, self.dev_sections, self.test_sections))
        return SilverTrees(treebank, self.extra_trees) if self.extra_trees else treebank

    @property
    def vocab_estimate(self) -> Tuple[int, str]:
        return self.vocab + 60, (" (about --vocab BPE symbols and ~60 bracket symbols, until the binarize stage "
                                 "made the dictionary)")


def build(argv=None) -> WsjSettings:
    """The run's settings: recipes/configs/wsj.yaml's sections for the mode, the command line over them."""
    given = scale.parse(parser(), argv)
    mode = "smoke" if given.smoke else "semi-supervised" if given.extra_trees else "wsj"
    yaml = config.settings("wsj", "wsj", "semi-supervised" if given.extra_trees else None,
                           "smoke" if given.smoke else None)
    ptb = given.ptb
    if given.smoke and not ptb:  # --smoke --ptb DIR: the tiny model on your treebank
        ptb, yaml["train_sections"] = SMOKE_PTB, "02"
    default_grid = yaml.pop("tune_grid")  # --tune-grid's default, as data (not a SPEC)
    s = settings.compose(WsjSettings, given, yaml, lambda v: dict(
        mode=mode, ptb=_resolved(ptb), extra_trees=_resolved(given.extra_trees), evalb=_resolved(given.evalb),
        workdir=(given.workdir or REPO / "runs" / f"wsj_{mode.replace('-', '_')}").resolve(),
        size=common.model_size(yaml, {}, v.arch), length_penalty="gnmt",
        validate_interval_updates=v.save_interval_updates,  # WSJ validates at every checkpoint
        tune=given.tune or given.tune_grid is not None, grid=None, recipe_module="attn_kit.recipes.wsj"))
    check(s)  # before the grid, which asks fairseq for the arch's dropouts
    if not s.tune:
        return s
    # --tune-grid's or the YAML's grid, an option given on the command line fixing its key (wsj_tune.tune_grid)
    fixed = {"dropout": given.p_drop, "attention_dropout": given.attention_dropout, "lr_scale": given.lr_scale,
             "beam": given.beam, "alpha": given.alpha}
    given_grid = parse_tune_grid(given.tune_grid) if given.tune_grid else None
    fallback = {"lr_scale": s.lr_scale, "beam": s.beam, "alpha": s.alpha}
    return dataclasses.replace(s, grid=tune_grid(given_grid, default_grid, fixed, fallback, s.arch))


parse_args = build  # the name callers used before the settings were typed


def _resolved(path: Optional[Path]) -> Optional[Path]:
    return path.expanduser().resolve() if path else None


def check(s: WsjSettings):
    """The values this recipe alone takes (settings.check_run checks the shared ones)."""
    s.source.sections  # noqa: B018 (a bad section list is one error line)
    if s.evalb and not s.dry_run and not (s.evalb.is_file() and os.access(s.evalb, os.X_OK)):
        raise UserError(f"--evalb {s.evalb}: not an executable file (EVALB builds with 'make' in its "
                        "folder: https://nlp.cs.nyu.edu/evalb/)")
    if s.canary and s.tune:
        raise UsageError("--canary checks one training run; each --tune trial is a run like it: run the canary "
                         "without --tune (its prediction times one trial)")


# --------------------------------------------------------- from the model's output back to trees, and scoring
def _lines(path: Path):
    return path.read_text(encoding="utf-8", errors="surrogateescape").split("\n")[:-1]


def rebuild_trees(prep: Path, gen_out: Path, out: Path, split: str, pos_tags: str, gold_tags: bool = True) -> dict:
    """Delinearize every hypothesis with its input words into ``out`` (one tree per line); the repair counts.
    With ``gold_tags`` (and POS tags predicted as XX) the leaves get the gold tags, for EVALB; without, the
    model's own (what scripts/translate.py gives for raw text)."""
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


def evalb_command(evalb, gold: Path, test: Path):
    """EVALB (COLLINS.prm) of ``test`` against ``gold``: scripts/evalb.py, or the binary ``evalb``."""
    cmd = [sys.executable, "-m", "attn_kit.metrics.evalb", "-e", "1000000"]
    if evalb:
        cmd += ["--evalb", evalb]
    return cmd + [gold, test]


def selected(s):
    """A --tune run's selected trial (WORKDIR/tune/selected.json), None without --tune."""
    return json.loads((s.workdir / "tune" / "selected.json").read_text())["selected"] if s.tune else None


def evaluated(s) -> dict:
    """What the run evaluated: the training values (a --tune run's selected ones) and decoding."""
    sel = selected(s)
    if sel:
        return {"lr_scale": sel["lr_scale"], "dropout": sel["dropout"], "attention_dropout": sel["attention_dropout"],
                "beam": sel["beam"], "alpha": sel["alpha"], "checkpoint": Path(sel["checkpoint"])}
    return {"lr_scale": s.lr_scale, "dropout": s.p_drop, "attention_dropout": s.attention_dropout, "beam": s.beam,
            "alpha": s.alpha, "checkpoint": s.workdir / "checkpoint_avg.pt"}


def write_results(s):
    """WORKDIR/results.json: EVALB F1 on dev and test, repairs, the run's training and decoding (a --tune
    run's: its selected trial's own training log, command and average, and the tuning record)."""
    W, sel, ev = s.workdir, selected(s), evaluated(s)
    out = {"mode": s.mode, "arch": s.arch, "model_overrides": s.model, "lr_scale": ev["lr_scale"],
           "warmup_updates": s.warmup_updates, "max_update": s.max_update}
    out.update({key: ev[key] for key in ("dropout", "attention_dropout") if ev[key] is not None})
    repairs = json.loads((W / "eval" / "repairs.json").read_text())
    for split, name in (("valid", "dev"), ("test", "test")):
        all_, short = evalb_blocks(W / "eval" / f"{split}.evalb")
        out[f"{name}_f1"] = all_.get("f1")
        out[name] = {"sections": ",".join(s.source.sections[split]), "evalb_all": all_, "evalb_len<=40": short,
                     "repairs": repairs[split]}
    if s.mode in TABLE4_F1:
        out["paper_test_f1"] = TABLE4_F1[s.mode]
    # what scripts/translate.py RUN_DIR --tokenized reproduces: the test words in, the trees out (model's tags)
    # relative to the run directory (attn_plugin.run_cards resolves them there): a copied run works
    out.update({"test_source": common.run_path(W, W / "prep" / f"test.{SRC}"), "test_source_tokenized": True,
                "test_output": common.run_path(W, W / "eval" / "test.trees")})
    out["data"] = json.loads((W / "prep" / "stats.json").read_text())
    vocab = common.dictionary_size(W / "data-bin" / f"dict.{SRC}.txt")
    if vocab:
        out["vocabulary"] = vocab
    out["bpe_symbols"] = s.vocab
    out["scorer"] = (f"EVALB binary {s.evalb} with COLLINS.prm settings" if s.evalb
                     else "attn_kit.metrics.evalb (EVALB with COLLINS.prm)")
    if s.pos_tags == "xx":
        out["tagging_accuracy_note"] = "POS tags predicted as XX; scored trees carry the gold tags"
    folder = Path(sel["workdir"]) if sel else W
    train_log = W / "logs" / (f"{sel['stage']}.log" if sel else "train.log")
    out.update(common.run_record(s, train_log, folder / "checkpoint_avg.pt", folder / "train_command.json"))
    if sel:
        out["updates"] = sel["updates"]
    p = common.plan(s)
    out.update({
        "gpus": s.ngpus * s.nnodes, "max_tokens": p.max_tokens, "update_freq": p.update_freq,
        "max_tokens_per_update": p.tokens_per_update,
        "decoding": {"beam": ev["beam"], "length_penalty": f"GNMT alpha {ev['alpha']:g}",
                     "beam_stop": common.beam_stop(s), "max_len": f"input + {s.max_len_b}"},
    })
    if sel:
        tuned = json.loads((W / "tune" / "selected.json").read_text())
        out["tune"] = {k: tuned[k] for k in ("grid", "selection", "trials", "selected")}
    write_json_atomic(W / "results.json", out)


def model_flags(s, dropout=None, attention_dropout=None) -> list:
    """The model's size (--smoke's tiny one) and dropouts (None: the arch's)."""
    return [*s.model, *(["--dropout", f"{dropout:g}"] if dropout is not None else []),
            *(["--attention-dropout", f"{attention_dropout:g}"] if attention_dropout is not None else [])]


def decode_batch_size(s) -> int:
    return 64 if s.ngpus > 0 else 16


def decode_command(s, checkpoint, split: str, beam, alpha):
    """fairseq-generate: beam search with GNMT's length penalty, outputs up to input + --max-len-b."""
    return common.generate_command(s, s.workdir / "data-bin", checkpoint, split,
                                   common.decode_plan(s, beam, s.max_len_b, decode_batch_size(s), alpha=alpha))


def write_run_card(s):
    """WORKDIR/inference.json: the evaluated model (a --tune run's selected one) with the treebank
    tokenizer, the run's BPE and its decoding, for scripts/translate.py (raw sentence -> tree)."""
    W, ev = s.workdir, evaluated(s)
    common.write_run_card(W, "parsing", ev["checkpoint"], W / "data-bin", SRC, TGT, {
        "tokenizer": "attn_treebank", "bpe": "attn_subword_nmt", "bpe_codes": W / "bpe" / "codes"},
        common.decode_plan(s, ev["beam"], s.max_len_b, decode_batch_size(s), alpha=ev["alpha"]))


# ---------------------------- the stages, each a function of the run's settings ``s`` and the stage's Context
def prepare(s, ctx):
    prep = s.workdir / "prep"
    with ctx.output(prep) as tmp:
        ctx.step(f"{s.source.describe()}; strip function tags and -NONE-; linearize (POS tags: {s.pos_tags}) into "
                 f"{prep}", prepare_data, s.source, s.pos_tags, tmp)


def learn_apply_bpe(s, ctx):
    prep = s.workdir / "prep"
    with ctx.output(s.workdir / "bpe") as tmp:
        if not ctx.dry_run:
            tmp.mkdir(parents=True)
        ctx.sh(["subword-nmt", "learn-bpe", "-s", s.vocab, "--total-symbols",
                "--input", prep / f"train.{SRC}", "--output", tmp / "codes"])
        for split in SPLITS:
            ctx.sh(["subword-nmt", "apply-bpe", "-c", tmp / "codes", "--num-workers", s.workers],
                   stdin=prep / f"{split}.{SRC}", stdout=tmp / f"{split}.{SRC}", workers=s.workers > 1)
            ctx.step(f"copy {prep / f'{split}.{TGT}'} -> {s.workdir / 'bpe' / f'{split}.{TGT}'} (bracket symbols "
                     "need no BPE)", lambda name=f"{split}.{TGT}": (tmp / name).write_bytes((prep / name).read_bytes()))


def train(s, ctx):
    cmd = common.train_command(s, s.workdir / "data-bin", s.workdir / "checkpoints",
                               model_flags(s, s.p_drop, s.attention_dropout))
    common.run_training(ctx, s, cmd, tail=_smoke_progress if s.smoke else None, model=model_flags(s))


def decode(s, ctx, checkpoint, split, beam, alpha, out: Path):
    """Decode ``split`` into ``out`` unless a complete ``out`` exists."""
    if out.exists() and not ctx.dry_run:
        print(f"  # decode {split} into {out}: done already", flush=True)
        return
    with ctx.output(out) as tmp, watch_output(ctx, tmp, s.workdir / "prep" / f"{split}.{SRC}", f"parse {split}",
                                              "sentences", b"D-"):
        ctx.sh(decode_command(s, checkpoint, split, beam, alpha), stdout=tmp, tail=progress_line,
               env=common.thread_env(s))


def generate(s, ctx):
    for split in ("valid", "test"):
        decode(s, ctx, s.workdir / "checkpoint_avg.pt", split, s.beam, s.alpha, s.workdir / "gen" / f"{split}.out")


def train_trial(s, trial: dict, ctx):
    """A --tune trial's training (once: ``train.done`` marks a finished one) and average."""
    folder = s.workdir / "tune" / trial["name"]
    t_ckpt, t_avg, done = folder / "checkpoints", folder / "checkpoint_avg.pt", folder / "train.done"
    stage_log = ctx.log_dir / f"{ctx.stage}.log"
    if done.exists() and not ctx.dry_run:
        print(f"  # train: done already ({done})", flush=True)
    else:
        cmd = common.train_command(s, s.workdir / "data-bin", t_ckpt,
                                   model_flags(s, trial["dropout"], trial["attention_dropout"]),
                                   lr_scale=trial["lr_scale"])
        common.run_training(ctx, s, cmd, tail=_smoke_progress if s.smoke else None,
                            record=folder / "train_command.json", model=s.model)
        ctx.step(f"mark {done}", lambda: write_json_atomic(done, {"updates": common.last_update(stage_log)}))
    if t_avg.exists() and not ctx.dry_run:
        print(f"  # average: done already ({t_avg})", flush=True)
    else:
        average_checkpoints(ctx, t_ckpt, t_avg, s.average, s.warmup_updates)


def run_trial(s, trial: dict, ctx):
    """One --tune training setting: train and average, decode section 22 with every decoding
    setting, score each, write the trial's record."""
    folder, prep = s.workdir / "tune" / trial["name"], s.workdir / "prep"
    train_trial(s, trial, ctx)
    decodings = []
    for dec in decode_settings(s.grid):
        out = folder / "gen" / f"valid.{dec['name']}.out"
        parsed, report_ = (folder / "eval" / f"valid.{dec['name']}.{ext}" for ext in ("parsed", "evalb"))
        decode(s, ctx, folder / "checkpoint_avg.pt", "valid", dec["beam"], dec["alpha"], out)

        def rebuild(out=out, parsed=parsed):
            with ctx.output(parsed) as tmp:
                return rebuild_trees(prep, out, tmp, "valid", s.pos_tags)

        repairs = ctx.step(f"delinearize {out} into {parsed}, repairing malformed output", rebuild)
        with ctx.output(report_) as tmp:
            ctx.sh(evalb_command(s.evalb, prep / "valid.gold", parsed), stdout=tmp)
        decodings.append((dec, repairs))
    ctx.step(f"write {folder / 'trial.json'}: section 22 F1 of each decoding setting", write_trial,
             trial, folder, decodings)


def select(s, ctx):
    def run():
        # a new selection makes the section 23 output and scores of an earlier one stale
        for stale in (s.workdir / "gen", s.workdir / "eval", s.workdir / "results.json"):
            if stale.is_dir():
                shutil.rmtree(stale)
            elif stale.exists():
                stale.unlink()
        select_trial(s.workdir, s.grid)

    ctx.step(f"pick the highest section 22 F1 of {len(tune_trials(s.grid)) * len(decode_settings(s.grid))} "
             f"settings; write {s.workdir / 'tune' / 'selected.json'}", run)


def generate_selected(s, ctx):
    W, gen = s.workdir, s.workdir / "gen"
    if ctx.dry_run:  # the selection is not made yet
        sel = {"checkpoint": W / "tune" / "SELECTED" / "checkpoint_avg.pt", "beam": "SELECTED_BEAM",
               "alpha": "SELECTED_ALPHA", "dev_output": W / "tune" / "SELECTED" / "gen" / "valid.SELECTED.out"}
    else:
        sel = selected(s)

    def copy():
        with ctx.output(gen / "valid.out") as tmp:
            shutil.copyfile(sel["dev_output"], tmp)

    ctx.step(f"section 22: the selected setting's output {sel['dev_output']} -> {gen / 'valid.out'}", copy)
    decode(s, ctx, sel["checkpoint"], "test", sel["beam"], sel["alpha"], gen / "test.out")


def trees(s, ctx):
    """Every output sequence of dev and test back to a tree; the repair counts; the run card."""
    prep, gen, ev = s.workdir / "prep", s.workdir / "gen", s.workdir / "eval"

    def rebuild_all():
        ev.mkdir(parents=True, exist_ok=True)
        counts = {}
        for split in ("valid", "test"):
            with ctx.output(ev / f"{split}.parsed") as tmp:
                counts[split] = rebuild_trees(prep, gen / f"{split}.out", tmp, split, s.pos_tags)
            log(f"{split}: {counts[split]['repaired_sentences']} of {counts[split]['sentences']} outputs needed "
                "repairs")
        with ctx.output(ev / "test.trees") as tmp:  # as scripts/translate.py parses test.words
            rebuild_trees(prep, gen / "test.out", tmp, "test", s.pos_tags, gold_tags=False)
        write_json_atomic(ev / "repairs.json", counts)
        write_run_card(s)

    gold = " (gold POS tags for the XX leaves)" if s.pos_tags == "xx" else ""
    ctx.step(f"delinearize {gen}/{{valid,test}}.out with the input words into {ev}/{{valid,test}}.parsed, "
             f"repairing malformed output{gold}", rebuild_all)


def score(s, ctx):
    W, ev = s.workdir, s.workdir / "eval"
    if not ctx.dry_run:
        ev.mkdir(parents=True, exist_ok=True)
    for split in ("valid", "test"):
        with ctx.output(ev / f"{split}.evalb") as tmp:
            ctx.sh(evalb_command(s.evalb, W / "prep" / f"{split}.gold", ev / f"{split}.parsed"), stdout=tmp)
    ctx.step(f"write {W / 'results.json'}: EVALB F1 on dev and test, repair counts", write_results, s)


# ------------------------------------------------------------------------ the stage lists of each kind of run
def train_data(s) -> list:
    """What a training reads: the binarized train and valid splits and the dictionaries."""
    data_bin = s.workdir / "data-bin"
    return [data_bin / f"dict.{SRC}.txt", data_bin / f"dict.{TGT}.txt",
            *(data_bin / f"{split}.{SRC}-{TGT}.{lang}.{ext}" for split in ("train", "valid")
              for lang in (SRC, TGT) for ext in ("bin", "idx"))]


def data_stages(s) -> list:
    prep, bpe, data_bin = s.workdir / "prep", s.workdir / "bpe", s.workdir / "data-bin"
    texts = [f"{split}.{lang}" for split in SPLITS for lang in (SRC, TGT)]
    return [
        Stage("prepare", partial(prepare, s), "read the treebank, strip, linearize", inputs=s.source.inputs,
              outputs=[prep / f"{split}.{ext}" for split in SPLITS for ext in (SRC, TGT, "tags")]
              + [prep / "valid.gold", prep / "test.gold", prep / "stats.json"],
              options={"sections": s.source.sections, "pos_tags": s.pos_tags}),
        Stage("bpe", partial(learn_apply_bpe, s), f"BPE on the input words, {s.vocab} symbols (subword-nmt)",
              inputs=[prep / t for t in texts], outputs=[bpe / "codes", *(bpe / t for t in texts)],
              options=options.shaping(s, "bpe")),
        Stage("binarize", lambda ctx: binarize(ctx, SRC, TGT, bpe, data_bin, s.workers),
              "fairseq-preprocess --joined-dictionary",
              inputs=[bpe / t for t in texts], outputs=[data_bin / f"dict.{SRC}.txt", data_bin / f"dict.{TGT}.txt"],
              check=lambda: fairseq_data.binarized(data_bin, SRC, TGT, SPLITS)),
    ]


def scoring_stages(s) -> list:
    W, ev = s.workdir, s.workdir / "eval"
    return [
        Stage("trees", partial(trees, s), "output sequences -> trees, with repairs",
              inputs=[W / "gen" / "valid.out", W / "gen" / "test.out"],
              outputs=[ev / "valid.parsed", ev / "test.parsed", ev / "test.trees", ev / "repairs.json",
                       W / "inference.json"]),
        Stage("score", partial(score, s), "EVALB (COLLINS.prm) F1 on dev (22) and test (23)",
              inputs=[ev / "valid.parsed", ev / "test.parsed", W / "prep" / "valid.gold", W / "prep" / "test.gold"],
              outputs=[W / "results.json"]),
    ]


def trial_stage(s, trial: dict) -> Stage:
    folder, decodings = s.workdir / "tune" / trial["name"], decode_settings(s.grid)
    return Stage(trial["stage"], partial(run_trial, s, trial),
                 f"train with dropout {trial['dropout']:g}, attention dropout {trial['attention_dropout']:g}, lr "
                 f"scale {trial['lr_scale']:g}; average; section 22 with {len(decodings)} decoding settings",
                 inputs=train_data(s), scratch=[folder, s.workdir / "logs" / f"{trial['stage']}.log"],
                 options=common.train_options(s, model_flags(s, trial["dropout"], trial["attention_dropout"]),
                                              lr_scale=trial["lr_scale"]),
                 resumable=common.RESUMABLE_TRAIN_OPTIONS,
                 # a decoding setting added to the grid makes the stage run again (training is not redone)
                 outputs=[folder / "trial.json",
                          *(folder / "eval" / f"valid.{dec['name']}.evalb" for dec in decodings)])


def tune_stages(s) -> list:
    """--tune: a stage per training setting, the selection, section 23 with the selected setting."""
    W, trials = s.workdir, tune_trials(s.grid)
    return [
        *(trial_stage(s, t) for t in trials),
        Stage("select", partial(select, s), "the best section 22 F1 over the tuning grid (Sec. 6.3)",
              inputs=[W / "tune" / t["name"] / "trial.json" for t in trials], outputs=[W / "tune" / "selected.json"]),
        Stage("generate", partial(generate_selected, s), "fairseq-generate on test with the selected setting",
              inputs=[W / "tune" / "selected.json", W / "data-bin" / f"test.{SRC}-{TGT}.{SRC}.bin"],
              outputs=[W / "gen" / "valid.out", W / "gen" / "test.out"], options={"beam_stop": common.beam_stop(s)}),
    ]


def train_stages(s) -> list:
    """The one training of a run without --tune: train, average, decode dev and test."""
    W, ckpt, avg = s.workdir, s.workdir / "checkpoints", s.workdir / "checkpoint_avg.pt"
    gpus = f"{s.ngpus or 'no'} GPU{'s' if s.ngpus != 1 else ''}"
    return [
        Stage("train", partial(train, s), f"fairseq-train --arch {s.arch}{' (tiny)' if s.smoke else ''}, "
                                          f"{s.max_update} updates, {gpus}",
              inputs=train_data(s), outputs=[ckpt / "checkpoint_last.pt"], scratch=[ckpt, *common.train_records(s)],
              options=common.train_options(s, model_flags(s, s.p_drop, s.attention_dropout)),
              resumable=common.RESUMABLE_TRAIN_OPTIONS, legacy=common.recorded_option(W / "train_command.json")),
        Stage("average", lambda ctx: average_checkpoints(ctx, ckpt, avg, s.average, s.warmup_updates),
              f"average the last {s.average} checkpoints", inputs=[ckpt], outputs=[avg]),
        Stage("generate", partial(generate, s), f"fairseq-generate on dev and test: beam {s.beam}, GNMT alpha "
                                                f"{s.alpha:g}, max length input + {s.max_len_b}, "
                                                f"{common.BEAM_STOP_NAMES[common.beam_stop(s)]}",
              inputs=[avg, W / "data-bin" / f"test.{SRC}-{TGT}.{SRC}.bin"],
              outputs=[W / "gen" / "valid.out", W / "gen" / "test.out"],
              options={"beam": s.beam, "alpha": s.alpha, "max_len_b": s.max_len_b,
                       "beam_stop": common.beam_stop(s)}),
    ]


def canary_stage(s, data: list) -> Stage:
    """--canary: the run's training for --canary-minutes, then its predicted cost."""
    W = s.workdir
    return canary.stage(
        s, W / "data-bin", [stage.name for stage in data],
        lambda c, save_dir: common.train_command(c, W / "data-bin", save_dir,
                                                 model_flags(s, s.p_drop, s.attention_dropout)),
        lambda checkpoint: decode_command(s, checkpoint, "test", s.beam, s.alpha),
        [(W / "bpe" / f"{split}.{SRC}", W / "bpe" / f"{split}.{TGT}") for split in ("valid", "test")], model_flags(s),
        train_data(s))


def stages(s) -> list:
    """The run's stages: the data stages, then the canary, the --tune stages or one training."""
    data = data_stages(s)
    if s.canary:
        return [*data, canary_stage(s, data)]
    return [*data, *(tune_stages(s) if s.tune else train_stages(s)), *scoring_stages(s)]


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
    s = parse_args(argv)
    if s.dry_run:
        scale.run(s, stages, canary.report if s.canary else report)
        return
    scale.check_devices(s, stages(s))  # scale.run checks too; here it comes before anything is written
    with workdir_lock(s.workdir):  # run_recipe holds it too; taken here so that nothing writes before it
        if s.tune:
            forget_stale_selection(s.workdir, s.grid)
        scale.run(s, stages, canary.report if s.canary else report)


if __name__ == "__main__":
    main_guard(main, interrupted="interrupted; finished stages are kept, run the same command again to resume")
