"""WMT14 translation recipe for attn_plugin (run it through recipes/wmt14_en_de.sh).

Modes:
  (default)   WMT14 as in the paper (Sec. 5-6): download, prepare, binarize,
              train on --ngpus GPUs (torchrun; multi-node with --nnodes), average,
              generate (beam 4, GNMT length penalty 0.6), score
  --smoke     the same stages on CPU in a few minutes: tiny archives laid out like
              WMT14's, served from a local mirror on 127.0.0.1, and a tiny model
  --bundled   EN-DE only: the repo's bundled Tatoeba corpus and a small
              configuration of the paper's model, on CPU in about 15 minutes

Stages (every mode): download, extract, tokenize, bpe, binarize, train,
average, generate, score (--stage prepare / --stop-stage prepare name
extract..bpe, the stages that were one 'prepare' stage before).
recipes/parallel.sh runs the same stages on your own parallel corpus
(attn_kit.recipes.parallel: check and copy instead of download and extract).

Options after -- go to fairseq-train as they are (--tensorboard-logdir DIR,
--eval-bleu ... --best-checkpoint-metric bleu --patience N, ...); results.json
records them. --launcher slurm submits the data stages as a CPU job and the training
and evaluation as a job that starts after it (WORKDIR/prepare.sbatch, WORKDIR/train.sbatch;
--prepare-here prepares the data here instead). --dry-run also prints the
run's training FLOPs beside the paper's Table 2 cost and an estimated wall time.
Each stage skips work whose complete output exists; --dry-run prints the
commands; a killed run resumes where it stopped (training from its last
checkpoint) when the same command is run again. Settings of every mode:
recipes/configs/wmt14.yaml.

Prepare once, train many: the data stages (download..binarize) run in --data-workdir,
by default wmt14_<pair>_data beside the work directory (runs/wmt14_en_de_data), so
that base, big and Table 3 (recipes/table3.sh) share one prepared copy; a second run
finds them done, or waits while another run prepares them. A data folder prepared
with other data options (--bpe-merges, the pair, the mode) is refused, never redone
under the runs that use it. --bundled and --smoke keep their data in the work
directory unless --data-workdir is given. results.json and inference.json name files
relative to the work directory (../wmt14_en_de_data/... for the data folder), so a
run copied together with its data folder works where it lands.
"""
import argparse
import dataclasses
import json
import lzma
import os
import sys
from pathlib import Path
from typing import Optional

from ..cli import UsageError, UserError, log, main_guard, write_json_atomic
from ..paper import TABLE2_BLEU
from ..pipeline import verify
from ..pipeline.progress import Progress, watch_output
from ..fairseq_commands import average_checkpoints, averaged_info_path, binarize
from ..pipeline.stages import Stage
from ..pipeline.text import count_lines, moses_tokenize, moses_tokenizer_args
from . import canary, common, config, scale
from ..sizes import PLUGIN_ARCHS
from ..checkout import REPO
from .wmt14_data import BUNDLED, FILES, PAIRS, files_for

BUNDLED_DATA = REPO / "data" / "tatoeba-en-de"
SPLITS = ("train", "valid", "test")
VOCABULARY_THRESHOLD = 50  # apply-bpe --vocabulary-threshold, as fairseq's WMT scripts
BPE_SAMPLE_SEED = 1  # --bpe-learn-pairs: the sample of training pairs BPE is learned on
MAX_LEN_B, BATCH_SIZE = 50, 128  # decoding: output up to input + 50 tokens (Sec. 6.1); sentences per batch
T2T_PROTOCOL = {  # results.json's bleu_t2t_protocol, by whether the target is German
    True: "tensor2tensor get_ende_bleu.sh of 2017: tokenizer.perl -l de (no -a), compound split, multi-bleu.perl "
          "(the paper's Table 2); bleu_t2t_2018: the 2018 script, replace-unicode-punctuation first",
    False: "tokenizer.perl (no -a), multi-bleu.perl (t2t's 2017 pipeline without the compound split); "
           "bleu_t2t_2018: replace-unicode-punctuation first",
}


