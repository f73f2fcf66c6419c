"""The bundled EN-DE recipe's command line and its failure handling, without
training (each test takes seconds).

The end-to-end run (``bash recipes/wmt14_en_de.sh --bundled``, ~15 minutes on
a 2-core CPU) is not part of the suite.
"""
import json
import lzma
import os
import subprocess
import sys
import time

import pytest
from conftest import REPO, assert_one_error_line

from attn_kit.cli import UserError
from attn_kit.pipeline.stages import Pipeline
from attn_kit.recipes import config, translation, wmt14_data

RECIPE = [sys.executable, "-m", "attn_kit.recipes.translation", "--pair", "en-de"]
SH = ["bash", str(REPO / "recipes" / "wmt14_en_de.sh")]


def recipe(argv, cwd=None, cmd=RECIPE, timeout=120):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([*cmd, *[str(a) for a in argv]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


# --------------------------------------------------------------------------- the .sh entry point
def test_help_through_the_shell_script(tmp_path):
    """`bash recipes/wmt14_en_de.sh --help` works from any directory and documents every option."""
    proc = recipe(["--help"], cwd=tmp_path, cmd=SH, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for option in ("--bundled", "--smoke", "--workdir", "--dry-run", "--stage", "--stop-stage", "--arch",
                   "--train-minutes", "--average", "--seed", "--threads", "--max-update"):
        assert option in proc.stdout, option


def test_shell_dry_run_prints_the_fairseq_commands_and_creates_nothing(tmp_path):
    """A relative --workdir is relative to the caller's directory, and --dry-run writes nothing."""
    proc = recipe(["--bundled", "--dry-run", "--workdir", "w"], cwd=tmp_path, cmd=SH, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for command in ("sacremoses", "subword-nmt learn-joint-bpe-and-vocab", "-m subword_nmt.apply_bpe",
                    "fairseq-preprocess", "--joined-dictionary", "fairseq-train", "--arch attn_paper_base",
                    "--seed 1", "attn_kit.fairseq_layer.checkpoints", "--num-update-checkpoints",
                    "fairseq-generate", "--beam 4", "--remove-bpe", "sacreBLEU"):
        assert command in proc.stdout, command
    assert str(tmp_path / "w" / "data-bin") in proc.stdout
    # a fixed amount of work, not a time budget, on a fixed number of threads (issue: the same BLEU everywhere)
    bundled = config.settings("wmt14", "paper", "bundled")
    train = next(line for line in proc.stdout.splitlines() if line.startswith("  $ ") and "fairseq-train " in line)
    assert f"--max-update {bundled['max_update']} " in train and "--stop-time-hours" not in train
    assert train.strip().startswith("$ OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 ")
    assert list(tmp_path.iterdir()) == []
    for i, name in enumerate(["download", "extract", "tokenize", "bpe", "binarize", "train", "average",
                              "generate", "score"], 1):
        assert f"stage {i}/9 {name}:" in proc.stdout


@pytest.mark.parametrize("argv,fragment", [
    # RECIPE passes --pair en-de as wmt14_en_de.sh does: another pair contradicts it (--bundled with
    # EN-FR itself: tests/test_recipe_wmt14.py)
    (["--bundled", "--pair", "en-fr"], "--pair en-fr: this recipe trains en-de"),
    (["--bundled", "--ngpus", "-1"], "--ngpus must be >= 0"),
    (["--bundled", "--arch", "transformer_wmt_en_de_big_t2t"], "unknown --arch 'transformer_wmt_en_de_big_t2t'"),
    (["--bundled", "--stage", "nonsense"], "unknown stage 'nonsense'"),
    (["--bundled", "--stage", "train", "--stop-stage", "bpe"], "--stage/--stop-stage"),
])
def test_bad_command_lines_are_one_error_line(tmp_path, argv, fragment):
    proc = recipe([*argv, "--workdir", tmp_path / "w"])
    assert_one_error_line(proc, fragment)
    assert not (tmp_path / "w").exists()


def test_unknown_arch_error_lists_the_plugins_architectures(tmp_path):
    line = assert_one_error_line(recipe(["--bundled", "--arch", "attn_paper_huge", "--workdir", tmp_path]))
    assert "attn_paper_base" in line and "attn_paper_big" in line


def test_the_arch_names_the_recipes_know_are_the_registered_ones():
    """The cheap --arch check (attn_kit.planning.sizes.PLUGIN_ARCHS, no fairseq import) agrees with fairseq's registry."""
    import attn_plugin  # noqa: F401  (registers the architectures)
    from fairseq.models import ARCH_MODEL_REGISTRY

    from attn_kit.planning.sizes import PLUGIN_ARCHS

    registered = {name for name, cls in ARCH_MODEL_REGISTRY.items() if cls.__module__.startswith("attn_plugin")}
    assert set(PLUGIN_ARCHS) == registered
    assert "attn_paper_base" in registered


# --------------------------------------------------------------------------- bad inputs
def test_a_stage_whose_input_is_missing_is_one_error_line(tmp_path):
    """Starting at a later stage in an empty workdir names the missing file, no traceback."""
    proc = recipe(["--bundled", "--stage", "tokenize", "--workdir", tmp_path / "w"])
    assert_one_error_line(proc, "stage tokenize: missing input", str(tmp_path / "w" / "raw"),
                          "run the earlier stages first")
    proc = recipe(["--bundled", "--stage", "7", "--workdir", tmp_path / "w"])
    assert_one_error_line(proc, "stage average: missing input", "checkpoints")


def test_a_corrupt_or_missing_bundled_file_is_one_error_line(tmp_path, monkeypatch):
    """A damaged or missing data/ file is one error line naming it (checked against the committed
    sha256 before anything reads it), and nothing is left behind."""
    data = tmp_path / "data" / "tatoeba-en-de"
    data.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (data / f"{split}.en-de.tsv.xz").write_bytes((REPO / "data" / "tatoeba-en-de" / f"{split}.en-de.tsv.xz")
                                                     .read_bytes())
    train = data / "train.en-de.tsv.xz"
    train.write_bytes(train.read_bytes()[:-1] + b"x")  # one byte changed
    monkeypatch.setattr(wmt14_data, "BUNDLED_DATA", data)
    args = translation.parse_args(["--bundled", "--workdir", str(tmp_path / "w")])
    with pytest.raises(UserError, match="bundled data damaged: .*train.en-de.tsv.xz.*git checkout"):
        Pipeline(args.workdir, translation.stages(args)).run()
    assert not (tmp_path / "w" / "raw").exists() and not (tmp_path / "w" / ".stages" / "download.done").exists()
    train.unlink()
    with pytest.raises(UserError, match="bundled data missing: .*train.en-de.tsv.xz"):
        Pipeline(args.workdir, translation.stages(args)).run()


def test_bundled_data_is_complete_and_attributed():
    """The recipe needs nothing outside the repo: the three splits and their CC-BY attribution."""
    data = REPO / "data" / "tatoeba-en-de"
    sizes = {}
    for split in ("train", "valid", "test"):
        with lzma.open(data / f"{split}.en-de.tsv.xz", "rt", encoding="utf-8") as f:
            sizes[split] = sum(1 for line in f if line.count("\t") == 1)
    assert sizes == {"train": 166813, "valid": 1000, "test": 2000}
    about = (data / "ABOUT.md").read_text(encoding="utf-8")
    for fact in ("CC-BY 2.0", "creativecommons.org/licenses/by/2.0", "www.manythings.org/anki", "tatoeba.org",
                 "2018-05-13"):
        assert fact in about, fact


# --------------------------------------------------------------------------- a finished run
def test_a_second_run_skips_every_stage_and_reprints_the_score(tmp_path):
    """With every stage stamped and its outputs present, the recipe only reports (in seconds)."""
    work = tmp_path / "w"
    args = translation.parse_args(["--bundled", "--workdir", str(work)])
    stages = translation.stages(args)
    for stage in stages:
        for path in stage.outputs:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
        (work / ".stages").mkdir(parents=True, exist_ok=True)
        (work / ".stages" / f"{stage.name}.done").write_text(json.dumps({"seconds": 1.0}))
    (work / "results.json").write_text(json.dumps({
        "mode": "bundled", "arch": "attn_paper_base", "sacrebleu": 24.04, "test_sentences": 2000, "updates": 1000,
        "sacrebleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"}))
    start = time.time()
    proc = recipe(["--bundled", "--workdir", work])
    assert proc.returncode == 0, proc.stderr
    assert time.time() - start < 20
    assert proc.stdout.count("done already, skipping") == len(stages)
    assert "sacreBLEU = 24.0" in proc.stdout and "nrefs:1|case:mixed" in proc.stdout
    results = json.loads((work / "results.json").read_text())
    assert results["stage_seconds"] == {stage.name: 1.0 for stage in stages}
