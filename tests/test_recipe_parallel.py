"""recipes/parallel.sh: a user's own parallel corpus through the WMT14 recipe's stages. Its command
line and its one-line errors for files that are missing, misaligned, empty-lined or not UTF-8, and
for a language sacremoses has no rules for; its warnings for a corpus that runs but is likely a
mistake (a split whose two sides are the same text, splits that share sentence pairs). (A whole
run, under Slurm stand-ins: tests/test_slurm.py; how the files are decoded: tests/test_text_policy.py.)"""
import subprocess

import pytest
from conftest import REPO, assert_one_error_line, run_main
from test_slurm import corpus, parallel

from attn_kit.recipes import parallel as parallel_recipe

SH = ["bash", str(REPO / "recipes" / "parallel.sh")]


def here(argv):
    """The recipe's main() in this process (conftest.run_main): what it prints and its error line, without a
    process of its own (~0.7 s of CPU each; ~2 s for a dry run, which imports torch). The recipe's process and
    its process-level contract: test_help_through_the_shell_script, test_bad_languages_are_one_line."""
    return run_main(parallel_recipe.main, *argv)


def test_help_through_the_shell_script(tmp_path):
    proc = subprocess.run([*SH, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: recipes/parallel.sh [options] [-- fairseq-train options]")
    for option in ("--src", "--tgt", "--train", "--valid", "--test", "--errors", "--bpe-merges", "--arch", "--layers",
                   "--ngpus", "--train-minutes", "--max-update", "--launcher", "--precision", "sacreBLEU"):
        assert option in proc.stdout, option
    assert "\n  --bundled" not in proc.stdout and "\n  --smoke" not in proc.stdout  # the WMT14 modes are not its


def test_dry_run_is_the_wmt14_pipeline_on_the_users_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the relative paths below, and the default work directory, are the caller's
    proc = here(["--dry-run", "--src", "fr", "--tgt", "en", "--train", "c/train", "--valid", "c/dev", "--test",
                 "c/test", "--ngpus", "1", "--layers", "3", "--d-model", "256", "--bpe-merges", "8000"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for i, name in enumerate(("check", "copy", "tokenize", "bpe", "binarize", "train", "average", "generate",
                              "score"), 1):
        assert f"stage {i}/9 {name}:" in out, name
    assert f"copy {tmp_path}/c/dev.fr -> " in out and "sacremoses normalize + tokenize -l fr" in out
    assert "learn-joint-bpe-and-vocab" in out and "-s 8000" in out and "--source-lang fr --target-lang en" in out
    # --layers/--d-model resize the paper's base model; the rest of it (d_ff 2048, h 8) stays
    assert "--arch attn_paper_base --encoder-layers 3 --encoder-embed-dim 256 --encoder-ffn-embed-dim 2048 " \
           "--encoder-attention-heads 8" in out
    assert "--max-tokens auto --update-freq auto" in out  # no GPU known here: sized for it at the run's start
    assert not (tmp_path / "runs").exists() and not (REPO / "runs" / "parallel_fr_en_base" / "raw").exists()


@pytest.mark.parametrize("damage,fragments", [
    (lambda c: (c / "valid.de").unlink(), ["--valid", "valid.de not found", "valid.en and", "valid.de"]),
    (lambda c: (c / "train.de").write_text("".join(open(c / "train.de").readlines()[:-3])),
     ["--train:", "train.en has 300 lines but", "train.de has 297"]),
    (lambda c: (c / "test.en").write_text("a\n\n b\n   \n" + "c\n" * 36),
     ["test.en line 2 is empty (2 empty lines in all)", "remove those pairs from both"]),
    (lambda c: (c / "test.de").write_bytes(b"ok\n" * 5 + b"caf\xe9\n" + b"ok\n" * 34),
     ["test.de: line 6 is not UTF-8", "--errors replace"]),
])
def test_bad_files_are_one_line_naming_the_file(tmp_path, damage, fragments):
    data = corpus(tmp_path / "c", sizes=(("train", 300), ("valid", 40), ("test", 40)))
    damage(data)
    proc = here(["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
                 data / "test", "--workdir", tmp_path / "w", "--ngpus", "0", "--stop-stage", "check"])
    assert_one_error_line(proc, *fragments)
    assert not (tmp_path / "w" / ".stages" / "check.done").exists()


@pytest.mark.parametrize("argv,message", [
    (["--src", "xx", "--tgt", "de"], "--src 'xx': sacremoses has no Moses rules for this language code; known: as, bn"),
    (["--src", "en", "--tgt", "en"], "--src and --tgt are both 'en'"),
    (["--src", "en"], "give --tgt"),
])
def test_bad_languages_are_one_line(argv, message):
    proc = parallel(["--dry-run", *argv, "--train", "t", "--valid", "v", "--test", "t"])
    assert_one_error_line(proc, message)


def check(tmp_path, train, valid, test):
    """Run the check stage on these prefixes; (its process, whether the stage finished)."""
    work = tmp_path / "w"
    proc = here(["--src", "en", "--tgt", "de", "--train", train, "--valid", valid, "--test", test, "--workdir",
                 work, "--ngpus", "0", "--stop-stage", "check"])
    return proc, (work / ".stages" / "check.done").exists()


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def write(path, lines_):
    path.write_text("".join(line + "\n" for line in lines_), encoding="utf-8")


def test_a_split_whose_two_sides_are_the_same_text_is_a_warning(tmp_path):
    data = corpus(tmp_path / "c", sizes=(("train", 300), ("valid", 40), ("test", 40)))
    write(data / "valid.de", lines(data / "valid.en"))
    proc, finished = check(tmp_path, data / "train", data / "valid", data / "test")
    assert proc.returncode == 0 and finished, proc.stderr
    assert proc.stderr.splitlines() == [
        f"warning: --valid: {data / 'valid.en'} and {data / 'valid.de'} hold the same text (40 lines), where "
        "valid.de should be the translation of valid.en; is one of them the wrong file?"]


def test_the_same_files_for_train_valid_and_test_is_a_warning(tmp_path):
    data = corpus(tmp_path / "c", sizes=(("train", 300),))
    proc, finished = check(tmp_path, data / "train", data / "train", data / "train")
    assert proc.returncode == 0 and finished, proc.stderr
    assert proc.stderr.splitlines() == [
        f"warning: --train, --valid and --test are the same files ({data / 'train'}.{{en,de}}): the validation "
        "loss and the test score are measured on the training data"]


def test_sentence_pairs_shared_between_splits_are_counted(tmp_path):
    """--valid holds 2 training pairs; --test holds 3 validation pairs and 5 training pairs, one of them
    twice, and a training sentence with a translation of its own (not the same pair: not counted)."""
    data = corpus(tmp_path / "c", sizes=(("train", 300), ("valid", 40), ("test", 40)))
    split = {name: {lang: lines(data / f"{name}.{lang}") for lang in ("en", "de")}
             for name in ("train", "valid", "test")}
    for lang in ("en", "de"):
        train, valid, test = (split[name][lang] for name in ("train", "valid", "test"))
        valid[0:2] = train[10:12]
        test[0:9] = valid[5:8] + train[20:25] + train[20:21]
    split["test"]["en"][9] = split["train"]["en"][30]
    for name, sides in split.items():
        for lang, text in sides.items():
            write(data / f"{name}.{lang}", text)
    proc, finished = check(tmp_path, data / "train", data / "valid", data / "test")
    assert proc.returncode == 0 and finished, proc.stderr
    assert proc.stderr.splitlines() == [
        "warning: 3 of the 40 sentence pairs of --test are also in --valid: the test score counts sentences of the "
        "validation data",
        "warning: 2 of the 40 sentence pairs of --valid are also in --train: the validation loss counts sentences of "
        "the training data",
        "warning: 6 of the 40 sentence pairs of --test are also in --train: the test score counts sentences of the "
        "training data"]


@pytest.mark.slow  # trains a tiny model for 30 updates
def test_the_presets_validation_interval_is_what_fairseq_does(data_bin, tmp_path):
    """--preset small's help promised "a validation every 500 updates" where fairseq validated every
    100: fairseq validates at every checkpoint it saves as well. The help says both, and fairseq-train
    with checkpoints every 10 updates and --validate-interval-updates 50 validates at 10, 20, 30."""
    import re

    from conftest import USER_DIR, run, train_cmd

    from attn_kit.recipes.parallel import preset_help

    assert "a validation every 500 updates and at every checkpoint (every 100 updates)" in preset_help()
    proc = run(train_cmd(data_bin, tmp_path / "ck", ["--user-dir", USER_DIR, "--arch", "attn_paper_base"],
                         ["--max-update", "30", "--save-interval-updates", "10", "--validate-interval-updates", "50",
                          "--validate-interval", "100", "--save-interval", "100", "--lr", "0.0005"]))
    log = proc.stdout + proc.stderr
    validated = [int(u) for u in re.findall(r"\| valid on 'valid' subset .*?num_updates (\d+)", log)]
    assert validated == [10, 20, 30]
