"""recipes/parallel.sh: your own parallel corpus through the translation recipe's stages (attn_kit.recipes.translation),
with its files as the data source (:class:`YourFiles`: check and copy in place of download and extract)
and the recipe's settings from ``files:`` (and ``--preset``) in recipes/configs/wmt14.yaml.
"""
import argparse
import hashlib
import re
import sys
import unicodedata
from collections import Counter
from itertools import zip_longest
from pathlib import Path
from typing import Dict, Optional, Set

from ..checkout import REPO
from ..cli import ArgumentParser, UsageError, UserError, main_guard
from ..pipeline.text import copy_corpus
from ..planning.sizes import PLUGIN_ARCHS, SIZES
from ..textio import add_errors_option, iter_lines
from .. import options
from . import canary, config, scale, settings, translation
from .common import count_lines, model_size
from .sources import SPLITS, DataSource, Layout, once, source

DESCRIPTION = """\
    bash recipes/parallel.sh --src en --tgt de --train data/train --valid data/valid --test data/test

--train/--valid/--test PREFIX name raw text files PREFIX.SRC and PREFIX.TGT, one sentence per line,
line N of one the translation of line N of the other, read as every command of this project reads
text (UTF-8; --errors replace reads a byte that is not as U+FFFD). The stages are the WMT14 recipe's,
with your files in place of the downloads: check (exist, UTF-8, as many lines, no empty line; a
warning for splits that share pairs), copy, tokenize (Moses, sacremoses), bpe (joint, then
clean-corpus-n), binarize, train (the paper's model, batch and schedule, Sec. 5; --preset small for a
corpus of roughly 10K-1M pairs on a CPU or one GPU), average, generate (beam 4, GNMT alpha 0.6) and
score (sacreBLEU, tokenized BLEU, tensor2tensor's protocol; WORKDIR/results.json).

Options after -- go to fairseq-train. Each stage skips work whose complete output exists; use a fresh
--workdir when the files change. --data-workdir DIR prepares the data (check..binarize) in DIR, for
runs of several models to share."""


def moses_languages() -> list:
    """The language codes sacremoses has rules for (its nonbreaking prefixes)."""
    from sacremoses.corpus import NonbreakingPrefixes

    return sorted(set(NonbreakingPrefixes().available_langs.values()))


def check_language(option: str, code: str):
    known = moses_languages()
    if code not in known:
        raise UsageError(f"{option} {code!r}: sacremoses has no Moses rules for this language code; known: "
                         f"{', '.join(known)}")


