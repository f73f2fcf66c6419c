"""The translation recipe, over data sources: WMT14 (recipes/wmt14_en_de.sh, recipes/wmt14_en_fr.sh:
the paper's data, --bundled, --smoke, --corpus SECTION) and your own corpus (recipes/parallel.sh through
attn_kit.recipes.parallel).

:func:`build` composes the run's settings (:class:`TranslationSettings`) from recipes/configs/wmt14.yaml
and the command line; :func:`stages` makes the stages from them, each a top-level function: the first two
come from the run's data source (:mod:`attn_kit.recipes.sources`), the rest are the same for every source.
"""
import argparse
import dataclasses
import importlib
import json
import os
import sys
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

from ..checkout import REPO
from ..cli import ArgumentParser, UsageError, UserError, log, main_guard, write_json_atomic
from ..textio import iter_lines
from ..planning.paper import PAPER_MAX_LEN_B, TABLE2_BLEU
from ..pipeline import verify
from ..pipeline.progress import Progress, watch_output
from ..fairseq_layer import fairseq_data
from ..fairseq_layer.fairseq_log import progress_line
from ..fairseq_layer.fairseq_commands import MAX_POSITIONS, average_checkpoints, averaged_info_path, binarize
from ..pipeline.stages import Stage
from ..pipeline.text import clean_parallel, count_lines, moses_tokenize, moses_tokenizer_args, sample_pairs
from ..planning.sizes import ARCH_SIZES, PLUGIN_ARCHS, SIZES, ModelSize
from .. import options
from . import canary, common, config, scale, settings
from ..planning.step_model import PAPER_MAX_TOKENS
from ..metrics.bleu import read_lines
from ..metrics.scores import translation_scores
from .wmt14_data import PAIRS
from .sources import SOURCES, SPLITS, DataSource, Layout, once
from . import wmt14_smoke  # noqa: F401 -- registers the smoke mirror's source

VOCABULARY_THRESHOLD = 50  # apply-bpe --vocabulary-threshold, as fairseq's WMT scripts
BPE_SAMPLE_SEED = 1  # --bpe-learn-pairs: the sample of training pairs BPE is learned on
BATCH_SIZE = 128  # decoding: sentences per batch
SIZE_OPTIONS = ("layers", "d_model", "d_ff", "h", "p_drop")
# The data stages of every mode (the first two are named check and copy for recipes/parallel.sh).
STAGE_NAMES = ("download", "extract", "tokenize", "bpe", "binarize")
# The stages that were one 'prepare' stage (WMT14) before the stage list was shared by every mode.
STAGE_ALIASES = {"prepare": ("extract", "bpe")}

DESCRIPTION = """\
Modes:
  (default)   WMT14 as in the paper (Sec. 5-6) on --ngpus GPUs (torchrun; --nnodes), beam 4, GNMT alpha 0.6
  --smoke     the same stages on CPU in minutes: tiny archives laid out like WMT14's, from a local mirror
  --bundled   EN-DE only: the repo's Tatoeba corpus and a small model, on a CPU

Stages: download, extract, tokenize, bpe, binarize, train, average, generate, score (--stage prepare /
--stop-stage prepare name extract..bpe). Each skips work whose complete output exists; a killed run
resumes where it stopped when run again. Options after -- go to fairseq-train (results.json records
them). --launcher slurm submits the data stages and the training as two jobs. --dry-run prints the
commands and the run's cost. The data stages run in --data-workdir (default wmt14_<pair>_data beside
the work directory), shared by base, big and recipes/table3.sh; a folder prepared with other data
options is refused. Settings of every mode: recipes/configs/wmt14.yaml."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TranslationSettings(settings.TrainSettings):
    """The settings of a WMT14 run or of recipes/parallel.sh's (``data: files``)."""
    pair: str  # "en-de"
    src: str
    tgt: str
    mode: str  # bundled, smoke, files, or the paper's model (base, big, big_en_fr)
    data: str  # where the text comes from (the YAML's data: wmt14, smoke-mirror, bundled, files)
    source: DataSource  # what the first two stages do with it
    mirror: Optional[str] = None
    files: Mapping[str, Path] = dataclasses.field(default_factory=dict)  # recipes/parallel.sh: split -> prefix
    errors: str = "strict"  # recipes/parallel.sh: how its files are decoded (attn_kit.textio)
    preset: str = "paper"
    bpe_merges: int
    bpe_learn_pairs: int
    clean: bool
    lenpen: float
    data_workdir: Path  # where the data stages run
    data_home: Optional[Path]  # their own folder (Stage.home) when it is not the work directory

    @property
    def vocab_estimate(self) -> Tuple[int, str]:
        """(size, note) of the joined dictionary before the binarize stage made it: the paper's for
        the WMT14 pairs, else about the BPE merges (plus the symbols they start from)."""
        if self.source.paper_data:
            return PAIRS[self.pair].paper_vocab, " (the paper's; the binarize stage prints the real one)"
        return self.bpe_merges, " (about --bpe-merges, until the binarize stage made the dictionary)"

    @property
    def size_word(self) -> str:
        """How the train stage names a model resized from its arch."""
        if not self.size:
            return ""
        return f" ({self.source.model_word})"


