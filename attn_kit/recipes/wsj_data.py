"""Where the WSJ recipe's trees come from (Sec. 6.3): :class:`Treebank`, WSJ sections of your Penn Treebank
(``--ptb``) or of the repo's hand-written trees (``--smoke``: data/wsj-smoke); :class:`SilverTrees`, a treebank
with silver trees added to training (``--extra-trees``). :func:`prepare_data` writes any source's splits."""
import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from ..checkout import REPO
from ..cli import UserError, log
from ..metrics.trees import Tree, TreeError, gold_tree, linearize, read_mrg, read_tree_lines, strip_tree

SMOKE_PTB = REPO / "data" / "wsj-smoke"
LDC = "Treebank-3 (LDC99T42), licensed from the Linguistic Data Consortium: https://catalog.ldc.upenn.edu/LDC99T42"
SPLITS = ("train", "valid", "test")
SRC, TGT = "words", "tree"


def section_list(spec: str) -> List[str]:
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


def find_wsj(ptb: Optional[Path], sections) -> Path:
    """The folder of ``ptb`` holding the section folders NN/, checked to hold every section the recipe needs."""
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


@dataclass
class Trees:
    """An opened data source: ``stats`` (what it read from), ``trees(split)``, ``extra()`` (stats known once read)."""
    stats: dict
    trees: Callable[[str], Iterator[Tree]]
    extra: Callable[[], dict] = dict


@dataclass(frozen=True)
class Treebank:
    """WSJ sections of a Penn Treebank folder; ``specs``: the train, dev and test lists ("02-21", "22", "23")."""
    ptb: Optional[Path]
    specs: Tuple[str, str, str]

    @property
    def sections(self) -> Dict[str, List[str]]:
        return dict(zip(SPLITS, map(section_list, self.specs)))

    @property
    def inputs(self) -> List[Path]:
        return [self.ptb] if self.ptb else []

    def describe(self) -> str:
        train, dev, test = self.specs
        where = self.ptb or "PTB_DIR (give --ptb)"
        return f"read {where}/parsed/mrg/wsj sections train {train}, dev {dev}, test {test}"

    def open(self) -> Trees:
        sections = self.sections
        wsj = find_wsj(self.ptb, sorted({s for v in sections.values() for s in v}))

        def trees(split):
            for s in sections[split]:
                for path in sorted((wsj / s).glob("*.mrg")):
                    yield from read_mrg(path)

        return Trees({"ptb": str(wsj), "sections": {k: f"{v[0]}-{v[-1]}" if len(v) > 1 else v[0]
                                                    for k, v in sections.items()}}, trees)


@dataclass(frozen=True)
class SilverTrees:
    """--extra-trees FILE: a treebank with FILE's trees (one bracketed tree per line) added to training."""
    treebank: Treebank
    extra_trees: Path

    @property
    def sections(self) -> Dict[str, List[str]]:
        return self.treebank.sections

    @property
    def inputs(self) -> List[Path]:
        return [*self.treebank.inputs, self.extra_trees]

    def describe(self) -> str:
        return f"{self.treebank.describe()}; add {self.extra_trees} to training"

    def open(self) -> Trees:
        gold = self.treebank.open()
        if not self.extra_trees.is_file():
            raise UserError(f"--extra-trees {self.extra_trees}: no such file (expected silver trees, one bracketed "
                            "tree per line)")
        count = [0]

        def trees(split):
            yield from gold.trees(split)
            if split == "train":
                for tree in read_tree_lines(self.extra_trees):
                    count[0] += 1
                    yield tree

        return Trees(gold.stats, trees, lambda: {"extra_trees": count[0]})


def write_split(out: Path, split: str, trees, pos_tags: str, gold: bool) -> Tuple[int, int]:
    """Strip and linearize ``trees`` into ``out``/SPLIT.{words,tree,tags} (and ``.gold``, the treebank's trees for
    EVALB); (trees written, trees left empty by stripping)."""
    n = skipped = 0
    names = [SRC, TGT, "tags"] + (["gold"] if gold else [])
    with contextlib.ExitStack() as stack:
        files = {k: stack.enter_context(open(out / f"{split}.{k}", "w", encoding="utf-8", errors="surrogateescape"))
                 for k in names}
        for tree in trees:
            stripped = strip_tree(tree)
            if stripped is None:  # nothing but empty elements
                skipped += 1
                continue
            files[SRC].write(" ".join(stripped.words()) + "\n")
            files[TGT].write(" ".join(linearize(stripped, pos_tags)) + "\n")
            files["tags"].write(" ".join(stripped.tags()) + "\n")
            if gold:
                files["gold"].write(str(gold_tree(tree)) + "\n")
            n += 1
    return n, skipped


def prepare_data(source, pos_tags: str, out: Path):
    """``source``'s splits stripped and linearized (:func:`write_split`), and stats.json: where from, how many."""
    found = source.open()
    out.mkdir(parents=True, exist_ok=True)
    stats = {**found.stats, "pos_tags": pos_tags}
    try:
        for split in SPLITS:
            n, skipped = write_split(out, split, found.trees(split), pos_tags, gold=split != "train")
            stats[f"{split}_trees"] = n
            if skipped:
                stats[f"{split}_skipped_empty"] = skipped
            if n == 0:
                raise UserError(f"no trees in sections {', '.join(source.sections[split])} of {stats['ptb']}")
        stats.update(found.extra())
    except TreeError as exc:
        raise UserError(f"malformed tree: {exc}") from None
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    log("trees: " + ", ".join(f"{k} {stats[f'{k}_trees']}" for k in SPLITS)
        + (f" (of which {stats['extra_trees']} extra)" if "extra_trees" in stats else ""))
