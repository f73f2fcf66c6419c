"""WMT14's data sources (:mod:`attn_kit.recipes.sources`): the WMT14 download and the bundled corpus
(the smoke mirror is in wmt14_smoke, your files in parallel), and what WMT14 downloads.

Sizes and sha256 of the training archives are the values published with TensorFlow Datasets'
WMT14 builder (``url_checksums/wmt14_translate.txt``), and for the UN corpus and the 10^9
French-English corpus, which that builder does not download, with its WMT15 builder, which downloads
the same two archives from the same addresses (``url_checksums/wmt15_translate.txt``); the md5 of the
two test archives are the ones sacreBLEU checks. An archive without a published checksum (a mirror's
other file) gets its sha256 recorded at its first download and checked at every later download and
read (attn_kit.pipeline.download).
"""
import lzma
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..checkout import REPO
from ..cli import UserError, log
from ..pipeline.download import RemoteFile, check_download, fetch, measured_rate, mirror_url, sha256_of, shown
from ..pipeline.text import concatenate, extract_members, read_sgm, write_lines
from ..planning.prep_cost import Fetch, download_rate, recipe_lines
from .sources import SPLITS, DataSource, Layout, once, source

STATMT = "http://www.statmt.org"

FILES: Dict[str, RemoteFile] = {
    "europarl": RemoteFile(
        "training-parallel-europarl-v7.tgz", f"{STATMT}/wmt13/training-parallel-europarl-v7.tgz",
        size=657632379, sha256="0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
        note="Europarl v7"),
    "commoncrawl": RemoteFile(
        "training-parallel-commoncrawl.tgz", f"{STATMT}/wmt13/training-parallel-commoncrawl.tgz",
        size=918311367, sha256="c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
        note="Common Crawl"),
    "news_commentary": RemoteFile(
        "training-parallel-nc-v9.tgz", f"{STATMT}/wmt14/training-parallel-nc-v9.tgz",
        size=80418416, sha256="cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485",
        note="News Commentary v9"),
    "un": RemoteFile(
        "training-parallel-un.tgz", f"{STATMT}/wmt13/training-parallel-un.tgz",
        size=2365634246, sha256="29141b5c1eba149a94f7a59d3b1a834b2e47fe0f8758d68dcd77a3d3f497ee47",
        note="UN corpus (checksum published with TFDS's WMT15)"),
    "giga_fren": RemoteFile(
        "training-giga-fren.tar", f"{STATMT}/wmt10/training-giga-fren.tar",
        size=2595102720, sha256="3ff8319f6919393520559bfbc7ad6a747ec81b3abc7be9993b338d4b017b4d9a",
        note="10^9 French-English corpus (checksum published with TFDS's WMT15)"),
    "dev": RemoteFile("wmt13-test.tgz", f"{STATMT}/wmt13/test.tgz", md5="48eca5d02f637af44e85186847141f67",
                      note="newstest2013 (dev)"),
    "test": RemoteFile("test-full.tgz", f"{STATMT}/wmt14/test-full.tgz", md5="a8cd784e006feb32ac6f3d9ec7eb389a",
                       note="newstest2014, full 3003-sentence version (test)"),
}

# The bundled Tatoeba EN-DE splits (made by scripts/make_bundled_data.py), checked before use.
BUNDLED: Dict[str, RemoteFile] = {
    "train": RemoteFile("train.en-de.tsv.xz", "", size=2790748,
                        sha256="cc60a89d5692298ede429a62b4fac01c3ea24885ec0b8600aed226cbd9f3cf50"),
    "valid": RemoteFile("valid.en-de.tsv.xz", "", size=25560,
                        sha256="a9dad73186e62a627fbae9461a55a5543488a60f3cf4580a6599705760227b0a"),
    "test": RemoteFile("test.en-de.tsv.xz", "", size=47684,
                       sha256="f05058245f05eb1eca7b9299676881c941eb9746781b705a5c7878582aba0926"),
}