# ---------------------------------------------------------------------------------------------- settings
def parser() -> argparse.ArgumentParser:
    """The command line of recipes/wmt14_<pair>.sh (the pair: ATTN_RECIPE_PAIR, which the .sh sets)."""
    pair = os.environ.get("ATTN_RECIPE_PAIR", "en_de").replace("_", "-")
    cfg = config.load("wmt14")
    B, S, P = (config.settings("wmt14", "paper", m) for m in ("bundled", "smoke", None))
    small = {"--bundled": B, "--smoke": S} if pair == "en-de" else {"--smoke": S}  # --bundled is EN-DE only
    p = ArgumentParser(
        prog=f"recipes/wmt14_{pair.replace('-', '_')}.sh", usage=scale.USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="\n".join(line for line in DESCRIPTION.splitlines()  # --bundled is EN-DE only
                              if pair == "en-de" or not line.startswith("  --bundled")))
    p.add_argument("--pair", action="append", choices=sorted(PAIRS),
                   help="language pair (set by the .sh file; default en-de)")
    mode = p.add_mutually_exclusive_group()
    options.add(mode, "bundled", **({} if pair == "en-de" else {"help": argparse.SUPPRESS}))
    options.add(mode, "smoke", "the WMT14 stages on tiny archives from a local mirror")
    mode.add_argument("--corpus", metavar="NAME",
                      help="a corpus of its own: the section NAME of recipes/configs/wmt14.yaml, whose data: names "
                           "its source (docs/architecture.md, how to add a corpus) and pair: its languages")
    settings.add_run_options(p, "runs/wmt14_<pair>_<mode or arch>")
    options.add(p, "arch", f"registered by attn_plugin: {', '.join(PLUGIN_ARCHS)}; default attn_paper_base; for "
                           "EN-FR, attn_paper_big means attn_paper_big_en_fr, P_drop 0.1 as in Sec. 6.1; "
                           f"{' and '.join(small)} shrink{'' if len(small) > 1 else 's'} the model",
                default="attn_paper_base")
    g = p.add_argument_group("data")
    g.add_argument("--mirror", help="base URL (or local folder) that holds the WMT14 files at the same paths as "
                                    "www.statmt.org, e.g. http://127.0.0.1:8000 (default: the public hosts)")
    options.add(g, "bpe_merges", "default: EN-DE 35000, EN-FR 30000, aiming at the paper's 37000 / 32000 shared "
                                 "tokens" + (f"; --bundled {B['bpe_merges']}" if "--bundled" in small else ""))
    add_workers_option(g)
    add_bpe_learn_option(g, P)
    add_clean_option(g, P)
    add_data_workdir_option(g, "wmt14_<pair>_data beside the work directory (runs/wmt14_en_de_data), shared "
                               f"by base, big and recipes/table3.sh; {', '.join(small)}: the work directory")
    add_training_options(p, cfg, P, small, resize="/".join(small) + ": ",
                         small_model="the bundled model" if pair == "en-de" else "EN-DE's bundled model")
    return p


def the_pair(given: Optional[List[str]]) -> str:
    """The one --pair: the .sh file gives its own first, so a user's other one is a contradiction."""
    pairs = list(dict.fromkeys(given or ["en-de"]))
    if len(pairs) > 1:
        raise UsageError(f"--pair {pairs[-1]}: this recipe trains {pairs[0]} (for {pairs[-1]}: "
                         f"recipes/wmt14_{pairs[-1].replace('-', '_')}.sh)")
    return pairs[0]


def build(argv=None) -> TranslationSettings:
    """The run's settings: the command line over the YAML sections of its mode and arch."""
    given = scale.parse(parser(), argv)
    cfg = config.load("wmt14")
    pair = corpus_pair(given.corpus, cfg) if given.corpus else the_pair(given.pair)
    if given.arch not in PLUGIN_ARCHS:
        raise UsageError(f"unknown --arch {given.arch!r}; attn_plugin registers: {', '.join(PLUGIN_ARCHS)}")
    if given.bundled and pair != config.settings("wmt14", "bundled")["pair"]:
        raise UsageError(f"--bundled data is English-German; for {pair} use --smoke or the full recipe")
    arch = "attn_paper_big_en_fr" if pair == "en-fr" and given.arch == "attn_paper_big" else given.arch  # Sec. 6.1
    mode = given.corpus or ("bundled" if given.bundled else "smoke" if given.smoke else arch.replace("attn_paper_", ""))
    yaml = config.settings("wmt14", "paper", f"archs.{arch if arch in cfg['archs'] else 'attn_paper_base'}",
                           mode if mode in cfg else None)
    source = data_source(yaml)
    yaml["bpe_merges"] = yaml["bpe_merges"] or (PAIRS[pair].bpe_merges if pair in PAIRS else None)
    if not yaml["bpe_merges"]:
        raise UsageError(f"--corpus {mode}: give its bpe_merges in recipes/configs/wmt14.yaml (or --bpe-merges)")
    name = f"wmt14_{pair.replace('-', '_')}"
    workdir = (given.workdir or REPO / "runs" / f"{name}_{mode}").resolve()
    data_workdir, data_home = data_folders(given.data_workdir, workdir, f"{name}_data" if source.shared_data else None)
    src, tgt = pair.split("-")
    return settings.compose(TranslationSettings, given, yaml, lambda v: dict(
        pair=pair, src=src, tgt=tgt, arch=arch, mode=mode, source=source,
        workdir=workdir, data_workdir=data_workdir, data_home=data_home,
        size=common.model_size(yaml, size_overrides(given), arch), recipe_module="attn_kit.recipes.translation"))