def warn(message: str):
    """A warning: one line on stderr; the run goes on."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


class _Side:
    """What the check learns of one file in one pass: its lines, empty lines, a digest of its text."""

    def __init__(self, path: Path):
        self.path, self.lines, self.first_empty, self.empty = path, 0, None, 0
        self.first_nul, self.nul = None, 0
        self.first_invisible, self.invisible = None, 0
        self.hash = hashlib.blake2b(digest_size=16)

    def add(self, line: str):
        self.lines += 1
        self.hash.update(line.encode("utf-8") + b"\n")
        if not line.strip():
            self.empty += 1
            self.first_empty = self.first_empty or self.lines
        elif not _VISIBLE.search(line) and not any(unicodedata.category(c)[0] in "PSM" for c in line):
            self.invisible += 1  # only control, format (zero-width) and space characters: it tokenizes to nothing
            self.first_invisible = self.first_invisible or self.lines
        if "\x00" in line:
            self.nul += 1
            self.first_nul = self.first_nul or self.lines


_VISIBLE = re.compile(r"[^\W_]")  # a letter or a digit: most lines, found at C speed


def _pair(source: str, target: str) -> bytes:
    """A sentence pair's digest, whitespace normalized as the copy stage normalizes it."""
    text = " ".join(source.replace("\x00", " ").split()) + "\n" + " ".join(target.replace("\x00", " ").split())
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _read_split(split: str, prefix: Path, src: str, tgt: str, errors: str, pairs: Optional[Counter],
                held: Dict[str, Counter]) -> Dict[str, Set[bytes]]:
    """One pass over a split's two files under attn_kit.textio's policy, with :func:`check_files`'s
    errors. Each pair's digest is counted in ``pairs`` (if given); returned: for each split of
    ``held``, the digests of this split's pairs that it holds too."""
    paths = [Path(f"{prefix}.{lang}") for lang in (src, tgt)]
    sides = [_Side(path) for path in paths]
    matched = {name: set() for name in held}
    for s, t in zip_longest(*(iter_lines(path, errors=errors) for path in paths)):
        if s is not None:
            sides[0].add(s)
        if t is not None:
            sides[1].add(t)
        if s is not None and t is not None and (pairs is not None or held):
            pair = _pair(s, t)
            if pairs is not None:
                pairs[pair] += 1
            for name, other in held.items():
                if pair in other:
                    matched[name].add(pair)
    (a, b), (sa, sb) = paths, sides
    if sa.lines != sb.lines:
        raise UserError(f"--{split}: {a} has {sa.lines} lines but {b} has {sb.lines}; the two sides must be "
                        "line-aligned translations")
    if sa.lines == 0:
        raise UserError(f"--{split}: {a} and {b} are empty")
    for side in sides:
        if side.first_empty:
            raise UserError(f"{side.path} line {side.first_empty} is empty ({side.empty} empty line"
                            f"{'s' if side.empty > 1 else ''} in all); remove those pairs from both {a} and {b}")
    for side in sides:
        if side.first_invisible:
            warn(f"{side.path} line {side.first_invisible} holds no visible character ({side.invisible} line"
                 f"{'s' if side.invisible > 1 else ''} in all: only control, zero-width or space characters): each "
                 "tokenizes to nothing, an empty sentence to train on, translate or score; remove those pairs")
    for side in sides:
        if side.first_nul:
            warn(f"{side.path} line {side.first_nul} holds a NUL character ({side.nul} line"
                 f"{'s' if side.nul > 1 else ''} in all): the copy reads it as a space (the tokenizer would delete "
                 "it and join the words around it)")
    if sa.hash.digest() == sb.hash.digest():
        warn(f"--{split}: {a} and {b} hold the same text ({sa.lines} lines), where {b.name} should be the "
             f"translation of {a.name}; is one of them the wrong file?")
    return matched


def _and(items) -> str:
    return " and ".join(", ".join(items).rsplit(", ", 1))


# What a split measures, and what it is made of, for the overlap warnings.
_MEASURES = {"valid": "the validation loss", "test": "the test score"}
_SOURCE = {"train": "the training data", "valid": "the validation data"}


def check_files(files: Dict[str, Path], src: str, tgt: str, errors: str = "strict"):
    """Every split's two files exist, are UTF-8 (attn_kit.textio's policy; ``errors``: its --errors),
    line-aligned (as many lines) and without empty lines; one UserError naming the file (and both
    counts) otherwise. One warning line each (the run goes on) when a split's two files hold the
    same text, when splits are the same files, and when splits share sentence pairs (how many).
    The held-out splits' pairs are kept as digests, and --train is streamed past them."""
    paths = {split: [Path(f"{prefix}.{lang}") for lang in (src, tgt)] for split, prefix in files.items()}
    for split, prefix in files.items():
        for path in paths[split]:
            if not path.is_file():
                raise UserError(f"--{split} {prefix}: {path} not found (expected raw text files {prefix}.{src} and "
                                f"{prefix}.{tgt}, one sentence per line)")
    groups = {}  # splits given the same two files: read once, said once
    for split in files:
        groups.setdefault(tuple(path.resolve() for path in paths[split]), []).append(split)
    for group in groups.values():
        if len(group) > 1:
            measured = [_MEASURES[split] for split in group[1:]]
            warn(f"{_and(f'--{split}' for split in group)} are the same files ({files[group[0]]}.{{{src},{tgt}}}): "
                 f"{_and(measured)} {'are' if len(measured) > 1 else 'is'} measured on {_SOURCE[group[0]]}")
    read = [group[0] for group in groups.values()]
    held, shared = {}, []
    for split in sorted(read, key=lambda s: s == "train"):  # the held-out splits first; --train is large
        pairs = None if split == "train" else Counter()
        matched = _read_split(split, files[split], src, tgt, errors, pairs, dict(held))
        for name, found in matched.items():  # the lines of the held-out split (the one read later, if neither)
            inside = name if split == "train" else split
            count = sum((held[inside] if inside in held else pairs)[digest] for digest in found)
            if count:
                shared.append((inside, name if inside == split else split, count))
        if pairs is not None:
            held[split] = pairs
    for inside, outside, count in shared:
        warn(f"{count} of the {sum(held[inside].values())} sentence pairs of --{inside} are also in --{outside}: "
             f"{_MEASURES[inside]} counts sentences of {_SOURCE[outside]}")


