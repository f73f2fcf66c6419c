"""The translation recipe's data-source interface: a run's folders (:class:`Layout`), the sources
behind its first two stages (:class:`DataSource`, registered by name with :func:`source`: a YAML
section's ``data:`` selects one), and :func:`once` for their resumable steps. The sources: the WMT14
download and the bundled corpus (wmt14_data), the smoke mirror (wmt14_smoke), your files (parallel);
a corpus of your own is one module with one more (docs/architecture.md)."""
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class Layout:
    """Where a run's files go: the data stages' in the data folder ``D`` (--data-workdir), the
    training and evaluation's in the work directory ``W``."""
    W: Path
    D: Path
    src: str
    tgt: str
    clean: bool  # clean-corpus-n after BPE: the binarize stage reads prep/, else bpe/

    @classmethod
    def of(cls, s) -> "Layout":
        return cls(s.workdir, s.data_workdir, s.src, s.tgt, s.clean)

    dl = property(lambda self: self.D / "downloads")
    orig = property(lambda self: self.D / "orig")
    raw = property(lambda self: self.D / "raw")
    tok = property(lambda self: self.D / "tok")
    bpe = property(lambda self: self.D / "bpe")
    prep = property(lambda self: self.D / "prep")
    data_bin = property(lambda self: self.D / "data-bin")
    ckpt = property(lambda self: self.W / "checkpoints")
    avg = property(lambda self: self.W / "checkpoint_avg.pt")
    gen = property(lambda self: self.W / "gen" / "test.out")

    @property
    def texts(self) -> List[str]:
        """The text files of every split and side: train.en, train.de, valid.en, ..."""
        return [f"{split}.{lang}" for split in SPLITS for lang in (self.src, self.tgt)]

    @property
    def binarize_from(self) -> Path:
        return self.prep if self.clean else self.bpe

    def pairs(self, folder: Path) -> List[Tuple[Path, Path]]:
        """(source, target) text files of every split in ``folder``, for the line-count checks."""
        return [(folder / f"{split}.{self.src}", folder / f"{split}.{self.tgt}") for split in SPLITS]


def once(ctx, path: Path, description: str, fn, *args):
    """A step whose output ``path`` is kept between runs: skipped when ``path`` exists,
    so that a stage killed half-way redoes only its unfinished steps."""
    if path.exists() and not ctx.dry_run:
        print(f"  # {description}: done already", flush=True)
        return
    with ctx.output(path) as tmp:
        ctx.step(description, fn, *args, tmp)


# ---------------------------------------------------------------------------------------------- data sources
SOURCES: Dict[str, "DataSource"] = {}  # by the name a YAML section's data: gives


def source(name: str):
    """Register a DataSource class as the source ``data: name`` selects (one instance: stateless)."""
    def register(cls):
        SOURCES[name] = cls()
        return cls
    return register


class DataSource:
    """Where a run's text comes from, behind the first two stages: ``fetch`` gets or checks it,
    ``extract`` writes one raw text file per split and side (``Layout.raw``); and what the recipe
    asks of the data instead of naming its mode. Stateless: each method takes the run's settings
    ``s`` and folders ``lay``. The defaults are a corpus of the user's own, not the paper's."""
    fetch_name, extract_name = "download", "extract"
    paper_data = False  # the paper's own data: its test set (newstest2014), comparable with Table 2
    model_word = "resized"  # how the train stage names a model resized from its arch for this data
    shared_data = False  # whether its data stages run in a folder of their own beside the work directory

    def description(self, s) -> str:
        raise NotImplementedError

    def downloads(self, s, lay: Layout) -> List[Path]:
        """What ``fetch`` writes (none: it only checks)."""
        return []

    def sources(self, s, lay: Layout) -> List[Path]:
        """What ``extract`` reads."""
        return self.downloads(s, lay)

    def options(self, s) -> dict:
        """The fetch stage's options (a change runs it again)."""
        return {"data": s.data, "files": []}

    def paper_vocab(self, s) -> Optional[int]:
        """The paper's dictionary size for this data, for the binarize stage's log (None: not the paper's)."""
        return None

    def notes(self, s) -> List[str]:
        """Lines --dry-run prints before tokenizing (what preparing this data costs)."""
        return []

    def train_pairs(self, s) -> Optional[int]:
        """The training pairs, before any stage has run (None: not known until the text is there)."""
        return None

    def fetch(self, ctx, s, lay: Layout):
        raise NotImplementedError

    def extract(self, ctx, s, lay: Layout):
        raise NotImplementedError