parse_args = build  # the name callers used before the settings were typed


def corpus_pair(name: str, cfg: dict) -> str:
    """--corpus NAME: its section's language pair (SRC-TGT); a section with a data: source and a
    pair: is a corpus (the bundled one too); anything else is one UsageError line."""
    corpora = sorted(k for k, v in cfg.items() if isinstance(v, dict) and {"data", "pair"} <= set(v))
    if name not in corpora:
        raise UsageError(f"--corpus {name}: no such corpus in recipes/configs/wmt14.yaml (its sections with a "
                         f"data: source and a pair: {', '.join(corpora)})")
    pair = str(cfg[name]["pair"])
    if len(pair.split("-")) != 2 or not all(pair.split("-")):
        raise UsageError(f"--corpus {name}: its pair: is {pair!r}, not SRC-TGT (e.g. de-en)")
    return pair


def data_source(yaml: dict) -> DataSource:
    """The source the section's ``data:`` names (SOURCES); ``source_module:`` names the module that
    registers it when it is not one of the kit's (a corpus of your own: attn_kit.recipes.wmt14_data.source)."""
    module = yaml.pop("source_module", None)
    if yaml["data"] not in SOURCES and module:
        importlib.import_module(module)
    if yaml["data"] not in SOURCES:
        raise UsageError(f"data: {yaml['data']} names no data source (known: {', '.join(sorted(SOURCES))}; a source "
                         "of your own: source_module: the module that registers it)")
    return SOURCES[yaml["data"]]


def size_overrides(given) -> dict:
    """The size options the command line gave (None = not given)."""
    return {k: getattr(given, k) for k in SIZE_OPTIONS}


def add_data_workdir_option(g, default: str):
    options.add(g, "data_workdir", f"default: {default}")


def data_folders(given: Optional[Path], workdir: Path, shared: Optional[str]) -> Tuple[Path, Optional[Path]]:
    """(where the data stages run, their own folder): --data-workdir (``given``), else the folder
    ``shared`` beside the work directory (None: the work directory itself). Their own folder
    (:attr:`Stage.home`: shared, locked while they run, never redone with other options) is None when
    they live in the work directory. A work directory that holds its own prepared data (an earlier
    version's layout) keeps using it when the shared folder has nothing yet."""
    if given is not None:
        folder = given.expanduser().resolve()
        return folder, folder
    folder = workdir.parent / shared if shared else workdir
    if shared and not (folder / ".stages").is_dir() and (workdir / ".stages" / "binarize.done").is_file():
        log(f"{workdir} holds its own prepared data (the layout before --data-workdir): using it; "
            f"--data-workdir {folder} would share one copy with other runs")
        folder = workdir
    return folder, (folder if folder != workdir else None)


def add_workers_option(g):
    options.add(g, "workers", "default: CPUs, at most 8", default=settings.default_workers())


def add_clean_option(g, P):
    options.add(g, "clean", f"default: {'on' if P['clean'] else 'off'}; off for --bundled, whose short sentences "
                            "it would thin")


def add_bpe_learn_option(g, P):
    options.add(g, "bpe_learn_pairs", f"default {P['bpe_learn_pairs']}")


def bpe_learn_files(src: Path, tgt: Path, sample_src: Path, sample_tgt: Path, pairs: int, record: Path):
    """The files to learn BPE on: a sample of ``pairs`` pairs of ``src``/``tgt`` (seed
    :data:`BPE_SAMPLE_SEED`) written to ``sample_src``/``sample_tgt`` when they hold more, else themselves.
    ``record`` (JSON) keeps what was learned on and apply-bpe's threshold for the vocabulary learned with
    it: learn-joint-bpe-and-vocab counts the vocabulary on the text it learns from, so on a sample the
    threshold scales with the sample's share, and a subword is kept where it occurs about
    :data:`VOCABULARY_THRESHOLD` times in all the training text."""
    total = count_lines(src)
    sampled = bool(pairs) and total > pairs
    threshold = sampled_threshold(pairs, total)
    if sampled:
        sample_pairs(src, tgt, sample_src, sample_tgt, pairs, BPE_SAMPLE_SEED)
    write_json_atomic(record, {"pairs": pairs if sampled else total, "of": total,
                               "seed": BPE_SAMPLE_SEED if sampled else None, "vocabulary_threshold": threshold})
    log(f"learning BPE on {pairs} of the {total} training pairs (--bpe-learn-pairs); apply-bpe keeps subwords "
        f"seen {threshold} times in them" if sampled else f"learning BPE on all {total} training pairs")
    return [sample_src, sample_tgt] if sampled else [src, tgt]