@source("files")
class YourFiles(DataSource):
    """The user's raw text files (--train/--valid/--test PREFIX, PREFIX.SRC and PREFIX.TGT)."""
    fetch_name, extract_name = "check", "copy"

    def description(self, s) -> str:
        return f"your {s.src}-{s.tgt} corpus: {', '.join(f'{k} {v}' for k, v in s.files.items())}"

    def sources(self, s, lay: Layout) -> list:
        return [Path(f"{prefix}.{lang}") for prefix in s.files.values() for lang in (s.src, s.tgt)]

    def train_pairs(self, s) -> Optional[int]:
        train = Path(f"{s.files['train']}.{s.src}")
        return count_lines(train) if train.is_file() else None

    def fetch(self, ctx, s, lay: Layout):
        ctx.step(f"check {', '.join(f'{prefix}.{{{s.src},{s.tgt}}}' for prefix in s.files.values())}: there, "
                 "UTF-8, line counts equal, no empty line", check_files, s.files, s.src, s.tgt, s.errors)

    def extract(self, ctx, s, lay: Layout):
        for split, prefix in s.files.items():
            for lang in (s.src, s.tgt):
                once(ctx, lay.raw / f"{split}.{lang}", f"copy {prefix}.{lang} -> {lay.raw / f'{split}.{lang}'} "
                     "(whitespace normalized)", lambda out, p=f"{prefix}.{lang}": copy_corpus(p, out, s.errors))


PRESETS = ("paper", *config.presets("wmt14"))
# what each preset is for (its settings: presets: in recipes/configs/wmt14.yaml)
PRESET_USES = {"small": "a corpus of roughly 10K-1M sentence pairs on a CPU or one GPU (the bundled run of "
                        "recipes/wmt14_en_de.sh is this preset on the bundled corpus)"}


def preset_help() -> str:
    """--preset's help: what each preset is for and sets, from recipes/configs/wmt14.yaml."""
    words = {"size": lambda v: f"the model {SIZES[v].describe()} (size {v!r})",
             "ngpus": lambda v: f"--ngpus {v}" + (" (CPU)" if v == 0 else ""),
             # fairseq validates at every checkpoint it saves too (fairseq_cli/train.py validate_and_save)
             "validate_interval_updates": lambda v, sets: (
                 f"a validation every {v} updates and at every checkpoint (every "
                 f"{sets['save_interval_updates']} updates)" if sets.get("save_interval_updates") else
                 f"a validation every {v} updates"),
             "log_interval": lambda v: f"a log line every {v} updates",
             "train_flags": lambda v: f"fairseq-train {' '.join(map(str, v))}"}

    def setting(key, v, sets):
        if key == "validate_interval_updates":
            return words[key](v, sets)
        return words[key](v) if key in words else f"--{key.replace('_', '-')} {v}"

    return ("settings for a kind of corpus and machine; options given on the command line win. paper (default): "
            "the paper's model, batch and schedule (a WMT-sized corpus on GPUs; the defaults below). "
            + ". ".join(f"{name}: {PRESET_USES.get(name, '')}; sets "
                        + ", ".join(setting(k, v, sets) for k, v in sets.items())
                        for name, sets in config.presets("wmt14").items()))


