"""A corpus of its own is one source module and one config section (issue 39, item 1): an IWSLT-style
DE-EN corpus (tab-separated files, German first) is registered by a module written here, selected
with ``--corpus`` through a section of its own in a copy of recipes/configs/wmt14.yaml, and runs
every stage of the translation recipe, from checking its files to the score, with its own pair and
defaults; nothing in the kit names it."""
import json
import lzma

import pytest
from conftest import REPO, run_main

from attn_kit.recipes import config, translation

MODULE = '''
from pathlib import Path

from attn_kit.recipes.sources import SPLITS, DataSource, once, source

HOME = Path(__file__).parent / "iwslt"


@source("iwslt-like")
class IwsltLike(DataSource):
    """IWSLT-style files: HOME/{train,valid,test}.tsv, German TAB English per line."""
    fetch_name, extract_name = "check", "copy"

    def description(self, s):
        return f"IWSLT-style DE-EN files in {HOME}"

    def sources(self, s, lay):
        return [HOME / f"{split}.tsv" for split in SPLITS]

    def train_pairs(self, s):
        return sum(1 for _ in open(HOME / "train.tsv", encoding="utf-8"))

    def fetch(self, ctx, s, lay):
        ctx.step(f"check {HOME}/*.tsv", lambda: [p.stat() for p in self.sources(s, lay)])

    def extract(self, ctx, s, lay):
        for split in SPLITS:
            rows = [line.rstrip("\\n").split("\\t") for line in open(HOME / f"{split}.tsv", encoding="utf-8")]
            for column, lang in enumerate(("de", "en")):
                once(ctx, lay.raw / f"{split}.{lang}", f"{split}.tsv column {column + 1} -> {lang}",
                     lambda out, c=column: out.write_text("".join(r[c] + "\\n" for r in rows), encoding="utf-8"))
'''

SECTION = '''
iwslt_like:
  data: iwslt-like
  source_module: iwslt_like
  pair: de-en
  size: smoke
  ngpus: 0
  threads: 1
  tokens_per_update: 1000
  max_tokens_per_gpu: 1000
  max_update: 20
  warmup_updates: 10
  lr_scale: 2.0
  save_interval_updates: 10
  average: 2
  bpe_merges: 300
  log_interval: 10
'''


@pytest.fixture
def iwslt_corpus(tmp_path, monkeypatch):
    """The module, its files (Tatoeba's pairs turned around: German first) and the config section."""
    (tmp_path / "iwslt_like.py").write_text(MODULE)
    home = tmp_path / "iwslt"
    home.mkdir()
    with lzma.open(REPO / "data" / "tatoeba-en-de" / "train.en-de.tsv.xz", "rt", encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t") for _, line in zip(range(700), f)]
    for split, rows in (("train", pairs[:600]), ("valid", pairs[600:650]), ("test", pairs[650:])):
        (home / f"{split}.tsv").write_text("".join(f"{de}\t{en}\n" for en, de in rows), encoding="utf-8")
    configs = tmp_path / "configs"
    configs.mkdir()
    for path in (REPO / "recipes" / "configs").glob("*.yaml"):
        (configs / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    with open(configs / "wmt14.yaml", "a", encoding="utf-8") as f:
        f.write(SECTION)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(config, "CONFIG_DIR", configs)
    config.load.cache_clear()
    yield tmp_path
    config.load.cache_clear()


@pytest.mark.slow
def test_a_corpus_of_its_own_is_a_source_module_and_a_config_section(iwslt_corpus, tmp_path):
    s = translation.build(["--corpus", "iwslt_like", "--workdir", str(tmp_path / "w")])
    assert (s.src, s.tgt, s.pair, s.mode, s.bpe_merges) == ("de", "en", "de-en", "iwslt_like", 300)
    assert type(s.source).__name__ == "IwsltLike" and not s.source.paper_data and s.data_workdir == s.workdir
    proc = run_main(translation.main, "--corpus", "iwslt_like", "--workdir", tmp_path / "w")
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((tmp_path / "w" / "results.json").read_text())
    assert results["pair"] == "de-en" and results["mode"] == "iwslt_like" and results["updates"] == 20
    assert results["test_sentences"] == 50 and results["sacrebleu"] >= 0
    assert "bleu_compound_split" not in results  # German is the source here, not the target
    assert (tmp_path / "w" / "raw" / "train.de").read_text(encoding="utf-8").count("\n") == 600


def test_a_section_that_is_no_corpus_is_one_line(iwslt_corpus, tmp_path):
    proc = run_main(translation.main, "--corpus", "nope", "--dry-run", "--workdir", tmp_path / "w")
    assert proc.returncode == 2 and "--corpus nope: no such corpus" in proc.stderr and "iwslt_like" in proc.stderr
    assert "Traceback" not in proc.stderr
