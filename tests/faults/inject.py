"""Test-only (tests/test_faults.py): run the WMT14 recipe with a signal sent in the middle of
one stage, at a point chosen by the test::

    python tests/faults/inject.py STAGE SIGNAL TRIGGER -- RECIPE OPTIONS...

SIGNAL: SIGTERM, SIGINT or SIGKILL to the recipe's own process; ``SIGINT@group`` (or any
signal with ``@group``) to its whole process group, as Ctrl-C in a terminal does (the commands
the recipe runs get it too; the recipe must lead its group: start it with start_new_session).
SIGTERM and SIGINT go through the recipe's own handling (attn_kit.cli.main_guard); SIGKILL
leaves everything as a hard kill does.

TRIGGER, all in STAGE:
``line:REGEX``: when a command prints a line that matches REGEX, after the recipe handled it
(the command is still running); ``step:N``: when the N-th step (a Python step or a command)
has just finished, before the stage renames its output into place; ``import:MODULE``: when the
recipe itself starts importing MODULE (a submodule: the signal comes in the middle of importing
its package, as a real one can); ``report``: when the recipe starts printing its final report,
after the last stage (STAGE is the last stage).

The recipe itself runs unchanged: only the stage library's Pipeline._run_one, Context.step,
Context.sh and stream, the recipe's report and the import system are watched, to find the moment.
One thing is added, so that a point names a state: a command the recipe follows is paused
(SIGSTOP) while the recipe handles each of its lines, so it never runs ahead of what the recipe
has read (a slow curves refresh would otherwise let fairseq-train save more checkpoints, even
finish, before the recipe reads "Saved checkpoint"). The signal comes once the command runs again,
except for ``import:`` (inside the recipe's handling of a line: the paused command gets its
SIGCONT on the way out), which is why SIGKILL, which has no way out, takes no ``import:``.
"""
import importlib.abc
import os
import re
import signal
import sys

from attn_kit.cli import main_guard
from attn_kit.pipeline import stages
from attn_kit.recipes import translation


def install(stage: str, sig: str, trigger: str):
    kind, _, arg = trigger.partition(":")
    name, _, group = sig.partition("@")
    number = getattr(signal, name)
    state = {"stage": None, "steps": 0, "fired": False}
    run_one, step, sh, stream, report = (stages.Pipeline._run_one, stages.Context.step, stages.Context.sh,
                                         stages.stream, translation.report)
    if group:
        assert group == "group" and os.getpgrp() == os.getpid(), "SIGNAL@group needs the recipe to lead its group"
    assert not (number == signal.SIGKILL and kind == "import"), "SIGKILL would leave a paused command paused"

    def fire(when: bool = True):
        if when and not state["fired"]:
            state["fired"] = True
            if group:
                os.killpg(0, number)
            else:
                os.kill(os.getpid(), number)

    def finished_step():
        if state["stage"] == stage and kind == "step":
            state["steps"] += 1
            fire(state["steps"] == int(arg))

    def patched_run_one(self, ctx, s, *args, **kwargs):
        state["stage"] = s.name
        return run_one(self, ctx, s, *args, **kwargs)

    def patched_step(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        finished_step()
        return out

    def patched_sh(self, *args, **kwargs):
        out = sh(self, *args, **kwargs)
        finished_step()
        return out

    def send(pids, number):
        for pid in pids:
            try:
                os.kill(pid, number)
            except ProcessLookupError:  # reaped already
                pass

    def children() -> set:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return {int(pid) for pid in f.read().split()}

    def patched_stream(cmd, on_line, **kwargs):
        others = children()

        def watch(line):
            command = children() - others  # the one this stream started
            send(command, signal.SIGSTOP)
            try:
                on_line(line)
            finally:
                send(command, signal.SIGCONT)
            fire(state["stage"] == stage and kind == "line" and re.search(arg, line) is not None)
        return stream(cmd, watch, **kwargs)

    def patched_report(*args, **kwargs):
        fire(kind == "report")
        return report(*args, **kwargs)

    class ImportWatch(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            fire(state["stage"] == stage and kind == "import" and fullname == arg)
            return None  # the import goes on as usual (or the signal ends it here)

    stages.Pipeline._run_one, stages.Context.step, stages.Context.sh = patched_run_one, patched_step, patched_sh
    stages.stream, translation.report = patched_stream, patched_report
    sys.meta_path.insert(0, ImportWatch())


if __name__ == "__main__":
    stage, sig, trigger, dashes, *options = sys.argv[1:]
    assert dashes == "--", "usage: inject.py STAGE SIGNAL TRIGGER -- RECIPE OPTIONS..."
    install(stage, sig, trigger)
    main_guard(translation.main, options, interrupted="interrupted; finished stages are kept, run the same command again to resume")