def sampled_threshold(pairs: int, total: int) -> int:
    """apply-bpe's --vocabulary-threshold for BPE learned on ``pairs`` of ``total`` training pairs
    (:func:`bpe_learn_files`): :data:`VOCABULARY_THRESHOLD` x the sample's share, at least 1."""
    if not pairs or total <= pairs:
        return VOCABULARY_THRESHOLD
    return max(1, round(VOCABULARY_THRESHOLD * pairs / total))


def planned_threshold(s, lay: Layout) -> int:
    """--dry-run, before the sample is drawn: the threshold that will run, from the training text's
    pairs where a stage has written it, else from what the data source knows before any stage
    (the bundled and the user's files counted, WMT14's corpus size as planned)."""
    for train in (lay.tok / f"train.{s.src}", lay.raw / f"train.{s.src}"):
        if train.exists():
            return sampled_threshold(s.bpe_learn_pairs, count_lines(train))
    return sampled_threshold(s.bpe_learn_pairs, s.source.train_pairs(s) or 0)


def bpe_vocabulary_threshold(bpe_dir: Path) -> int:
    """apply-bpe's --vocabulary-threshold for the vocabulary in ``bpe_dir``: :data:`VOCABULARY_THRESHOLD`,
    scaled when BPE was learned on a sample (``learn.json``, :func:`bpe_learn_files`)."""
    try:
        return int(json.loads((bpe_dir / "learn.json").read_text(encoding="utf-8"))["vocabulary_threshold"])
    except (OSError, ValueError, KeyError, TypeError):
        return VOCABULARY_THRESHOLD


def learn_bpe_command(inputs, codes: Path, vocabularies, merges: int, workers: int) -> list:
    """subword-nmt's joint BPE learning: the codes and each side's vocabulary after BPE. --num-workers
    reads and segments the text in parallel; the merges are one loop (the same codes on any count)."""
    return ["subword-nmt", "learn-joint-bpe-and-vocab", "--input", *inputs, "-s", merges, "-o", codes,
            "--write-vocabulary", *vocabularies, "--num-workers", workers]


def apply_bpe_command(codes: Path, vocabulary: Path, text: Path, workers: int,
                      threshold: int = VOCABULARY_THRESHOLD) -> list:
    """subword-nmt's apply-bpe of ``text`` (to stdout) on ``workers`` processes: its module, not the
    ``subword-nmt apply-bpe`` command, which ignores --num-workers (0.3.8), and the text given with
    --input, since on stdin the module applies BPE in one process too. The same output either way."""
    return [sys.executable, "-m", "subword_nmt.apply_bpe", "-c", codes, "--vocabulary", vocabulary,
            "--vocabulary-threshold", threshold, "--num-workers", workers, "--input", text]


def add_training_options(p, cfg, P, modes: Mapping[str, dict], resize: str, small_model: str = "the bundled model"):
    """The training and evaluation options of the WMT14 recipes and recipes/parallel.sh. ``P``: the
    paper's settings; ``modes``: the command's small modes and their settings (``{"--smoke": ...}``),
    whose defaults the help quotes; ``resize``: what the size options resize, at the start of their
    help; ``small_model``: the name of the model their help describes."""
    def default(key, paper=None, names=("--bundled", "--smoke")) -> str:  # "default 28000; --bundled 2048"
        shown = [f"{name} {modes[name][key]:g}" for name in names if name in modes]
        return f"default {P[key] if paper is None else paper}" + ("; " + ", ".join(shown) if shown else "")

    base, big = cfg["archs"]["attn_paper_base"], cfg["archs"]["attn_paper_big"]
    g = p.add_argument_group("training")
    settings.add_device_options(g, " and ".join(reversed(modes)) or "--preset small")
    options.add(g, "tokens_per_update", default("tokens_per_update") + ": ~25000 real source and target tokens "
                                        "each on WMT-like lengths, Sec. 5.1")
    options.add(g, "max_tokens_per_gpu", default("max_tokens_per_gpu") + f"; {PAPER_MAX_TOKENS} on a CPU or with "
                                         "no GPU known")
    options.add(g, "max_update", default("max_update", f"base {base['max_update']}, big {big['max_update']}"))
    options.add(g, "warmup_updates", default("warmup_updates", names=("--bundled",)))
    options.add(g, "lr_scale", default("lr_scale", f"{P['lr_scale']:g}", names=("--bundled",)))
    for name in ("layers", "d_model", "d_ff", "h", "p_drop"):
        options.add(g, name, f"{resize}{small_model}: {SIZES['bundled'].describe()}")
    options.add(g, "save_interval_updates", default("save_interval_updates", big["save_interval_updates"]))
    options.add(g, "validate_interval_updates")
    options.add(g, "log_interval", f"default {P['log_interval']}")
    g = p.add_argument_group("evaluation")
    options.add(g, "average", f"default: base {base['average']}, big {big['average']}")
    options.add(g, "beam", f"default {P['beam']}, Sec. 6.1")
    options.add(g, "length_penalty", "default gnmt" + (
        "; fairseq for --bundled: on Tatoeba's short sentences it beat GNMT 0.6 on the valid split with the same "
        "checkpoint, recipes/results/bundled_sweep.*.json" if "--bundled" in modes else ""))
    options.add(g, "alpha", f"default {P['alpha']:g}, Sec. 6.1")
    options.add(g, "lenpen", f"default {P['lenpen']:g}")
    options.add(g, "beam_stop")


