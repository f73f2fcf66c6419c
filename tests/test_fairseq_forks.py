"""The tests' fairseq commands are forked from one preloaded interpreter (lab.fairseq_forks,
conftest.run): a forked command is the fresh command, output, logging, exit status and files."""
import re
import subprocess
import sys

import pytest
from conftest import USER_DIR, cli, command, forks, run, run_env


def same_text(text: str) -> str:
    """Output without what depends on the clock."""
    return re.sub(r"\d\d:\d\d:\d\d|\d+\.\d+ ?(s\b|sentences/s|tokens/s)|wall \S+", "<t>", text)


@pytest.mark.parametrize("case", ["decode", "unknown arch"])
def test_a_forked_fairseq_command_prints_and_exits_as_the_fresh_one(plugin_run, data_bin, case):
    """fairseq-generate's translations and its log lines (fairseq's modules set logging up as they are
    imported, each command its own way: the child imports them) and an error's exit status and lines."""
    save, _ = plugin_run
    cmd = {"decode": [cli("fairseq-generate"), data_bin, "--user-dir", USER_DIR, "--path", save / "checkpoint_last.pt",
                      "--beam", "4", "--cpu"],
           "unknown arch": [cli("fairseq-train"), data_bin, "--user-dir", USER_DIR, "--arch", "attn_nope", "--cpu"]}[case]
    fresh, forked = (run(cmd, check=False, fork=fork) for fork in (False, True))
    assert forked.returncode == fresh.returncode == (0 if case == "decode" else 2)
    assert same_text(forked.stdout) == same_text(fresh.stdout) and same_text(forked.stderr) == same_text(fresh.stderr)
    assert ("H-0\t" in fresh.stdout) == (case == "decode")


def test_a_forked_script_reads_its_stdin_and_ends_as_python_would(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text("import sys\nprint(sys.argv[1:], sys.path[0] == %r)\nprint(sys.stdin.read().upper(), end='')\n"
                      "sys.exit('bye' if sys.argv[1] == 'quit' else 0)\n" % str(tmp_path))
    for argv, status in ((["a"], 0), (["quit"], 1)):
        fresh, forked = (command([sys.executable, script, *argv], run_env(), input_text="hello\n", fork=fork)
                         for fork in (False, True))
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert fresh.returncode == status and fresh.stdout == f"{argv} True\nHELLO\n"
    sleep = tmp_path / "sleep.py"
    sleep.write_text("import time\ntime.sleep(60)\n")
    with pytest.raises(subprocess.TimeoutExpired):  # killed: the runner goes on with the next command
        command([sys.executable, sleep], run_env(), fork=True, timeout=1)
    assert command([sys.executable, script, "a"], run_env(), input_text="", fork=True).returncode == 0


def test_what_an_interpreter_reads_as_it_starts_needs_a_process_of_its_own():
    runner = forks(run_env())
    assert runner.fits(["fairseq-train"], run_env()) and runner.fits([sys.executable, "x.py"])
    assert not runner.fits(["fairseq-train"], {**run_env(), "PYTHONIOENCODING": "latin-1"})
    assert not runner.fits(["fairseq-train"], {**run_env(), "LD_PRELOAD": "x.so"})
    assert not runner.fits(["bash", "x.sh"]) and not runner.fits(["/usr/bin/python3", "x.py"])
