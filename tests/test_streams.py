"""Every stream and signal a shell can throw at a command (attn_kit.cli.main_guard): a reader that
goes away ends the command quietly as the shell's own tools end (exit 141); a full or closed standard
stream is one line naming it; SIGHUP (a closed terminal or ssh connection) and SIGQUIT end a command
as SIGTERM does, one line, its scratch folder removed. And the environment it runs in: a deleted
current folder, a ':' in a work directory, a file-size limit: one line each, before any work where
it can be known."""
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import assert_one_error_line

GUARDED = """import sys, time
from attn_kit.cli import main_guard
from attn_kit.pipeline.process import stream

def main():
    what = sys.argv[1]
    if what == "print":
        for i in range(200000):
            print(f"line {{i}}")
    elif what == "read":
        print(len(sys.stdin.read()))
    elif what == "child":  # a command running a tool, as a recipe's stage does
        stream([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
               on_line=lambda line: print(line, end="", flush=True))
    return 0

main_guard(main, interrupted="interrupted; finished stages are kept")
"""


def guarded(tmp_path, what, **kwargs):
    script = tmp_path / "guarded.py"
    script.write_text(GUARDED.format())
    return [sys.executable, str(script), what]


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """`translate.py ... | head -1` printed `error: [Errno 32] Broken pipe`, exit 1: now nothing on
    stderr, exit 141 (128 + SIGPIPE), as a shell's own tools end; the same for a recipe's dry run."""
    for cmd in (guarded(tmp_path, "print"),
                [sys.executable, "-m", "attn_kit.recipes.translation", "--smoke", "--dry-run", "--workdir",
                 str(tmp_path / "w")]):
        proc = subprocess.run(["bash", "-c", '"$@" | head -1; exit "${PIPESTATUS[0]}"', "bash", *cmd],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode in (141, 0) and proc.stderr == "" and proc.stdout.count("\n") == 1, proc.stderr
    proc = subprocess.run(["bash", "-c", '"$@" | head -1; exit "${PIPESTATUS[0]}"', "bash", *guarded(tmp_path, "print")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 141  # 200000 lines: the reader is gone before they are written


def test_a_full_or_closed_standard_stream_is_one_line_naming_it(tmp_path):
    with open("/dev/full", "w") as full:
        proc = subprocess.run(guarded(tmp_path, "print"), stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 1 and proc.stderr == "error: writing standard output: No space left on device\n"
    closed = subprocess.run(["bash", "-c", '"$@" <&-', "bash", *guarded(tmp_path, "read")],
                            capture_output=True, text=True)
    assert_one_error_line(closed, "standard input is closed: give the input as a file")
    closed = subprocess.run(["bash", "-c", '"$@" >&-', "bash", *guarded(tmp_path, "print")],
                            stderr=subprocess.PIPE, text=True)
    assert closed.returncode == 1 and closed.stderr.startswith("error: standard output is closed: ")
    assert closed.stderr.count("\n") == 1


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM])
def test_sighup_and_sigquit_end_a_command_as_sigterm_does(tmp_path, sig):
    """A closed terminal (SIGHUP) or Ctrl-\\ (SIGQUIT) ended a recipe with no line, its scratch folder
    left: now as SIGTERM, one line `terminated (SIGHUP)`, exit 128 + the signal, the running tool
    stopped and the scratch folder removed."""
    tmp = tmp_path / "t"
    tmp.mkdir()
    # the command as a terminal starts it: SIGHUP at its default (a suite run under nohup ignores it, and
    # main_guard rightly keeps what nohup ignores)
    proc = subprocess.Popen(guarded(tmp_path, "child"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": "/tmp"}, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    assert proc.stdout.readline() == "ready\n"
    scratch = [p for p in os.listdir("/tmp") if p.startswith(f"attn-{proc.pid}-")]
    assert len(scratch) == 1
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    name = signal.Signals(sig).name
    assert err.strip() == f"error: terminated ({name}); finished stages are kept", err
    assert not os.path.exists(os.path.join("/tmp", scratch[0]))


# --------------------------------------------------------------------------- paths and the environment
def test_a_deleted_current_folder_and_a_colon_in_the_work_directory_are_one_line_before_any_work(tmp_path):
    """A deleted current folder failed late with oneMKL's fatal error; a ':' in --workdir failed at the
    train stage after the data stages (fairseq reads a data path with ':' as a list of folders)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = subprocess.run(["bash", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "bash", str(gone),
                           *guarded(tmp_path, "print")], capture_output=True, text=True)
    assert_one_error_line(proc, "the current folder no longer exists")
    colon = tmp_path / "a:b"
    proc = subprocess.run([sys.executable, "-m", "attn_kit.recipes.translation", "--smoke", "--workdir", str(colon)],
                          capture_output=True, text=True, timeout=120)
    assert_one_error_line(proc, f"--workdir {colon}: its path holds ':'")
    assert proc.returncode == 2 and not colon.exists()


def test_a_file_size_limit_is_one_line_as_a_full_disk_is(tmp_path):
    """`ulimit -f`: "File too large" named no file and left a temporary file; now one line naming the file
    and the limit, nothing left (attn_kit.cli.atomic_output, every file the kit writes)."""
    script = tmp_path / "big.py"
    script.write_text("import resource, sys\n"
                      "from attn_kit.cli import main_guard, write_text_atomic\n"
                      "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
                      "main_guard(lambda: write_text_atomic(sys.argv[1], 'x' * 100000))\n")
    out = tmp_path / "out.txt"
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True)
    assert_one_error_line(proc, f"a file-size limit (ulimit -f) stopped it to write {out}", "raise the limit")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.py"]