def parse_args(argv=None):
    cfg = config.load("wmt14")
    B, S, P = (config.settings("wmt14", "paper", m) for m in ("bundled", "smoke", None))
    p = argparse.ArgumentParser(
        prog=f"recipes/wmt14_{os.environ.get('ATTN_RECIPE_PAIR', 'en_de')}.sh", usage=scale.USAGE,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pair", default="en-de", choices=sorted(PAIRS), help="language pair (set by the .sh file)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--bundled", action="store_true", help="train and evaluate on the bundled Tatoeba EN-DE data")
    mode.add_argument("--smoke", action="store_true",
                      help="every WMT14 stage on CPU in minutes: tiny archives from a local mirror, a tiny model")
    common.add_run_options(p, "runs/wmt14_<pair>_<mode or arch>")
    p.add_argument("--arch", default="attn_paper_base",
                   help=f"model architecture registered by attn_plugin: {', '.join(PLUGIN_ARCHS)} "
                        "(default attn_paper_base; for EN-FR, attn_paper_big means attn_paper_big_en_fr, "
                        "P_drop 0.1 as in Sec. 6.1; --bundled and --smoke shrink the model)")
    g = p.add_argument_group("data")
    g.add_argument("--mirror", help="base URL (or local folder) that holds the WMT14 files at the same paths as "
                                    "www.statmt.org, e.g. http://127.0.0.1:8000 (default: the public hosts)")
    g.add_argument("--bpe-merges", type=int, help="joint BPE merges (default: EN-DE 35000, EN-FR 30000, aiming at "
                                                  f"the paper's 37000 / 32000 shared tokens; --bundled "
                                                  f"{B['bpe_merges']})")
    add_workers_option(g)
    add_bpe_learn_option(g, P)
    add_data_workdir_option(g, "wmt14_<pair>_data beside the work directory (runs/wmt14_en_de_data), shared "
                               "by base, big and recipes/table3.sh; --bundled, --smoke: the work directory")
    add_training_options(p, cfg, B, S, P)
    args = scale.parse(p, argv)

    if args.arch not in PLUGIN_ARCHS:
        raise UsageError(f"unknown --arch {args.arch!r}; attn_plugin registers: {', '.join(PLUGIN_ARCHS)}")
    if args.bundled and args.pair != B["pair"]:
        raise UsageError(f"--bundled data is English-German; for {args.pair} use --smoke or the full recipe")
    if args.pair == "en-fr" and args.arch == "attn_paper_big":
        args.arch = "attn_paper_big_en_fr"  # Sec. 6.1: P_drop 0.1 for EN-FR big
    args.mode = "bundled" if args.bundled else "smoke" if args.smoke else args.arch.replace("attn_paper_", "")
    args.workdir = (args.workdir or REPO / "runs" / f"wmt14_{args.pair.replace('-', '_')}_{args.mode}").resolve()
    set_data_workdir(args, f"wmt14_{args.pair.replace('-', '_')}_data" if args.mode not in ("bundled", "smoke")
                     else None)
    arch = args.arch if args.arch in cfg["archs"] else "attn_paper_base"
    settings = config.settings("wmt14", "paper", f"archs.{arch}", args.mode if args.mode in cfg else None)
    settings["bpe_merges"] = settings["bpe_merges"] or PAIRS[args.pair].bpe_merges
    args.size = common.model_size(settings, size_overrides(args))
    args.model = args.size.flags() if args.size else []
    args.src, args.tgt = PAIRS[args.pair].src, PAIRS[args.pair].tgt
    common.apply_settings(args, settings)
    args.recipe_module = "attn_kit.recipes.wmt14"
    args.vocab_estimate = vocabulary_estimate(args)
    return args


SIZE_OPTIONS = ("layers", "d_model", "d_ff", "h", "p_drop")


def size_overrides(args) -> dict:
    return {k: getattr(args, k) for k in SIZE_OPTIONS}


def vocabulary_estimate(args):
    """(size, note) of the joined dictionary before the binarize stage made it: the paper's for
    the WMT14 pairs, else about the BPE merges (plus the symbols they start from)."""
    if args.mode not in ("bundled", "smoke", "files") and args.pair in PAIRS:
        return PAIRS[args.pair].paper_vocab, " (the paper's; the binarize stage prints the real one)"
    return args.bpe_merges, " (about --bpe-merges, until the binarize stage made the dictionary)"


def add_data_workdir_option(g, default: str):
    g.add_argument("--data-workdir", type=Path,
                   help="where the data stages (download..binarize) prepare the data, for several runs to "
                        "share; the training stages stay in --workdir. A folder prepared with other data "
                        f"options is refused (default: {default})")


def set_data_workdir(args, shared: Optional[str]):
    """``args.data_workdir``: --data-workdir, else the folder ``shared`` beside the work directory (None:
    the work directory itself); ``args.data_home``: the data stages' own folder (:attr:`Stage.home`:
    shared, locked while they run, never redone with other options), None when they live in the
    work directory. A work directory that holds its own prepared data (an earlier version's layout)
    keeps using it when the shared folder has nothing yet."""
    given = args.data_workdir is not None
    if given:
        folder = args.data_workdir.expanduser().resolve()
    elif shared:
        folder = args.workdir.parent / shared
        if not (folder / ".stages").is_dir() and (args.workdir / ".stages" / "binarize.done").is_file():
            log(f"{args.workdir} holds its own prepared data (the layout before --data-workdir): using it; "
                f"--data-workdir {folder} would share one copy with other runs")
            folder = args.workdir
    else:
        folder = args.workdir
    args.data_workdir = folder
    args.data_home = folder if given or folder != args.workdir else None


def add_workers_option(g):
    g.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="processes for tokenization, BPE and binarization (default: CPUs, at most 8)")


