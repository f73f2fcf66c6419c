"""Outputs never destroy: every command that writes a path the user gives checks it before any
work (attn_kit.cli.check_output): a folder is never replaced by a file, an existing file only
with --force, and nothing has run when it refuses. (translate.py, plot_attention.py and the
CTranslate2 export: tests/test_translate.py, tests/test_ctranslate2.py; averaging: test_faults.py.)"""
import sys

import pytest
from conftest import REPO

from attn_kit.cli import UsageError


def record(out, marker, *force):
    from attn_kit.results import record_main

    return record_main([str(out), *force, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w').write('{{}}')"])


def train_benchmark(out, marker, *force):
    from attn_kit.tools.bench.train import parse_args

    return parse_args(["--out", str(out), *force])


def decode_benchmark(out, marker, *force):
    from attn_kit.tools.bench.decode_rules import main

    return main(["--run", str(marker.parent / "no-run"), "--out", str(out), *force])


def sweep(out, marker, *force):
    from attn_kit.recipes.sweep import main

    return main(["--config", "x=--p-drop 0", "--output", str(out.parent / "sweep.json"), *force])


def bundled_data(out, marker, *force):
    from attn_kit.recipes import bundled_data

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
    from attn_kit.recipes import bundled_data

    monkeypatch.setattr(sys, "argv", ["make_bundled_data.py"])  # --out defaults to data/tatoeba-en-de
    with pytest.raises(UsageError, match="tatoeba-en-de: the folder exists; pass --force"):
        bundled_data.main()
    assert (REPO / "data" / "tatoeba-en-de").is_dir()
