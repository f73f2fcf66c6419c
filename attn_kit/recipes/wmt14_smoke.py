"""Tiny stand-ins for the WMT14 downloads, for ``--smoke``.

Every archive the real recipe downloads is rebuilt here with the same file
name, URL path and member layout (``training/europarl-v7.de-en.de``,
``test-full/newstest2014-deen-src.en.sgm`` in WMT's SGML, the gzipped
giga-fren members, ...), filled with a few hundred real sentence pairs that
ship with the repo (Tatoeba, CC-BY). ``--smoke`` serves them from a local HTTP
mirror on 127.0.0.1 and runs the real download code against it, with the
smoke archives' own sizes and sha256 in place of the published ones.
"""
import gzip
import lzma
from pathlib import Path
from typing import Dict, List, Tuple
from urllib.parse import urlparse

from attn_kit.pipeline.download import RemoteFile, sha256_of
from attn_kit.pipeline.mirror import make_tar, serve
from .wmt14_data import FILES, PAIRS, Wmt14Download, files_for
from .sources import Layout, source
from ..checkout import REPO

SAMPLES = {"de": REPO / "data" / "tatoeba-en-de", "fr": REPO / "data" / "tatoeba-en-fr-sample"}
TRAIN_PAIRS, DEV_PAIRS, TEST_PAIRS = 2400, 200, 200


def read_sample(lang: str, split: str, limit: int) -> List[Tuple[str, str]]:
    """The first ``limit`` (English, other) pairs of a split of the repo's Tatoeba sample of ``lang``."""
    path = SAMPLES[lang] / f"{split}.en-{lang}.tsv.xz"
    pairs = []
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            en, other = line.rstrip("\n").split("\t")
            pairs.append((en, other))
            if len(pairs) == limit:
                break
    return pairs


def sgm(lines: List[str], setid: str, lang: str, ref: bool, docs: int = 3) -> bytes:
    """WMT's SGML layout: a srcset/refset of documents holding numbered segments."""
    head = (f'<refset trglang="{lang}" setid="{setid}" srclang="any">' if ref
            else f'<srcset setid="{setid}" srclang="any">')
    out = [head]
    per_doc = -(-len(lines) // docs)
    for d in range(docs):
        chunk = lines[d * per_doc:(d + 1) * per_doc]
        if not chunk:
            break
        sysid = ' sysid="ref"' if ref else ""
        out.append(f'<doc{sysid} docid="smoke-{d + 1}" genre="news" origlang="en">')
        out += [f'<seg id="{i}">{text}</seg>' for i, text in enumerate(chunk, 1)]
        out.append("</doc>")
    out.append("</refset>" if ref else "</srcset>")
    return ("\n".join(out) + "\n").encode("utf-8")


def _text(lines) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")


def build_mirror(root: Path, pair: str) -> Dict[str, RemoteFile]:
    """Write the smoke archives for ``pair`` under ``root`` (at their URL paths)
    and return the manifest with the smoke files' sizes and sha256."""
    p = PAIRS[pair]
    f = p.tgt
    train = read_sample(f, "train", TRAIN_PAIRS)
    dev = read_sample(f, "valid", DEV_PAIRS)
    test = read_sample(f, "test", TEST_PAIRS)
    # Training pairs are spread over the pair's corpora, as in the real data.
    corpora = [key for key, _, _ in p.train]
    shares = {key: train[i::len(corpora)] for i, key in enumerate(corpora)}
    members: Dict[str, Dict[str, bytes]] = {key: {} for key in files_for(pair)}
    for key, en_member, f_member in p.train:
        en, other = [e for e, _ in shares[key]], [o for _, o in shares[key]]
        gz = en_member.endswith(".gz")
        members[key][en_member] = gzip.compress(_text(en), mtime=0) if gz else _text(en)
        members[key][f_member] = gzip.compress(_text(other), mtime=0) if gz else _text(other)
    members["dev"][p.dev[0]] = sgm([e for e, _ in dev], "newstest2013", "en", ref=False)
    members["dev"][p.dev[1]] = sgm([o for _, o in dev], "newstest2013", f, ref=False)
    members["test"][p.test[0]] = sgm([e for e, _ in test], "newstest2014", "en", ref=False)
    members["test"][p.test[1]] = sgm([o for _, o in test], "newstest2014", f, ref=True)

    manifest = {}
    for key, files in members.items():
        real = FILES[key]
        out = root / urlparse(real.url).path.lstrip("/")
        out.parent.mkdir(parents=True, exist_ok=True)
        make_tar(out, files, gz=real.name.endswith(".tgz"))
        manifest[key] = RemoteFile(real.name, real.url, size=out.stat().st_size, sha256=sha256_of(out),
                                   note=f"{real.note} (smoke stand-in)")
    return manifest


@source("smoke-mirror")
class SmokeMirror(Wmt14Download):
    """--smoke: the WMT14 download code against the smoke archives, built here and served on
    127.0.0.1 (or from a --mirror of them, checked against the ones built here)."""
    paper_data = False  # WMT14's layout, not its text
    shared_data = False
    model_word = "tiny"

    def description(self, s) -> str:
        return super().description(s) + " (smoke archives, local mirror)"

    def notes(self, s) -> list:
        return []

    def train_pairs(self, s) -> int:
        return TRAIN_PAIRS

    def manifest(self, ctx, s, lay: Layout):
        manifest, mirror, stop = dict(FILES), s.mirror, None
        if not mirror:
            ctx.step(f"build the smoke archives in {lay.D / 'mirror'} and serve them on 127.0.0.1", lambda: None)
            if not ctx.dry_run:
                manifest.update(build_mirror(lay.D / "mirror", s.pair))
                mirror, stop = serve(lay.D / "mirror")
        elif not ctx.dry_run:  # a user-given mirror of smoke archives: their checksums come from ours
            manifest.update(build_mirror(lay.D / "mirror-expected", s.pair))
        return manifest, mirror, stop