def add_bpe_learn_option(g, P):
    g.add_argument("--bpe-learn-pairs", type=int, metavar="N",
                   help=f"learn BPE on a random sample of N training pairs when there are more (default "
                        f"{P['bpe_learn_pairs']}; README 'Preparing WMT-sized data' says what it saves and costs); "
                        "BPE is applied to every pair all the same. 0: learn on every pair")


def bpe_learn_files(src: Path, tgt: Path, sample_src: Path, sample_tgt: Path, pairs: int, record: Path):
    """The files to learn BPE on: a sample of ``pairs`` pairs of ``src``/``tgt`` (seed
    :data:`BPE_SAMPLE_SEED`) written to ``sample_src``/``sample_tgt`` when they hold more, else themselves.
    ``record`` (JSON) keeps what was learned on and apply-bpe's threshold for the vocabulary learned with
    it: learn-joint-bpe-and-vocab counts the vocabulary on the text it learns from, so on a sample the
    threshold scales with the sample's share, and a subword is kept where it occurs about
    :data:`VOCABULARY_THRESHOLD` times in all the training text (at 50 on the counts of a 22% sample,
    half the subwords the full counts keep were dropped and the bundled run lost 3.6 BLEU)."""
    from ..pipeline.text import sample_pairs

    total = count_lines(src)
    sampled = bool(pairs) and total > pairs
    threshold = max(1, round(VOCABULARY_THRESHOLD * pairs / total)) if sampled else VOCABULARY_THRESHOLD
    if sampled:
        sample_pairs(src, tgt, sample_src, sample_tgt, pairs, BPE_SAMPLE_SEED)
    write_json_atomic(record, {"pairs": pairs if sampled else total, "of": total,
                               "seed": BPE_SAMPLE_SEED if sampled else None, "vocabulary_threshold": threshold})
    log(f"learning BPE on {pairs} of the {total} training pairs (--bpe-learn-pairs); apply-bpe keeps subwords "
        f"seen {threshold} times in them" if sampled else f"learning BPE on all {total} training pairs")
    return [sample_src, sample_tgt] if sampled else [src, tgt]


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


def add_training_options(p, cfg, B, S, P, resize: str = "--bundled/--smoke: "):
    """The training and evaluation options of the WMT14 recipes and recipes/parallel.sh
    (``resize``: what the size options resize, at the start of their help; ``B``, ``S``: the
    --bundled and --smoke settings their help quotes, None for a recipe without those modes)."""
    def modes(text) -> str:  # text: a function of B and S, for the modes' part of a help string
        return text(B, S) if B else ""

    g = p.add_argument_group("training")
    common.add_device_options(g)
    g.add_argument("--tokens-per-update", type=int,
                   help=f"padded tokens per update over all devices, fairseq's --max-tokens x devices x "
                        f"--update-freq (default {P['tokens_per_update']}: ~25000 real source and target tokens "
                        f"each on WMT-like lengths, Sec. 5.1"
                        + modes(lambda B, S: f"; --bundled {B['tokens_per_update']}, --smoke {S['tokens_per_update']}")
                        + ")")
    g.add_argument("--max-tokens-per-gpu", type=int,
                   help=f"most tokens one device holds per step; --update-freq makes up the rest (default "
                        f"{P['max_tokens_per_gpu']})")
    base, big = cfg["archs"]["attn_paper_base"], cfg["archs"]["attn_paper_big"]
    g.add_argument("--max-update", type=int, help=f"updates (default: base {base['max_update']}, big "
                                                  f"{big['max_update']}"
                                                  + modes(lambda B, S: f"; --bundled {B['max_update']}, --smoke "
                                                                       f"{S['max_update']}") + ")")
    g.add_argument("--warmup-updates", type=int, help=f"eq. 3 warmup (default {P['warmup_updates']}"
                                                      + modes(lambda B, S: f"; --bundled {B['warmup_updates']}")
                                                      + ")")
    g.add_argument("--lr-scale", type=float, help=f"multiplies eq. 3's learning rate (default {P['lr_scale']:g}"
                                                  + modes(lambda B, S: f"; --bundled {B['lr_scale']:g}") + ")")
    size = common.SIZES["bundled"]
    for name, what in (("layers", "N, layers of encoder and decoder"), ("d_model", "d_model"), ("d_ff", "d_ff"),
                       ("h", "attention heads h"), ("p_drop", "P_drop, residual dropout")):
        g.add_argument(f"--{name.replace('_', '-')}", type=float if name == "p_drop" else int,
                       help=f"{resize}{what} (the bundled model: {size.describe()})")
    g.add_argument("--save-interval-updates", type=int,
                   help=f"save a checkpoint every N updates (default: base {base['save_interval_updates']}, big "
                        f"{big['save_interval_updates']})")
    g = p.add_argument_group("evaluation")
    g.add_argument("--average", type=int, help=f"average the last N checkpoints (default: base {base['average']}, "
                                               f"big {big['average']}; Sec. 6.1)")
    g.add_argument("--beam", type=int, help=f"beam size (default {P['beam']}, Sec. 6.1)")
    g.add_argument("--length-penalty", choices=["gnmt", "fairseq"],
                   help="gnmt: the paper's ((5+|Y|)/6)^alpha (default); fairseq: |Y|^lenpen (default for --bundled: "
                        "on Tatoeba's short sentences it beat GNMT 0.6 on the valid split with the same checkpoint, "
                        "recipes/results/bundled_sweep.*.json)")
    g.add_argument("--alpha", type=float, help=f"GNMT length penalty alpha (default {P['alpha']:g}, Sec. 6.1)")
    g.add_argument("--lenpen", type=float, help=f"fairseq's --lenpen, with --length-penalty fairseq (default "
                                                f"{P['lenpen']:g})")
    common.add_beam_stop_option(g)