# ---------------------------------------------------------------------------------------------- stages
def tokenize(ctx, s: TranslationSettings, lay: Layout):
    """Moses normalization + tokenization with -a, as fairseq's scripts (sacremoses)."""
    if ctx.dry_run:
        for line in s.source.notes(s):
            print(f"  # {line}", flush=True)
    for t in lay.texts:
        lang = t.rsplit(".", 1)[1]
        once(ctx, lay.tok / t, f"sacremoses normalize + tokenize -l {lang}: {lay.raw / t} -> {lay.tok / t}",
             lambda out, t=t, lang=lang: moses_tokenize(lay.raw / t, out, lang, s.workers,
                                                        progress=Progress(f"tokenize {t}", count_lines(lay.raw / t))))


def learn_apply_bpe(ctx, s: TranslationSettings, lay: Layout):
    """Joint BPE (subword-nmt) learned on the training data (or a sample), applied to every split."""
    src, tgt, tok, bpe = s.src, s.tgt, lay.tok, lay.bpe
    if not (bpe / "codes").exists() or ctx.dry_run:
        learn_from = [tok / f"train.{src}", tok / f"train.{tgt}"]
        sample = [bpe / f"learn-sample.{src}", bpe / f"learn-sample.{tgt}"]
        if s.bpe_learn_pairs:
            learn_from = ctx.step(
                f"learn on {s.bpe_learn_pairs} training pairs drawn at random (seed {BPE_SAMPLE_SEED}) into "
                f"{bpe / f'learn-sample.{{{src},{tgt}}}'} when there are more (--bpe-learn-pairs); then "
                f"apply-bpe's --vocabulary-threshold is {VOCABULARY_THRESHOLD} x their share ({bpe / 'learn.json'})",
                bpe_learn_files, *learn_from, *sample, s.bpe_learn_pairs, bpe / "learn.json") or sample
        with ctx.output(bpe / "codes") as codes:
            ctx.sh(learn_bpe_command(learn_from, codes, [bpe / f"vocab.{src}", bpe / f"vocab.{tgt}"],
                                     s.bpe_merges, s.workers), workers=s.workers > 1)
        for path in sample:
            if not ctx.dry_run and path.exists():
                path.unlink()
    for t in lay.texts:
        if not (bpe / t).exists() or ctx.dry_run:
            with ctx.output(bpe / t) as out, watch_output(ctx, out, tok / t, f"apply BPE to {t}"):
                threshold = planned_threshold(s, lay) if ctx.dry_run and not (bpe / "learn.json").exists() \
                    else bpe_vocabulary_threshold(bpe)
                ctx.sh(apply_bpe_command(bpe / "codes", bpe / f"vocab.{t.rsplit('.', 1)[1]}", tok / t,
                                         s.workers, threshold), stdout=out, workers=s.workers > 1)
    if s.clean:
        clean(ctx, lay)


def clean(ctx, lay: Layout):
    """clean-corpus-n on the training pairs after BPE, as fairseq's scripts; dev and test stay whole."""
    src, tgt, bpe, prep = lay.src, lay.tgt, lay.bpe, lay.prep

    def run():
        prep.mkdir(parents=True, exist_ok=True)
        with ctx.output(prep / f"train.{tgt}") as t_out, ctx.output(prep / f"train.{src}") as s_out:
            kept, read = clean_parallel(bpe / f"train.{src}", bpe / f"train.{tgt}", s_out, t_out)
            write_json_atomic(prep / "clean.json", {"kept": kept, "read": read})
        log(f"cleaning kept {kept} of {read} training pairs")

    if not all((prep / f"train.{lang}").exists() for lang in (src, tgt)) or ctx.dry_run:
        ctx.step("clean-corpus-n: keep training pairs of 1-250 tokens with length ratio <= 1.5", run)
    for t in lay.texts[2:]:
        ctx.step(f"copy {bpe / t} -> {prep / t}", lambda t=t: (prep / t).write_bytes((bpe / t).read_bytes()))


def binarize_stage(ctx, s: TranslationSettings, lay: Layout):
    binarize(ctx, s.src, s.tgt, lay.binarize_from, lay.data_bin, s.workers)
    paper = s.source.paper_vocab(s)
    if not ctx.dry_run and paper:
        vocab = common.dictionary_size(lay.data_bin / f"dict.{s.src}.txt")
        log(f"joined dictionary: {vocab} types (the paper: about {paper})")


def check_positions(lay: Layout, src: str, tgt: str):
    """Before training: every valid and test sentence (in word pieces, </s> added) fits the positions
    fairseq decodes and validates with; a longer one made fairseq-generate fail after the training."""
    for split in ("valid", "test"):
        for lang in (src, tgt):
            path = lay.binarize_from / f"{split}.{lang}"
            if not path.exists():
                continue
            for number, line in enumerate(iter_lines(path), 1):
                tokens = len(line.split()) + 1
                if tokens > MAX_POSITIONS:
                    raise UserError(f"{path} line {number} has {tokens - 1} word pieces, more than the "
                                    f"{MAX_POSITIONS - 1} fairseq decodes and validates with: remove or split that "
                                    f"pair of --{split} before training (fairseq-generate would refuse it after)")