@dataclass
class Pair:
    src: str
    tgt: str
    train: List[Tuple[str, str, str]]  # (FILES key, English member, foreign member)
    dev: Tuple[str, str]               # members of FILES["dev"]
    test: Tuple[str, str]              # members of FILES["test"]
    bpe_merges: int                    # joint BPE merges for the paper's vocabulary size
    paper_vocab: int
    train_pairs: int                   # training pairs, about (the paper, Sec. 5.1): for planning
    words_per_pair: float              # whitespace words per training pair, both sides, about: for planning


# The training and test splits' text, both sides, (bytes, pairs), in Hugging Face copies whose splits are
# stored alike: en-de huggingface.co/datasets/wmt/wmt14 (de-en), en-fr huggingface.co/datasets/manu/wmt-en-fr.
# The training text is what the extract stage unpacks (the disk it takes, before the text is there).
HF_TRAIN_SPLIT = {"de": (1_358_406_800, 4_508_785), "fr": (14_956_705_827, 40_836_715)}
HF_NEWSTEST2014_SPLIT = {"de": (777_326, 3003), "fr": (853_864, 3003)}
# Words per training pair (both sides, whitespace-separated), for projecting the data stages before the
# corpus is extracted: newstest2014's own words per pair (counted on its plain text) times how much longer
# a training pair is than a newstest2014 pair in bytes. Assumed: as much longer in words as in bytes.
NEWSTEST2014_WORDS_PER_PAIR = {"de": 38.025, "fr": 43.946}
NEWSTEST2014_BYTES_PER_WORD = {"de": 6.65, "fr": 6.22}  # UTF-8 bytes per word, newlines included (counted)
TRAIN_TO_NEWSTEST_BYTES = {f: (HF_TRAIN_SPLIT[f][0] / HF_TRAIN_SPLIT[f][1])
                           / (HF_NEWSTEST2014_SPLIT[f][0] / HF_NEWSTEST2014_SPLIT[f][1]) for f in HF_TRAIN_SPLIT}
# The test archives' sizes are not published (sacreBLEU publishes their md5 only): for the dry run's
# download time and disk, estimated from their SGML files, ~0.45 MB each, which tar and gzip make about
# 0.35 of (newstest2014's eight de-en and fr-en files, tgz'd); immaterial beside the training archives.
ESTIMATED_SIZES = {"dev": (1_900_000, "newstest2013's ~12 SGML files, gzipped"),
                   "test": (3_300_000, "newstest2014's 20 SGML files, five pairs, gzipped")}


def _pair(f: str, corpora: List[str]) -> Pair:
    members = {
        "europarl": (f"training/europarl-v7.{f}-en.en", f"training/europarl-v7.{f}-en.{f}"),
        "commoncrawl": (f"commoncrawl.{f}-en.en", f"commoncrawl.{f}-en.{f}"),
        "news_commentary": (f"training/news-commentary-v9.{f}-en.en", f"training/news-commentary-v9.{f}-en.{f}"),
        "un": (f"un/undoc.2000.{f}-en.en", f"un/undoc.2000.{f}-en.{f}"),
        "giga_fren": ("giga-fren.release2.fixed.en.gz", f"giga-fren.release2.fixed.{f}.gz"),
    }
    return Pair(
        src="en", tgt=f,
        train=[(c, *members[c]) for c in corpora],
        dev=("test/newstest2013-src.en.sgm", f"test/newstest2013-src.{f}.sgm"),
        test=(f"test-full/newstest2014-{f}en-src.en.sgm", f"test-full/newstest2014-{f}en-ref.{f}.sgm"),
        # A joint BPE with M merges gives a dictionary of about M + a few thousand
        # characters and rare pieces; these aim at the paper's ~37000 (EN-DE) and
        # 32000 (EN-FR) shared tokens. The binarize stage reports the real size.
        bpe_merges=35000 if f == "de" else 30000,
        paper_vocab=37000 if f == "de" else 32000,
        train_pairs=4_500_000 if f == "de" else 36_000_000,
        words_per_pair=NEWSTEST2014_WORDS_PER_PAIR[f] * TRAIN_TO_NEWSTEST_BYTES[f],
    )