# ---------------------------------------------------------------------------------------------- data
def check_bundled(folder: Path):
    """The bundled splits are there and intact (sizes and sha256 as committed)."""
    from ..pipeline.download import sha256_of

    for rf in BUNDLED.values():
        path = folder / rf.name
        if not path.exists():
            raise UserError(f"bundled data missing: {path} (is this a complete clone of the repo?)")
        if path.stat().st_size != rf.size or sha256_of(path) != rf.sha256:
            raise UserError(f"bundled data damaged: {path} (its sha256 is not the committed one); restore it with "
                            f"git checkout -- {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")


def extract_bundled(src_dir: Path, out_dir: Path, src: str, tgt: str):
    """``{split}.{src}-{tgt}.tsv.xz`` (source<TAB>target) -> plain ``{split}.{src}`` and ``{split}.{tgt}``."""
    for split in SPLITS:
        path = src_dir / f"{split}.{src}-{tgt}.tsv.xz"
        if not path.exists():
            raise UserError(f"bundled data missing: {path} (is this a complete clone of the repo?)")
        try:
            with lzma.open(path, "rt", encoding="utf-8") as f, \
                    open(out_dir / f"{split}.{src}", "w", encoding="utf-8") as fs, \
                    open(out_dir / f"{split}.{tgt}", "w", encoding="utf-8") as ft:
                for n, line in enumerate(f, 1):
                    fields = line.rstrip("\n").split("\t")
                    if len(fields) != 2:
                        raise UserError(f"{path}: line {n} is not 'source<TAB>target'")
                    fs.write(fields[0] + "\n")
                    ft.write(fields[1] + "\n")
        except (lzma.LZMAError, EOFError, UnicodeDecodeError) as exc:
            raise UserError(f"bundled data damaged: {path} ({exc}); restore it with git checkout") from None


def once(ctx, path: Path, description: str, fn, *args):
    """A step whose output ``path`` is kept between runs: skipped when ``path`` exists,
    so that a stage killed half-way redoes only its unfinished steps."""
    if path.exists() and not ctx.dry_run:
        print(f"  # {description}: done already", flush=True)
        return
    with ctx.output(path) as tmp:
        ctx.step(description, fn, *args, tmp)