def train(ctx, s: TranslationSettings, lay: Layout):
    ctx.step("check that every valid and test sentence fits the model's positions", check_positions, lay, s.src,
             s.tgt)
    common.run_training(ctx, s, common.train_command(s, lay.data_bin, lay.ckpt, s.model), model=s.model)


def average(ctx, s: TranslationSettings, lay: Layout):
    average_checkpoints(ctx, lay.ckpt, lay.avg, s.average, s.warmup_updates)


def decode_plan(s: TranslationSettings):
    """The test set's decoding: the run's beam and length penalty, outputs up to input + 50 (Sec. 6.1)."""
    return common.decode_plan(s, s.beam, PAPER_MAX_LEN_B, BATCH_SIZE)


def generate_command(s: TranslationSettings, lay: Layout, checkpoint: Path) -> list:
    """fairseq-generate of the test set with ``checkpoint`` at the run's beam and length penalty."""
    return common.generate_command(s, lay.data_bin, checkpoint, "test", decode_plan(s))


def generate(ctx, s: TranslationSettings, lay: Layout):
    """Translate the test set; write the run card (inference.json) that scripts/translate.py reads."""
    src, tgt, bpe = s.src, s.tgt, lay.bpe
    with ctx.output(lay.gen) as tmp, watch_output(ctx, tmp, lay.raw / f"test.{src}", "translate the test set",
                                                  "sentences", b"D-"):
        ctx.sh(generate_command(s, lay, lay.avg), stdout=tmp, tail=progress_line, env=common.thread_env(s))
    ctx.step(f"write {lay.W / 'inference.json'}: this pre-processing and decoding, for scripts/translate.py",
             common.write_run_card, lay.W, "translation", lay.avg, lay.data_bin, src, tgt, {
                 **moses_tokenizer_args(), "bpe": "attn_subword_nmt", "bpe_codes": bpe / "codes",
                 "bpe_vocabulary": bpe / f"vocab.{src}", "bpe_vocabulary_threshold": bpe_vocabulary_threshold(bpe)},
             decode_plan(s), data_workdir=lay.D)


def score(ctx, s: TranslationSettings, lay: Layout):
    ctx.step(f"BLEU: tokenized{' and compound-split' if s.tgt == 'de' else ''} (multi-bleu) against "
             f"{lay.tok / f'test.{s.tgt}'}; sacreBLEU on detokenized output against {lay.raw / f'test.{s.tgt}'}",
             write_results, s, s.src, s.tgt, decode_plan(s).describe())


def bound(fn, *args):
    """``fn`` as a stage's ``run(ctx)``, with the rest of its inputs given."""
    return lambda ctx: fn(ctx, *args)


def data_stages(s: TranslationSettings, lay: Layout) -> List[Stage]:
    """The data stages (download..binarize, in the data folder): the source's two, then the rest."""
    src, tgt, texts, home, source = s.src, s.tgt, lay.texts, s.data_home, s.source
    downloads, sources = source.downloads(s, lay), source.sources(s, lay)
    bpe, prep = lay.bpe, lay.prep
    bpe_out = [bpe / "codes", bpe / f"vocab.{src}", bpe / f"vocab.{tgt}", *(bpe / t for t in texts),
               *([*(prep / t for t in texts), prep / "clean.json"] if s.clean else [])]
    return [
        Stage(source.fetch_name, bound(source.fetch, s, lay), source.description(s),
              inputs=[] if downloads else sources, outputs=downloads, options=source.options(s), home=home),
        Stage(source.extract_name, bound(source.extract, s, lay),
              "unpack the corpora into one text file per split and language", inputs=sources,
              outputs=[lay.raw / t for t in texts], scratch=[lay.orig], options={"pair": f"{src}-{tgt}"},
              check=lambda: verify.parallel_text(lay.pairs(lay.raw)), home=home),
        Stage("tokenize", bound(tokenize, s, lay), "Moses normalization and tokenization (sacremoses)",
              inputs=[lay.raw / t for t in texts], outputs=[lay.tok / t for t in texts],
              check=lambda: verify.parallel_text(lay.pairs(lay.tok)), home=home),
        Stage("bpe", bound(learn_apply_bpe, s, lay), f"joint BPE, {s.bpe_merges} merges (subword-nmt)"
              + (f", learned on at most {s.bpe_learn_pairs} pairs" if s.bpe_learn_pairs else "")
              + (", then clean-corpus-n" if s.clean else ""),
              inputs=[lay.tok / t for t in texts], outputs=bpe_out,
              options=options.shaping(s, "bpe"),
              scratch=[bpe / "learn.json"],
              check=lambda: verify.parallel_text(lay.pairs(bpe) + (lay.pairs(prep) if s.clean else [])), home=home),
        Stage("binarize", bound(binarize_stage, s, lay), "fairseq-preprocess --joined-dictionary",
              inputs=[lay.binarize_from / t for t in texts], outputs=[*dictionaries(lay), *binaries(lay)],
              check=lambda: fairseq_data.binarized(lay.data_bin, src, tgt, SPLITS), home=home),
    ]


