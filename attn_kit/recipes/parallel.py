"""Your own parallel corpus through the WMT14 recipe's stages (run it through recipes/parallel.sh).

    bash recipes/parallel.sh --src en --tgt de --train data/train --valid data/valid --test data/test

--train/--valid/--test PREFIX name raw text files PREFIX.SRC and PREFIX.TGT, one
sentence per line, line N of one the translation of line N of the other. The
stages are the WMT14 recipe's (attn_kit.recipes.wmt14), with the user's files
in place of the downloads:

  check      both sides of every split exist, are UTF-8, have as many lines, no empty line
  copy       into WORKDIR/raw, whitespace normalized
  tokenize   Moses punctuation normalization and tokenization with -a (sacremoses; any
             language it has rules for: --src/--tgt are checked against them)
  bpe        joint BPE (subword-nmt, --bpe-merges), then clean-corpus-n on the training pairs
  binarize   fairseq-preprocess --joined-dictionary
  train      the paper's model (--arch; --layers, --d-model, ... resize it), optimizer,
             schedule and batch (Sec. 5), on --ngpus GPUs, --nnodes, --launcher slurm, ...
  average    the last checkpoints (Sec. 6.1)
  generate   beam search on the test split (beam 4, GNMT length penalty 0.6)
  score      sacreBLEU on detokenized output, tokenized BLEU (multi-bleu), and
             tensor2tensor's protocol (the paper's); WORKDIR/results.json

Options after -- go to fairseq-train as they are. Each stage skips work whose
complete output exists; use a fresh --workdir when the files change.
"""
import argparse
from pathlib import Path
from typing import Dict

from ..cli import UsageError, UserError, main_guard
from ..sizes import PLUGIN_ARCHS
from . import common, config, scale, wmt14
from .common import REPO

SPLITS = ("train", "valid", "test")


def moses_languages() -> list:
    """The language codes sacremoses has rules for (its nonbreaking prefixes)."""
    from sacremoses.corpus import NonbreakingPrefixes

    return sorted(set(NonbreakingPrefixes().available_langs.values()))


def check_language(option: str, code: str):
    known = moses_languages()
    if code not in known:
        raise UsageError(f"{option} {code!r}: sacremoses has no Moses rules for this language code; known: "
                         f"{', '.join(known)}")


def scan(path: Path):
    """(lines, first empty line number or None, empty lines) of a text file; a UserError
    names the line that is not UTF-8."""
    lines, first_empty, empty = 0, None, 0
    with open(path, "rb") as f:
        for lines, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"{path} line {lines} is not UTF-8 text") from None
            if not text.strip():
                empty += 1
                first_empty = first_empty or lines
    return lines, first_empty, empty


def check_files(files: Dict[str, Path], src: str, tgt: str):
    """Every split's two files exist, are UTF-8, line-aligned (as many lines) and without empty
    lines; one UserError naming the file (and both counts) otherwise."""
    for split, prefix in files.items():
        paths = [Path(f"{prefix}.{lang}") for lang in (src, tgt)]
        for path in paths:
            if not path.is_file():
                raise UserError(f"--{split} {prefix}: {path} not found (expected raw text files {prefix}.{src} and "
                                f"{prefix}.{tgt}, one sentence per line)")
        (n_src, empty_src, k_src), (n_tgt, empty_tgt, k_tgt) = (scan(p) for p in paths)
        if n_src != n_tgt:
            raise UserError(f"--{split}: {paths[0]} has {n_src} lines but {paths[1]} has {n_tgt}; the two sides "
                            "must be line-aligned translations")
        if n_src == 0:
            raise UserError(f"--{split}: {paths[0]} and {paths[1]} are empty")
        for path, first, count in ((paths[0], empty_src, k_src), (paths[1], empty_tgt, k_tgt)):
            if first:
                raise UserError(f"{path} line {first} is empty ({count} empty line{'s' if count > 1 else ''} in "
                                f"all); remove those pairs from both {prefix}.{src} and {prefix}.{tgt}")


def parse_args(argv=None):
    cfg = config.load("wmt14")
    P, F = config.settings("wmt14", "paper"), config.settings("wmt14", "paper", "files")
    p = argparse.ArgumentParser(prog="recipes/parallel.sh", usage=scale.USAGE, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--src", help="source language code (Moses' rules for it: en, de, fr, cs, ...)")
    g.add_argument("--tgt", help="target language code")
    for split, what in (("train", "training"), ("valid", "validation (fairseq's valid loss)"),
                        ("test", "test (translated and scored at the end)")):
        g.add_argument(f"--{split}", type=Path, metavar="PREFIX",
                       help=f"{what} pairs: raw text files PREFIX.SRC and PREFIX.TGT")
    g.add_argument("--bpe-merges", type=int, help=f"joint BPE merges (default {F['bpe_merges']}; fewer for a "
                                                  "small corpus)")
    wmt14.add_workers_option(g)
    common.add_run_options(p, "runs/parallel_<src>_<tgt>_<arch>")
    p.add_argument("--arch", default="attn_paper_base",
                   help=f"model architecture registered by attn_plugin: {', '.join(PLUGIN_ARCHS)} (default "
                        "attn_paper_base); --layers, --d-model, --d-ff, --h, --p-drop resize it")
    wmt14.add_training_options(p, cfg, None, None, P, resize="resize --arch: ")
    args = scale.parse(p, argv)

    for option in ("src", "tgt", "train", "valid", "test"):
        if not getattr(args, option):
            raise UsageError(f"give --{option}: recipes/parallel.sh --src en --tgt de --train PREFIX --valid PREFIX "
                             "--test PREFIX (raw text files PREFIX.en and PREFIX.de)")
    if args.src == args.tgt:
        raise UsageError(f"--src and --tgt are both {args.src!r}")
    check_language("--src", args.src)
    check_language("--tgt", args.tgt)
    if args.arch not in PLUGIN_ARCHS:
        raise UsageError(f"unknown --arch {args.arch!r}; attn_plugin registers: {', '.join(PLUGIN_ARCHS)}")
    args.pair, args.mode = f"{args.src}-{args.tgt}", "files"
    args.files = {split: getattr(args, split).expanduser().resolve() for split in SPLITS}
    short = args.arch.replace("attn_paper_", "")
    args.workdir = (args.workdir or REPO / "runs" / f"parallel_{args.src}_{args.tgt}_{short}").resolve()
    arch = args.arch if args.arch in cfg["archs"] else "attn_paper_base"
    settings = config.settings("wmt14", "paper", f"archs.{arch}", "files")
    args.size = common.model_size(settings, wmt14.size_overrides(args), resize_arch=args.arch)
    args.model = args.size.flags() if args.size else []
    common.apply_settings(args, settings)
    args.recipe_module = "attn_kit.recipes.parallel"
    args.vocab_estimate = wmt14.vocabulary_estimate(args)
    return args


def main(argv=None):
    args = parse_args(argv)
    scale.run(args, wmt14.stages(args), wmt14.report)


if __name__ == "__main__":
    main_guard(main, interrupted="interrupted; finished stages are kept, run the same command again to resume")