def stages(args):
    """The recipe's stages; the modes differ only in where the text comes from and in numbers."""
    files = args.data == "files"
    W, pair = args.workdir, None if files else PAIRS[args.pair]
    D, home = getattr(args, "data_workdir", None) or W, getattr(args, "data_home", None)  # the data's folder
    src, tgt = args.src, args.tgt
    dl, orig, raw, tok, bpe, prep = (D / d for d in ("downloads", "orig", "raw", "tok", "bpe", "prep"))
    data_bin, ckpt, avg, gen = D / "data-bin", W / "checkpoints", W / "checkpoint_avg.pt", W / "gen" / "test.out"
    texts = [f"{split}.{lang}" for split in SPLITS for lang in (src, tgt)]
    binarize_from = prep if args.clean else bpe
    keys = [] if files else files_for(args.pair)
    bundled = args.data == "bundled"

    def download(ctx):
        if files:
            from .parallel import check_files

            ctx.step(f"check {', '.join(f'{prefix}.{{{src},{tgt}}}' for prefix in args.files.values())}: there, "
                     "UTF-8, line counts equal, no empty line", check_files, args.files, src, tgt, args.errors)
            return
        if bundled:
            ctx.step(f"check the bundled Tatoeba EN-DE files in {BUNDLED_DATA} (sizes, sha256)", check_bundled,
                     BUNDLED_DATA)
            return
        from ..pipeline.download import fetch, mirror_url

        manifest, mirror, stop = dict(FILES), args.mirror, None
        if args.data == "smoke-mirror" and not mirror:
            ctx.step(f"build the smoke archives in {D / 'mirror'} and serve them on 127.0.0.1", lambda: None)
            if not ctx.dry_run:
                from ..pipeline.mirror import serve
                from .wmt14_smoke import build_mirror

                manifest.update(build_mirror(D / "mirror", args.pair))
                mirror, stop = serve(D / "mirror")
        elif args.data == "smoke-mirror":  # a user-given mirror of smoke archives: their checksums come from ours
            from .wmt14_smoke import build_mirror

            manifest.update(build_mirror(D / "mirror-expected", args.pair)) if not ctx.dry_run else None
        try:
            for key in keys:
                rf = manifest[key]
                checks = ", ".join(f"{k} {getattr(rf, k)}" for k in ("size", "sha256", "md5") if getattr(rf, k))
                ctx.step(f"fetch {mirror_url(rf.url, mirror)} -> {dl / rf.name} ({checks or 'no published checksum'})",
                         fetch, rf, dl, mirror, log)
        finally:
            if stop:
                stop()

    def extract(ctx):
        if files:
            from ..pipeline.text import copy_corpus

            for split, prefix in args.files.items():
                for lang in (src, tgt):
                    once(ctx, raw / f"{split}.{lang}", f"copy {prefix}.{lang} -> {raw / f'{split}.{lang}'} "
                         "(whitespace normalized)", lambda out, p=f"{prefix}.{lang}": copy_corpus(p, out, args.errors))
            return
        if bundled:
            with ctx.output(raw) as tmp:
                ctx.step(f"extract {BUNDLED_DATA}/*.tsv.xz into {raw}", lambda: (
                    tmp.mkdir(parents=True), extract_bundled(BUNDLED_DATA, tmp, src, tgt)))
            return
        from ..pipeline.text import concatenate, extract_members, read_sgm, write_lines

        def unpack(key, wanted):  # the training corpora as text, the test sets' sgm; each archive read once
            if all(p.exists() for p in wanted.values()) and not ctx.dry_run:
                print(f"  # extract from {FILES[key].name}: done already", flush=True)
                return
            ctx.step(f"extract {', '.join(wanted)} from {FILES[key].name}",
                     extract_members, dl / FILES[key].name, wanted)

        for d in (orig, raw):
            if not ctx.dry_run:
                d.mkdir(parents=True, exist_ok=True)
        for key, en_member, f_member in pair.train:
            unpack(key, {en_member: orig / f"{key}.{src}", f_member: orig / f"{key}.{tgt}"})
        for split, key, members in (("valid", "dev", pair.dev), ("test", "test", pair.test)):
            unpack(key, {m: orig / Path(m).name for m in members})
            for member, lang in zip(members, (src, tgt)):
                once(ctx, raw / f"{split}.{lang}", f"sgm -> text: {Path(member).name}",
                     lambda out, m=member: write_lines(out, read_sgm(orig / Path(m).name)))
        for lang in (src, tgt):
            once(ctx, raw / f"train.{lang}", f"concatenate the {len(pair.train)} training corpora ({lang})",
                 lambda out, lang=lang: concatenate([orig / f"{key}.{lang}" for key, _, _ in pair.train], out))

    def tokenize(ctx):  # Moses normalization + tokenization with -a, as fairseq's scripts (sacremoses)
        if ctx.dry_run and pair and args.mode not in ("bundled", "smoke"):
            from ..prep_cost import recipe_lines

            for line in recipe_lines(args.pair, pair.train_pairs, args.workers, args.bpe_learn_pairs):
                print(f"  # {line}", flush=True)
        for t in texts:
            once(ctx, tok / t, f"sacremoses normalize + tokenize -l {t.rsplit('.', 1)[1]}: {raw / t} -> {tok / t}",
                 lambda out, t=t: moses_tokenize(raw / t, out, t.rsplit(".", 1)[1], args.workers,
                                                 progress=Progress(f"tokenize {t}", count_lines(raw / t))))

    def learn_apply_bpe(ctx):  # joint BPE (subword-nmt) learned on the training data (or a sample), applied to all
        if not (bpe / "codes").exists() or ctx.dry_run:
            learn_from = [tok / f"train.{src}", tok / f"train.{tgt}"]
            sample = [bpe / f"learn-sample.{src}", bpe / f"learn-sample.{tgt}"]
            if args.bpe_learn_pairs:
                learn_from = ctx.step(
                    f"learn on {args.bpe_learn_pairs} training pairs drawn at random (seed {BPE_SAMPLE_SEED}) into "
                    f"{bpe / f'learn-sample.{{{src},{tgt}}}'} when there are more (--bpe-learn-pairs); then "
                    f"apply-bpe's --vocabulary-threshold is {VOCABULARY_THRESHOLD} x their share ({bpe / 'learn.json'})",
                    bpe_learn_files, *learn_from, *sample, args.bpe_learn_pairs, bpe / "learn.json") or sample
            with ctx.output(bpe / "codes") as codes:
                ctx.sh(learn_bpe_command(learn_from, codes, [bpe / f"vocab.{src}", bpe / f"vocab.{tgt}"],
                                         args.bpe_merges, args.workers))
            for path in sample:
                if not ctx.dry_run and path.exists():
                    path.unlink()
        for t in texts:
            if not (bpe / t).exists() or ctx.dry_run:
                with ctx.output(bpe / t) as out, watch_output(ctx, out, tok / t, f"apply BPE to {t}"):
                    ctx.sh(apply_bpe_command(bpe / "codes", bpe / f"vocab.{t.rsplit('.', 1)[1]}", tok / t,
                                             args.workers, bpe_vocabulary_threshold(bpe)), stdout=out)
        if args.clean:
            clean(ctx)

    def clean(ctx):  # clean-corpus-n on the training pairs after BPE, as fairseq's scripts; dev and test stay whole
        from ..pipeline.text import clean_parallel

        def run():
            prep.mkdir(parents=True, exist_ok=True)
            with ctx.output(prep / f"train.{tgt}") as t_out, ctx.output(prep / f"train.{src}") as s_out:
                kept, read = clean_parallel(bpe / f"train.{src}", bpe / f"train.{tgt}", s_out, t_out)
                write_json_atomic(prep / "clean.json", {"kept": kept, "read": read})
            log(f"cleaning kept {kept} of {read} training pairs")

        if not all((prep / f"train.{lang}").exists() for lang in (src, tgt)) or ctx.dry_run:
            ctx.step("clean-corpus-n: keep training pairs of 1-250 tokens with length ratio <= 1.5", run)
        for t in texts[2:]:
            ctx.step(f"copy {bpe / t} -> {prep / t}", lambda t=t: (prep / t).write_bytes((bpe / t).read_bytes()))

    def binarize_stage(ctx):
        binarize(ctx, src, tgt, binarize_from, data_bin, args.workers)
        if not ctx.dry_run and not bundled and pair:
            vocab = common.dictionary_size(data_bin / f"dict.{src}.txt")
            log(f"joined dictionary: {vocab} types (the paper: about {pair.paper_vocab})")

    def train(ctx):
        common.run_training(ctx, args, common.train_command(args, data_bin, ckpt, args.model), model=args.model)

    def average(ctx):
        average_checkpoints(ctx, ckpt, avg, args.average)

    penalty, penalty_flags = common.length_penalty(args)

    def generate(ctx):
        with ctx.output(gen) as tmp, watch_output(ctx, tmp, raw / f"test.{src}", "translate the test set", "sentences",
                                              b"D-"):
            ctx.sh(common.generate_command(args, data_bin, avg, "test", args.beam, penalty_flags, MAX_LEN_B,
                                           BATCH_SIZE), stdout=tmp, tail=1, env=common.thread_env(args))
        ctx.step(f"write {W / 'inference.json'}: this pre-processing and decoding, for scripts/translate.py",
                 common.write_run_card, W, "translation", avg, data_bin, src, tgt, {
                     **moses_tokenizer_args(), "bpe": "attn_subword_nmt", "bpe_codes": bpe / "codes",
                     "bpe_vocabulary": bpe / f"vocab.{src}", "bpe_vocabulary_threshold": bpe_vocabulary_threshold(bpe)},
                 args.beam, penalty_flags, MAX_LEN_B, BATCH_SIZE, data_workdir=D)

    def score(ctx):
        ctx.step(f"BLEU: tokenized{' and compound-split' if tgt == 'de' else ''} (multi-bleu) against "
                 f"{tok / f'test.{tgt}'}; sacreBLEU on detokenized output against {raw / f'test.{tgt}'}",
                 write_results, args, src, tgt, penalty)

    where = (f"bundled Tatoeba EN-DE ({BUNDLED_DATA})" if bundled else
             f"your {src}-{tgt} corpus: {', '.join(f'{k} {v}' for k, v in args.files.items())}" if files else
             f"WMT14 {args.pair} corpora, newstest2013 and newstest2014"
             + (" (smoke archives, local mirror)" if args.data == "smoke-mirror" else ""))
    size = f" ({'small' if bundled else 'tiny' if args.mode == 'smoke' else 'resized'})" if args.size else ""
    downloads = [] if bundled else [dl / FILES[k].name for k in keys]
    given = [Path(f"{prefix}.{lang}") for prefix in args.files.values() for lang in (src, tgt)] if files else []
    sources = given or ([BUNDLED_DATA / rf.name for rf in BUNDLED.values()] if bundled else downloads)

    def pairs(folder: Path):  # (source, target) text files of every split, for the line-count checks
        return [(folder / f"{split}.{src}", folder / f"{split}.{tgt}") for split in SPLITS]

    bpe_out = [bpe / "codes", bpe / f"vocab.{src}", bpe / f"vocab.{tgt}", *(bpe / t for t in texts),
               *([*(prep / t for t in texts), prep / "clean.json"] if args.clean else [])]
    binary = [data_bin / f"{split}.{src}-{tgt}.{lang}.{ext}" for split in SPLITS for lang in (src, tgt)
              for ext in ("bin", "idx")]
    dicts = [data_bin / f"dict.{src}.txt", data_bin / f"dict.{tgt}.txt"]
    data_stages = [
        Stage("check" if files else "download", download, where, inputs=[] if downloads else sources,
              outputs=downloads, options={"data": args.data, "files": keys}, home=home),
        Stage("copy" if files else "extract", extract, "unpack the corpora into one text file per split and language",
              inputs=sources, outputs=[raw / t for t in texts], scratch=[orig], options={"pair": f"{src}-{tgt}"},
              check=lambda: verify.parallel_text(pairs(raw)), home=home),
        Stage("tokenize", tokenize, "Moses normalization and tokenization (sacremoses)",
              inputs=[raw / t for t in texts], outputs=[tok / t for t in texts],
              check=lambda: verify.parallel_text(pairs(tok)), home=home),
        Stage("bpe", learn_apply_bpe, f"joint BPE, {args.bpe_merges} merges (subword-nmt)"
              + (f", learned on at most {args.bpe_learn_pairs} pairs" if args.bpe_learn_pairs else "")
              + (", then clean-corpus-n" if args.clean else ""),
              inputs=[tok / t for t in texts], outputs=bpe_out,
              options={"bpe_merges": args.bpe_merges, "clean": args.clean, "bpe_learn_pairs": args.bpe_learn_pairs},
              scratch=[bpe / "learn.json"],
              check=lambda: verify.parallel_text(pairs(bpe) + (pairs(prep) if args.clean else [])), home=home),
        Stage("binarize", binarize_stage, "fairseq-preprocess --joined-dictionary",
              inputs=[binarize_from / t for t in texts], outputs=[*dicts, *binary],
              check=lambda: verify.binarized(data_bin, src, tgt, SPLITS), home=home),
    ]
    train_inputs = [*dicts, *(p for p in binary if ".test." not in p.name)]
    if args.canary:
        return data_stages + [canary.stage(
            args, data_bin, [s.name for s in data_stages],
            lambda c, save_dir: common.train_command(c, data_bin, save_dir, args.model),
            lambda checkpoint: common.generate_command(args, data_bin, checkpoint, "test", args.beam, penalty_flags,
                                                       MAX_LEN_B, BATCH_SIZE),
            [(binarize_from / f"test.{src}", binarize_from / f"test.{tgt}")], args.model, train_inputs)]
    return data_stages + [
        Stage("train", train, f"fairseq-train --arch {args.arch}{size}, {common.train_budget(args)}",
              inputs=train_inputs, outputs=[ckpt / "checkpoint_last.pt"],
              scratch=[ckpt, *common.train_records(args)], options=common.train_options(args, args.model),
              resumable=common.RESUMABLE_TRAIN_OPTIONS),
        Stage("average", average, f"average the last {args.average} checkpoints", inputs=[ckpt],
              outputs=[avg, averaged_info_path(avg)], options={"average": args.average}),
        Stage("generate", generate, f"fairseq-generate, beam {args.beam}, {penalty}, "
                                    f"{common.BEAM_STOP_NAMES[common.beam_stop(args)]}, on the test set",
              inputs=[avg, *dicts, *(p for p in binary if ".test." in p.name)], outputs=[gen, W / "inference.json"],
              options={"beam": args.beam, "length_penalty": penalty, "beam_stop": common.beam_stop(args)}),
        Stage("score", score, "tokenized BLEU and sacreBLEU",
              inputs=[gen, raw / f"test.{tgt}", tok / f"test.{tgt}", averaged_info_path(avg)],
              outputs=[W / "results.json"]),
    ]


