"""recipes/parallel.sh: a user's own parallel corpus through the WMT14 recipe's stages. Its command
line and its one-line errors for files that are missing, misaligned, empty-lined or not UTF-8, and
for a language sacremoses has no rules for. (A whole run, under Slurm stand-ins:
tests/test_slurm.py.)"""
import subprocess

import pytest
from conftest import REPO, assert_one_error_line
from test_slurm import corpus, parallel

SH = ["bash", str(REPO / "recipes" / "parallel.sh")]


def test_help_through_the_shell_script(tmp_path):
    proc = subprocess.run([*SH, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: recipes/parallel.sh [options] [-- fairseq-train options]")
    for option in ("--src", "--tgt", "--train", "--valid", "--test", "--bpe-merges", "--arch", "--layers",
                   "--ngpus", "--train-minutes", "--max-update", "--launcher", "--precision", "sacreBLEU"):
        assert option in proc.stdout, option
    assert "\n  --bundled" not in proc.stdout and "\n  --smoke" not in proc.stdout  # the WMT14 modes are not its


def test_dry_run_is_the_wmt14_pipeline_on_the_users_files(tmp_path):
    proc = parallel(["--dry-run", "--src", "fr", "--tgt", "en", "--train", "c/train", "--valid", "c/dev", "--test",
                     "c/test", "--ngpus", "1", "--layers", "3", "--d-model", "256", "--bpe-merges", "8000"],
                    cwd=tmp_path)
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
    assert "--max-tokens 4000 --update-freq 7" in out  # the paper's 28000 tokens per update on one GPU
    assert not (tmp_path / "runs").exists() and not (REPO / "runs" / "parallel_fr_en_base" / "raw").exists()


@pytest.mark.parametrize("damage,fragments", [
    (lambda c: (c / "valid.de").unlink(), ["--valid", "valid.de not found", "valid.en and", "valid.de"]),
    (lambda c: (c / "train.de").write_text("".join(open(c / "train.de").readlines()[:-3])),
     ["--train:", "train.en has 300 lines but", "train.de has 297"]),
    (lambda c: (c / "test.en").write_text("a\n\n b\n   \n" + "c\n" * 36),
     ["test.en line 2 is empty (2 empty lines in all)", "remove those pairs from both"]),
    (lambda c: (c / "test.de").write_bytes(b"ok\n" * 5 + b"caf\xe9\n" + b"ok\n" * 34), ["test.de line 6 is not UTF-8"]),
])
def test_bad_files_are_one_line_naming_the_file(tmp_path, damage, fragments):
    data = corpus(tmp_path / "c", sizes=(("train", 300), ("valid", 40), ("test", 40)))
    damage(data)
    proc = parallel(["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
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
