"""What the WMT14 recipes download, and where each corpus sits inside its archive;
and the bundled EN-DE corpus the --bundled mode reads instead (data/tatoeba-en-de).

Sizes and sha256 of the training archives are the values published with
TensorFlow Datasets' WMT14 builder (``url_checksums/wmt14_translate.txt``); the
md5 of the two test archives are the ones sacreBLEU checks. The UN corpus and
the 10^9 French-English corpus have no published checksum: the first download
records its sha256 and later runs check against it (the log says so).
"""
from dataclasses import dataclass
from typing import Dict, List, Tuple

from attn_kit.pipeline.download import RemoteFile

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
    "un": RemoteFile("training-parallel-un.tgz", f"{STATMT}/wmt13/training-parallel-un.tgz",
                     note="UN corpus (no published checksum)"),
    "giga_fren": RemoteFile("training-giga-fren.tar", f"{STATMT}/wmt10/training-giga-fren.tar",
                            note="10^9 French-English corpus (no published checksum)"),
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
    )


PAIRS = {
    "en-de": _pair("de", ["europarl", "commoncrawl", "news_commentary"]),
    "en-fr": _pair("fr", ["europarl", "commoncrawl", "news_commentary", "un", "giga_fren"]),
}


def files_for(pair: str) -> List[str]:
    """FILES keys a pair needs, in download order (small test sets first)."""
    p = PAIRS[pair]
    return ["dev", "test"] + [key for key, _, _ in p.train]