# The data stages of every mode (the first two are named check and copy for recipes/parallel.sh).
STAGE_NAMES = ("download", "extract", "tokenize", "bpe", "binarize")
# The stages that were one 'prepare' stage (WMT14) before the stage list was shared by every mode.
STAGE_ALIASES = {"prepare": ("extract", "bpe")}


# ---------------------------------------------------------------------------------------------- scoring
def test_scores(hyps_tok, refs, tgt: str, tok_refs=None) -> dict:
    """BLEU of fairseq-generate's hypotheses (Moses -a tokens, BPE removed) against the raw references
    every way the paper and fairseq report it. ``tok_refs``: the references as the recipe tokenized
    them (default: tokenized here the same way). ``detokenized``: the hypotheses as raw text."""
    import sacrebleu
    from sacremoses import MosesDetokenizer

    from ..metrics.bleu import compound_split, multi_bleu, t2t_bleu
    from ..pipeline.text import _moses_line

    if tok_refs is None:
        tok_refs = [_moses_line(tgt, r) for r in refs]
    detok = MosesDetokenizer(lang=tgt)
    hyps = [detok.detokenize(h.split()) for h in hyps_tok]
    bleu = sacrebleu.metrics.BLEU()
    result = bleu.corpus_score(hyps, [refs])
    paper = t2t_bleu(hyps, refs, lang=tgt)  # the paper's protocol (tensor2tensor's get_ende_bleu.sh of 2017)
    later = t2t_bleu(hyps, refs, lang=tgt, version="2018")
    out = {"bleu_t2t": round(paper.score, 2), "bleu_t2t_2018": round(later.score, 2),
           "bleu_t2t_protocol": T2T_PROTOCOL[tgt == "de"],
           "sacrebleu": round(result.score, 2), "sacrebleu_signature": str(bleu.get_signature()),
           "bleu_tokenized": round(multi_bleu(hyps_tok, tok_refs).score, 2), "detokenized": hyps}
    if tgt == "de":
        split = multi_bleu([compound_split(h) for h in hyps_tok], [compound_split(r) for r in tok_refs])
        out["bleu_compound_split"] = round(split.score, 2)
    return out


