"""The work directory is a boundary (attn_kit/pipeline/boundary.py): a symbolic link planted at one of
the kit's own paths (the lock, a log, a stage stamp, the set-aside folder, checkpoints) in a work
directory or a shared data folder leaves what it points to untouched, and the run stops in one line
naming the link; links to inputs keep working. Each case failed on the code before (the lock
truncated the linked file, a log was appended to it, setting aside deleted through a linked stale/)."""
import sys
from argparse import Namespace

import pytest
from conftest import run_main

from attn_kit.cli import UserError
from attn_kit.pipeline.lock import workdir_lock
from attn_kit.pipeline.stages import Pipeline, Stage, run_recipe

TEXT = "someone else's file\n"


@pytest.fixture
def outside(tmp_path):
    """A file and a folder outside the work directory, with what they hold."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "keep.txt").write_text(TEXT)
    (folder / "upper").mkdir()
    (folder / "upper" / "keep.txt").write_text(TEXT)
    return folder


def untouched(outside):
    return (outside / "keep.txt").read_text() == TEXT and (outside / "upper" / "keep.txt").read_text() == TEXT


def stages(work, calls):
    def upper(ctx):
        calls.append("upper")
        ctx.sh([sys.executable, "-c", "print('hello from the stage')"])  # written to logs/upper.log
        with ctx.output(work / "upper.txt") as tmp:
            tmp.write_text((work / "src.txt").read_text().upper())

    return [Stage("upper", upper, inputs=[work / "src.txt"], outputs=[work / "upper.txt"])]


def run(work, calls):
    run_recipe(Namespace(workdir=work, dry_run=False, stage=1, stop_stage=None), stages(work, calls), lambda r: None)


@pytest.mark.parametrize("planted", [".lock", "logs/upper.log", ".stages/upper.done", "checkpoints",
                                     "logs", "stale"])
def test_a_link_at_the_kits_own_paths_stops_the_run_and_touches_nothing(tmp_path, outside, planted):
    work = tmp_path / "work"
    work.mkdir()
    (work / "src.txt").write_text("a\n")
    link = work / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside / "keep.txt" if "." in planted.split("/")[-1] else outside)
    calls = []
    with pytest.raises(UserError, match=f"{link} is a symbolic link .*does not write through links"):
        run(work, calls)
    assert untouched(outside) and calls == [] and sorted(p.name for p in outside.iterdir()) == ["keep.txt", "upper"]


def test_the_lock_of_a_shared_data_folder_refuses_a_link_too(tmp_path, outside):
    data = tmp_path / "data"
    data.mkdir()
    (data / ".lock").symlink_to(outside / "keep.txt")
    with pytest.raises(UserError, match="is a symbolic link"):
        with workdir_lock(data, "--data-workdir", wait=True):
            pass
    assert untouched(outside)


def test_setting_outputs_aside_never_deletes_through_a_link_made_during_the_run(tmp_path, outside):
    """stale/ linked after the run's start (the start-up scan passed): the set-aside refuses to move
    or delete through it."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "src.txt").write_text("a\n")
    calls = []
    run(work, calls)
    (work / "upper.txt").write_text("damaged\n")  # a changed output: set aside on the next run
    pipeline = Pipeline(work, stages(work, calls))
    (work / "stale").symlink_to(outside)
    with pytest.raises(UserError, match="symbolic link"):
        pipeline.run()
    assert untouched(outside) and (work / "upper.txt").read_text() == "damaged\n"


def test_a_linked_work_directory_and_linked_inputs_keep_working(tmp_path):
    """The work directory itself a link (runs/ on a scratch disk), its input a link to a corpus."""
    real = tmp_path / "scratch"
    real.mkdir()
    (tmp_path / "corpus.txt").write_text("b\n")
    work = tmp_path / "work"
    work.symlink_to(real)
    (real / "src.txt").symlink_to(tmp_path / "corpus.txt")
    calls = []
    run(work, calls)
    assert (real / "upper.txt").read_text() == "B\n" and "hello from the stage" in (real / "logs" / "upper.log").read_text()


def test_a_recipe_stops_in_one_line_before_its_first_stage(tmp_path, outside):
    """The WMT14 recipe on a work directory whose lock is a link: one error line, exit 1, the linked
    file as it was."""
    from attn_kit.recipes import translation

    work = tmp_path / "w"
    work.mkdir()
    (work / ".lock").symlink_to(outside / "keep.txt")
    proc = run_main(translation.main, "--smoke", "--workdir", work, "--stop-stage", "download")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert f"{work / '.lock'} is a symbolic link" in proc.stderr and untouched(outside)