def dictionaries(lay: Layout) -> List[Path]:
    return [lay.data_bin / f"dict.{lay.src}.txt", lay.data_bin / f"dict.{lay.tgt}.txt"]


def binaries(lay: Layout, test: Optional[bool] = None) -> List[Path]:
    """The binarized splits (``test``: True the test split's only, False the others', None all)."""
    return [lay.data_bin / f"{split}.{lay.src}-{lay.tgt}.{lang}.{ext}" for split in SPLITS
            for lang in (lay.src, lay.tgt) for ext in ("bin", "idx") if test is None or (split == "test") == test]


def run_stages(s: TranslationSettings, lay: Layout) -> List[Stage]:
    """train, average, generate, score (in the work directory)."""
    penalty = decode_plan(s).describe()
    stop = common.beam_stop(s)
    return [
        Stage("train", bound(train, s, lay), f"fairseq-train --arch {s.arch}{s.size_word}, {common.train_budget(s)}",
              inputs=[*dictionaries(lay), *binaries(lay, test=False)], outputs=[lay.ckpt / "checkpoint_last.pt"],
              scratch=[lay.ckpt, *common.train_records(s)], options=common.train_options(s, s.model),
              resumable=common.RESUMABLE_TRAIN_OPTIONS, legacy=common.recorded_option(lay.W / "train_command.json")),
        Stage("average", bound(average, s, lay), f"average the last {s.average} checkpoints", inputs=[lay.ckpt],
              outputs=[lay.avg, averaged_info_path(lay.avg)], options=options.shaping(s, "average")),
        Stage("generate", bound(generate, s, lay), f"fairseq-generate, beam {s.beam}, {penalty}, "
                                                   f"{common.BEAM_STOP_NAMES[stop]}, on the test set",
              inputs=[lay.avg, *dictionaries(lay), *binaries(lay, test=True)],
              outputs=[lay.gen, lay.W / "inference.json"],
              options={"beam": s.beam, "length_penalty": penalty, "beam_stop": stop}),
        Stage("score", bound(score, s, lay), "tokenized BLEU and sacreBLEU",
              inputs=[lay.gen, lay.raw / f"test.{s.tgt}", lay.tok / f"test.{s.tgt}", averaged_info_path(lay.avg)],
              outputs=[lay.W / "results.json"]),
    ]


def canary_stage(s: TranslationSettings, lay: Layout, data: List[Stage]) -> Stage:
    """--canary: the run's training for a few minutes in place of train..score (attn_kit.recipes.canary)."""
    def train_command(c, save_dir):
        check_positions(lay, s.src, s.tgt)  # as the train stage does (the files are not there in a dry run)
        return common.train_command(c, lay.data_bin, save_dir, s.model)

    return canary.stage(
        s, lay.data_bin, [stage.name for stage in data], train_command,
        lambda checkpoint: generate_command(s, lay, checkpoint),
        [(lay.binarize_from / f"test.{s.src}", lay.binarize_from / f"test.{s.tgt}")], s.model,
        [*dictionaries(lay), *binaries(lay, test=False)])


def stages(s: TranslationSettings) -> List[Stage]:
    """The recipe's stages; the modes differ only in their data source and their numbers."""
    lay = Layout.of(s)
    decode_plan(s)  # a contradictory --beam-stop is one line before anything runs
    data = data_stages(s, lay)
    return data + ([canary_stage(s, lay, data)] if s.canary else run_stages(s, lay))


# ---------------------------------------------------------------------------------------------- scoring
def write_results(s: TranslationSettings, src: str, tgt: str, penalty: str):
    """Score the test output every way the paper and fairseq report it; write results.json."""
    W, D = s.workdir, s.data_workdir  # the run, its prepared data (--data-workdir)
    refs = read_lines(D / "raw" / f"test.{tgt}")  # split at \n only, as multi-bleu.perl does
    hyps_tok = common.read_hypotheses(W / "gen" / "test.out", len(refs))
    out = translation_scores(hyps_tok, refs, tgt, tok_refs=read_lines(D / "tok" / f"test.{tgt}"))
    hyps = out.pop("detokenized")
    (W / "gen" / f"test.detok.{tgt}").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (W / "gen" / f"test.tok.{tgt}").write_text("\n".join(hyps_tok) + "\n", encoding="utf-8")
    out.update({"mode": s.mode, "pair": f"{src}-{tgt}", "arch": s.arch, "model_overrides": s.model,
                "model_size": dataclasses.asdict(s.size) if s.size else None})
    out.update(common.run_record(s, W / "logs" / "train.log", W / "checkpoint_avg.pt", W / "train_command.json"))
    p = common.plan(s)
    rel = lambda path: common.run_path(W, path)  # noqa: E731 -- relative to the run: it may be copied elsewhere
    if D != W:
        out["data_workdir"] = rel(D)
    out.update({"test_source": rel(D / "raw" / f"test.{src}"), "test_output": rel(W / "gen" / f"test.detok.{tgt}"),
                "test_reference": rel(D / "raw" / f"test.{tgt}"),
                "test_sentences": len(refs), "gpus": s.ngpus * s.nnodes, "nodes": s.nnodes,
                "cpu_processes": s.cpu_procs if s.ngpus == 0 else 0, "beam": s.beam,
                "length_penalty": penalty, "beam_stop": common.beam_stop(s), "max_tokens": p.max_tokens,
                "update_freq": p.update_freq,
                "max_tokens_per_update": p.tokens_per_update})
    clean = D / "prep" / "clean.json"
    if clean.exists():
        out["train_pairs"] = json.loads(clean.read_text())
    vocab = common.dictionary_size(D / "data-bin" / f"dict.{src}.txt")
    if vocab:
        out["vocabulary"] = vocab
    write_json_atomic(W / "results.json", out)