def write_results(args, src: str, tgt: str, penalty: str):
    """Score the test output every way the paper and fairseq report it; write results.json."""
    from ..metrics.bleu import read_lines

    W = args.workdir
    D = getattr(args, "data_workdir", None) or W  # the prepared data (--data-workdir)
    refs = read_lines(D / "raw" / f"test.{tgt}")  # split at \n only, as multi-bleu.perl does
    hyps_tok = common.read_hypotheses(W / "gen" / "test.out", len(refs))
    out = test_scores(hyps_tok, refs, tgt, tok_refs=read_lines(D / "tok" / f"test.{tgt}"))
    hyps = out.pop("detokenized")
    (W / "gen" / f"test.detok.{tgt}").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (W / "gen" / f"test.tok.{tgt}").write_text("\n".join(hyps_tok) + "\n", encoding="utf-8")
    out.update({"mode": args.mode, "pair": f"{src}-{tgt}", "arch": args.arch, "model_overrides": args.model,
                "model_size": dataclasses.asdict(args.size) if args.size else None})
    out.update(common.run_record(args, W / "logs" / "train.log", W / "checkpoint_avg.pt", W / "train_command.json"))
    p = common.plan(args)
    rel = lambda path: common.run_path(W, path)  # noqa: E731 -- relative to the run: it may be copied elsewhere
    if D != W:
        out["data_workdir"] = rel(D)
    out.update({"test_source": rel(D / "raw" / f"test.{src}"), "test_output": rel(W / "gen" / f"test.detok.{tgt}"),
                "test_reference": rel(D / "raw" / f"test.{tgt}"),
                "test_sentences": len(refs), "gpus": args.ngpus * args.nnodes, "nodes": args.nnodes,
                "cpu_processes": args.cpu_procs if args.ngpus == 0 else 0, "beam": args.beam,
                "length_penalty": penalty, "beam_stop": common.beam_stop(args), "max_tokens": p.max_tokens, "update_freq": p.update_freq,
                "max_tokens_per_update": p.tokens_per_update})
    clean = D / "prep" / "clean.json"
    if clean.exists():
        out["train_pairs"] = json.loads(clean.read_text())
    vocab = common.dictionary_size(D / "data-bin" / f"dict.{src}.txt")
    if vocab:
        out["vocabulary"] = vocab
    write_json_atomic(W / "results.json", out)