PAIRS = {
    "en-de": _pair("de", ["europarl", "commoncrawl", "news_commentary"]),
    "en-fr": _pair("fr", ["europarl", "commoncrawl", "news_commentary", "un", "giga_fren"]),
}


def files_for(pair: str) -> List[str]:
    """FILES keys a pair needs, in download order (small test sets first)."""
    p = PAIRS[pair]
    return ["dev", "test"] + [key for key, _, _ in p.train]


# ---------------------------------------------------------------------------------------------- a run's folders
BUNDLED_DATA = REPO / "data" / "tatoeba-en-de"


def dl_path(lay: Layout, key: str) -> Path:
    return lay.dl / FILES[key].name


@source("wmt14")
class Wmt14Download(DataSource):
    """WMT14 from statmt.org (or --mirror): the pair's training corpora, newstest2013 and newstest2014."""
    paper_data = True
    shared_data = True

    def downloads(self, s, lay: Layout) -> List[Path]:
        return [dl_path(lay, key) for key in files_for(s.pair)]

    def options(self, s) -> dict:
        return {"data": s.data, "files": files_for(s.pair)}

    def paper_vocab(self, s) -> Optional[int]:
        return PAIRS[s.pair].paper_vocab

    def description(self, s) -> str:
        return f"WMT14 {s.pair} corpora, newstest2013 and newstest2014"

    def notes(self, s) -> List[str]:
        pair, lay = PAIRS[s.pair], Layout.of(s)
        extracted = [lay.raw / f"train.{lang}" for lang in (s.src, s.tgt)]
        if all(path.is_file() for path in extracted):  # its size in words, from its size in bytes (no reading)
            words = sum(path.stat().st_size for path in extracted) / NEWSTEST2014_BYTES_PER_WORD[pair.tgt]
            return recipe_lines(s.pair, pair.train_pairs, s.workers, s.bpe_learn_pairs, words_per_pair=(
                words / pair.train_pairs, f"~{words / 1e6:.0f}M words, from the size of {lay.raw}/train.*"),
                counted=True, fetch=fetch_plan(s, lay))
        return recipe_lines(s.pair, pair.train_pairs, s.workers, s.bpe_learn_pairs, words_per_pair=(
            pair.words_per_pair, "WMT14's training text, longer per pair than news by its bytes per pair against "
            "newstest2014's, attn_kit.recipes.wmt14_data; after the extract stage, from its size"),
            fetch=fetch_plan(s, lay))

    def train_pairs(self, s) -> Optional[int]:
        return PAIRS[s.pair].train_pairs

    def manifest(self, ctx, s, lay: Layout):
        """(the files by key, the mirror to fetch them from, a function that stops serving it or None)."""
        return dict(FILES), s.mirror, None

    def fetch(self, ctx, s, lay: Layout):
        manifest, mirror, stop = self.manifest(ctx, s, lay)
        try:
            for key in files_for(s.pair):
                rf = manifest[key]
                checks = ", ".join(f"{k} {getattr(rf, k)}" for k in ("size", "sha256", "md5") if getattr(rf, k))
                ctx.step(f"fetch {shown(mirror_url(rf.url, mirror))} -> {lay.dl / rf.name} "
                         f"({checks or 'no published checksum'})", fetch, rf, lay.dl, mirror, log)
        finally:
            if stop:
                stop()

    def extract(self, ctx, s, lay: Layout):
        """The training corpora as text, the test sets' sgm as text; each archive read once."""
        pair, src, tgt, orig, raw = PAIRS[s.pair], s.src, s.tgt, lay.orig, lay.raw

        def unpack(key, wanted):
            if all(p.exists() for p in wanted.values()) and not ctx.dry_run:
                print(f"  # extract from {FILES[key].name}: done already", flush=True)
                return
            # read only once its sha256 is checked again (a file changed since its download is one line)
            published = FILES[key] if self.paper_data else None  # the smoke archives have their own
            ctx.step(f"check {FILES[key].name}'s sha256 against its download's record"
                     + (" and the published checksum" if published else ""), check_download, dl_path(lay, key),
                     published, log)
            ctx.step(f"extract {', '.join(wanted)} from {FILES[key].name}", extract_members, dl_path(lay, key), wanted)

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