def parser() -> argparse.ArgumentParser:
    cfg = config.load("wmt14")
    P, F = config.settings("wmt14", "paper"), config.settings("wmt14", "paper", "files")
    p = ArgumentParser(prog="recipes/parallel.sh", usage=scale.USAGE, description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    options.add(g, "src", "Moses' rules for it: en, de, fr, cs, ...")
    options.add(g, "tgt")
    files = "pairs: raw text files PREFIX.SRC and PREFIX.TGT"
    g.add_argument("--train", type=Path, metavar="PREFIX", help=f"training {files}")
    g.add_argument("--valid", type=Path, metavar="PREFIX", help=f"validation (fairseq's valid loss) {files}")
    g.add_argument("--test", type=Path, metavar="PREFIX", help=f"test (translated and scored at the end) {files}")
    options.add(g, "bpe_merges", f"default {F['bpe_merges']}; fewer for a small corpus")
    add_errors_option(g)
    translation.add_workers_option(g)
    translation.add_bpe_learn_option(g, F)
    translation.add_clean_option(g, F)
    translation.add_data_workdir_option(g, "the work directory: the corpus is yours, so its prepared copy is shared only "
                                     "where you say, e.g. by the runs of two --arch")
    settings.add_run_options(p, "runs/parallel_<src>_<tgt>_<arch>")
    options.add(p, "arch", f"registered by attn_plugin: {', '.join(PLUGIN_ARCHS)}; default attn_paper_base; "
                           "--layers, --d-model, --d-ff, --h, --p-drop resize it", default="attn_paper_base")
    p.add_argument("--preset", default="paper", choices=PRESETS, help=preset_help())
    translation.add_training_options(p, cfg, P, {}, resize="resize --arch: ", small_model="--preset small's model")
    return p


def check_given(given):
    """The options only this recipe has: the corpus, its languages, the arch."""
    for option in ("src", "tgt", "train", "valid", "test"):
        if not getattr(given, option):
            raise UsageError(f"give --{option}: recipes/parallel.sh --src en --tgt de --train PREFIX --valid PREFIX "
                             "--test PREFIX (raw text files PREFIX.en and PREFIX.de)")
    if given.src == given.tgt:
        raise UsageError(f"--src and --tgt are both {given.src!r}")
    check_language("--src", given.src)
    check_language("--tgt", given.tgt)
    if given.arch not in PLUGIN_ARCHS:
        raise UsageError(f"unknown --arch {given.arch!r}; attn_plugin registers: {', '.join(PLUGIN_ARCHS)}")


def build(argv=None) -> translation.TranslationSettings:
    """The run's settings: the command line over ``files:``, the arch's and the preset's YAML sections."""
    given = scale.parse(parser(), argv)
    check_given(given)
    short = given.arch.replace("attn_paper_", "")
    if given.preset != "paper":
        short = given.preset if short == "base" else f"{short}_{given.preset}"
    workdir = (given.workdir or REPO / "runs" / f"parallel_{given.src}_{given.tgt}_{short}").resolve()
    data_workdir, data_home = translation.data_folders(given.data_workdir, workdir, None)
    arch = given.arch if given.arch in config.load("wmt14")["archs"] else "attn_paper_base"
    yaml = config.settings("wmt14", "paper", f"archs.{arch}", "files",
                           None if given.preset == "paper" else f"presets.{given.preset}")
    return settings.compose(translation.TranslationSettings, given, yaml, lambda v: dict(
        pair=f"{given.src}-{given.tgt}", mode="files", source=YourFiles(), workdir=workdir,
        data_workdir=data_workdir, data_home=data_home,
        files={split: getattr(given, split).expanduser().resolve() for split in SPLITS},
        size=model_size(yaml, translation.size_overrides(given), given.arch),
        recipe_module="attn_kit.recipes.parallel"))


parse_args = build  # the name callers used before the settings were typed


def main(argv=None):
    s = build(argv)
    scale.run(s, translation.stages, canary.report if s.canary else translation.report)  # a canary's results: canary.json


if __name__ == "__main__":
    main_guard(main, interrupted="interrupted; finished stages are kept, run the same command again to resume")