def report(r: dict):
    """Print the scores as a short table, the paper's protocol first."""
    size = {"bundled": " (small)", "smoke": " (tiny)"}.get(r.get("mode"), "")
    print(f"\nsacreBLEU = {r['sacrebleu']:.2f}   ({r['sacrebleu_signature']})")
    averaged = r.get("averaged_updates") or []
    print(f"{r.get('pair', 'en-de')}, {r['arch']}{size}, {r['updates']} updates (seed {r.get('seed')}), "
          f"average of {len(averaged)} checkpoints (updates {', '.join(map(str, averaged))}), "
          f"{r['test_sentences']} test sentences")
    rows = []
    if "bleu_t2t" in r:
        rows.append(("BLEU, the paper's protocol (t2t; compare with Table 2)", f"{r['bleu_t2t']:.2f}"))
    if "bleu_t2t_2018" in r:
        rows.append(("BLEU, t2t's 2018 script (replace-unicode-punctuation first)", f"{r['bleu_t2t_2018']:.2f}"))
    if "bleu_compound_split" in r:
        rows.append(("BLEU, fairseq's protocol (-a tokens + compound split)", f"{r['bleu_compound_split']:.2f}"))
    if "bleu_tokenized" in r:
        rows.append(("BLEU, tokenized (-a)", f"{r['bleu_tokenized']:.2f}"))
    rows.append(("sacreBLEU, detokenized", f"{r['sacrebleu']:.2f}"))
    paper = TABLE2_BLEU.get((r.get("pair"), r["arch"]))
    if paper and r.get("mode") not in ("bundled", "smoke", "files"):
        rows.append(("the paper, Table 2", f"{paper:.1f}"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v:>6}")
    common.report_training(r)


def main(argv=None):
    args = parse_args(argv)
    scale.run(args, stages(args), canary.report if args.canary else report, aliases=STAGE_ALIASES)


if __name__ == "__main__":
    main_guard(main, interrupted="interrupted; finished stages are kept, run the same command again to resume")