def fetch_plan(s, lay: Layout) -> Fetch:
    """The download and extract stages' work for the dry run's projection (attn_kit.planning.prep_cost):
    the pair's archives with their sizes (published, else estimated), the training text they unpack to
    (its size once extracted, else Hugging Face's copy's), the download rate (--download-mbps where the
    recipe has it, else measured by earlier downloads in the data folder, else assumed), the data folder's
    bytes now."""
    f = PAIRS[s.pair].tgt
    archives = []
    for key in files_for(s.pair):
        rf = FILES[key]
        size, why = (rf.size, "") if rf.size else ESTIMATED_SIZES[key]
        archives.append((rf.name, size, "tar_of_gz" if rf.name.endswith(".tar") else "tgz", why))
    hf_bytes, hf_pairs = HF_TRAIN_SPLIT[f]
    extracted = [lay.raw / f"train.{lang}" for lang in (s.src, s.tgt)]
    if all(path.is_file() for path in extracted):
        text = sum(path.stat().st_size for path in extracted)
        basis = f"text {text / 1e9:.2f} GB, the size of {lay.raw}/train.*"
    else:
        text, basis = hf_bytes, f"text {hf_bytes / 1e9:.2f} GB in {hf_pairs} pairs, as Hugging Face's copy stores it"
    rate = download_rate(measured_rate(lay.dl), where=str(lay.dl / ".verified"))
    return Fetch(s.pair, archives, text, round(text * hf_pairs / hf_bytes), basis, *rate, clean=s.clean,
                 folder=str(lay.D), on_disk=folder_bytes(lay.D))


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under ``folder`` (0 where there is none)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # gone while counting
                pass
    return total


@source("bundled")
class Bundled(DataSource):
    """The repo's Tatoeba EN-DE corpus (data/tatoeba-en-de), checked against its committed sha256."""
    model_word = "small"

    def description(self, s) -> str:
        return f"bundled Tatoeba EN-DE ({BUNDLED_DATA})"

    def sources(self, s, lay: Layout) -> List[Path]:
        return [BUNDLED_DATA / rf.name for rf in BUNDLED.values()]

    def options(self, s) -> dict:  # as every bundled run so far recorded it (a changed value would redo the stage)
        return {"data": s.data, "files": files_for(s.pair)}

    def train_pairs(self, s) -> Optional[int]:
        with lzma.open(BUNDLED_DATA / BUNDLED["train"].name, "rb") as f:
            return sum(1 for _ in f)

    def fetch(self, ctx, s, lay: Layout):
        ctx.step(f"check the bundled Tatoeba EN-DE files in {BUNDLED_DATA} (sizes, sha256)", check_bundled,
                 BUNDLED_DATA)

    def extract(self, ctx, s, lay: Layout):
        with ctx.output(lay.raw) as tmp:
            ctx.step(f"extract {BUNDLED_DATA}/*.tsv.xz into {lay.raw}", lambda: (
                tmp.mkdir(parents=True), extract_bundled(BUNDLED_DATA, tmp, s.src, s.tgt)))


def check_bundled(folder: Path):
    """The bundled splits are there and intact (sizes and sha256 as committed)."""
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