def _arch_own_size(r: dict) -> bool:
    """Whether a results.json's model is its arch's own size (no model_size recorded: it is)."""
    size, paper = r.get("model_size"), ARCH_SIZES.get(r["arch"])
    return not size or paper is None or ModelSize(**size) == paper


def on_table2s_test_set(r: dict) -> bool:
    """Whether a run's scores compare with the paper's Table 2: WMT14 data (newstest2014), the
    paper's model as its arch defines it (not the bundled, smoke or your own corpus's runs, nor a
    resized model)."""
    return mode_source(r.get("mode")).paper_data and _arch_own_size(r)


def mode_source(mode: Optional[str]) -> DataSource:
    """The data source of a results.json's ``mode`` (its YAML section's data; the paper's archs:
    WMT14's); a mode of no source here (recipes/parallel.sh's files) is a corpus of the user's own."""
    cfg = config.load("wmt14")
    data = config.settings("wmt14", "paper", mode if mode in cfg else None)["data"]
    return SOURCES.get(data, DataSource())


def model_label(r: dict) -> str:
    """The model a results.json trained, by its shape: the arch's name when it is the arch's own
    size, else the arch with its shape (a 2-layer d_model 256 model is not "attn_paper_base")."""
    return r["arch"] if _arch_own_size(r) else f"{r['arch']} as {ModelSize(**r['model_size']).describe()}"


def averaged_label(r: dict) -> str:
    """What the evaluated model is: an average of checkpoints (their updates), or one checkpoint
    alone, saying why where the warm-up left nothing else to average (Sec. 6.1 averages)."""
    averaged = r.get("averaged_updates") or []
    if len(averaged) != 1:
        return f"average of {len(averaged)} checkpoints (updates {', '.join(map(str, averaged))})"
    start = r.get("averaged_from_update")
    why = (f": no checkpoint after the {start}-update warm-up to average" if start and averaged[0] < start
           else "")
    return f"the model of update {averaged[0]} alone{why}"


def report(r: dict):
    """Print the scores as a short table, the paper's protocol first (docs/wmt14.md, Which BLEU):
    its tokenized BLEU, compound-split for German, is the number Table 2 reports; sacreBLEU after."""
    paper = TABLE2_BLEU.get((r.get("pair"), r["arch"])) if on_table2s_test_set(r) else None
    print()
    if "bleu_t2t" in r:  # absent for targets other than de and fr (scores.translation_scores)
        split = ", compound split" if r.get("pair", "en-de").endswith("-de") else ""
        print(f"BLEU = {r['bleu_t2t']:.2f}   (the paper's protocol: tokenized{split}"
              f"{'; compare with Table 2' if paper else ''})")
    print(f"sacreBLEU = {r['sacrebleu']:.2f}   ({r['sacrebleu_signature']})")
    print(f"{r.get('pair', 'en-de')}, {model_label(r)}, {r['updates']} updates (seed {r.get('seed')}), "
          f"{averaged_label(r)}, {r['test_sentences']} test sentences")
    rows = []
    if "bleu_t2t" in r:
        rows.append((f"BLEU, the paper's protocol (t2t{'; compare with Table 2' if paper else ''})",
                     f"{r['bleu_t2t']:.2f}"))
    if "bleu_t2t_2018" in r:
        rows.append(("BLEU, t2t's 2018 script (output's unicode punctuation normalized)",
                     f"{r['bleu_t2t_2018']:.2f}"))
    if "bleu_compound_split" in r:
        rows.append(("BLEU, fairseq's protocol (-a tokens + compound split)", f"{r['bleu_compound_split']:.2f}"))
    if "bleu_tokenized" in r:
        rows.append(("BLEU, tokenized (-a)", f"{r['bleu_tokenized']:.2f}"))
    rows.append(("sacreBLEU, detokenized", f"{r['sacrebleu']:.2f}"))
    if paper:
        rows.append(("the paper, Table 2", f"{paper:.1f}"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v:>6}")
    common.report_training(r)


def main(argv=None):
    s = build(argv)
    scale.run(s, stages, canary.report if s.canary else report, aliases=STAGE_ALIASES)


if __name__ == "__main__":
    main_guard(main, interrupted="interrupted; finished stages are kept, run the same command again to resume")
