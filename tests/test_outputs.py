"""Outputs never destroy: every command that writes a path the user gives checks it before any
work (attn_kit.cli.check_output): a folder is never replaced by a file, an existing file only
with --force, and nothing has run when it refuses. (translate.py, plot_attention.py and the
CTranslate2 export: tests/test_translate.py, tests/test_ctranslate2.py; averaging: test_faults.py.)"""
import sys

import pytest
from conftest import REPO, assert_one_error_line, run_main

from attn_kit.cli import UsageError


def record(out, marker, *force):
    from attn_kit.results import record_main

    return record_main([str(out), *force, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w').write('{{}}')"])


def train_benchmark(out, marker, *force):
    from lab.bench.train import parse_args

    return parse_args(["--out", str(out), *force])


def decode_benchmark(out, marker, *force):
    from lab.bench.decode_rules import main

    return main(["--run", str(marker.parent / "no-run"), "--out", str(out), *force])


def sweep(out, marker, *force):
    from lab.sweep import main

    return main(["--config", "x=--p-drop 0", "--output", str(out.parent / "sweep.json"), *force])


def bundled_data(out, marker, *force):
    from lab import bundled_data

    sys.argv = ["make_bundled_data.py", "--out", str(out.parent / "sweep.x.json"), *force]
    return bundled_data.main()


@pytest.mark.parametrize("command", [record, train_benchmark, decode_benchmark, sweep])
def test_an_existing_file_is_replaced_only_with_force_and_checked_first(command, tmp_path):
    out, marker = tmp_path / "sweep.x.json", tmp_path / "ran"
    out.write_text("kept")
    with pytest.raises(UsageError, match="the file exists; pass --force to replace it"):
        command(out, marker)
    assert out.read_text() == "kept" and not marker.exists()  # refused before anything ran


@pytest.mark.parametrize("command", [record, train_benchmark, decode_benchmark, sweep])
def test_a_folder_is_never_replaced_by_a_file(command, tmp_path):
    out = tmp_path / "sweep.x.json"
    (out / "inside").mkdir(parents=True)
    with pytest.raises(UsageError, match="is a folder; give a file path"):
        command(out, tmp_path / "ran", "--force")
    assert (out / "inside").is_dir()


def test_a_command_that_writes_a_folder_never_replaces_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    out = tmp_path / "sweep.x.json"
    out.write_text("kept")
    with pytest.raises(UsageError, match="is a file; give a folder"):
        bundled_data(out, tmp_path / "ran", "--force")
    assert out.read_text() == "kept"


def test_bundled_data_refuses_the_repos_own_corpus_without_force(monkeypatch):
    from lab import bundled_data

    monkeypatch.setattr(sys, "argv", ["make_bundled_data.py"])  # --out defaults to data/tatoeba-en-de
    with pytest.raises(UsageError, match="tatoeba-en-de: the folder exists; pass --force"):
        bundled_data.main()
    assert (REPO / "data" / "tatoeba-en-de").is_dir()


# --------------------------------------------------------------------------- outputs never contain inputs
def tree(root):
    """Every file under ``root`` with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_export_never_replaces_the_run_it_reads(tmp_path):
    """export_ctranslate2.py RUN OUT --force with RUN inside OUT (an earlier export's folder): it exited 0
    and RUN (checkpoints, data, results) was gone. Refused in one line before any work, RUN untouched;
    the same for OUT equal to the --checkpoint's folder."""
    from attn_kit.inference import ctranslate2

    out = tmp_path / "export"
    run = out / "run"
    run.mkdir(parents=True)
    (out / ctranslate2.CARD).write_text("{}")  # an earlier export: --force may replace it
    (run / "inference.json").write_text("{}")
    (run / "checkpoint_avg.pt").write_bytes(b"weights")
    before = tree(out)
    proc = run_main(ctranslate2.main, str(run), str(out), "--force")
    assert_one_error_line(proc, f"OUT_DIR {out} holds {run}, which this command reads")
    assert proc.returncode == 2 and tree(out) == before
    other = tmp_path / "run2"
    other.mkdir()
    proc = run_main(ctranslate2.main, str(other), str(out), "--force", "--checkpoint", str(run / "checkpoint_avg.pt"))
    assert_one_error_line(proc, f"OUT_DIR {out} holds {run / 'checkpoint_avg.pt'}, which this command reads")
    assert tree(out) == before


def test_averaging_neither_replaces_an_input_nor_weighs_one_twice(tmp_path):
    from attn_kit.fairseq_layer import checkpoints

    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    proc = run_main(checkpoints.main, "--inputs", str(a), str(b), "--output", str(a), "--force")
    assert_one_error_line(proc, f"--output {a} is {a}, which this command reads")
    assert a.read_bytes() == b"a"
    # a checkpoint named twice is weighed twice: said (the canary times averaging so, on copies of one)
    proc = run_main(checkpoints.main, "--inputs", str(a), str(a), str(b), "--output", str(tmp_path / "avg.pt"))
    assert f"warning: --inputs names {a} more than once: it is weighed that many times" in proc.stderr


def test_translate_never_writes_over_its_input(tmp_path):
    from attn_kit.inference import translate

    text = tmp_path / "in.txt"
    text.write_text("A man.\n")
    proc = run_main(translate.main, str(tmp_path / "run"), "--input", str(text), "--output", str(text), "--force")
    assert_one_error_line(proc, f"--output {text} is {text}, which this command reads")
    assert text.read_text() == "A man.\n"
