"""Test-only (tests/test_faults.py): run the WMT14 recipe with a signal sent to its
own process in the middle of one stage, at a point chosen by the test::

    python tests/faults/inject.py STAGE SIGNAL TRIGGER -- RECIPE OPTIONS...

TRIGGER ``line:REGEX``: when a command of STAGE prints a line that matches REGEX
(the command is still running); ``step:N``: when the N-th step of STAGE (a
Python step or a command) has just finished, before the stage renames its
output into place. SIGTERM goes through the recipe's own handler
(attn_kit.cli.main_guard); SIGKILL leaves everything as a hard kill does.
The recipe itself runs unchanged: only the stage library's Context.step,
Context.sh and stream are wrapped, to find the moment.
"""
import os
import re
import signal
import sys

from attn_kit.cli import main_guard
from attn_kit.pipeline import stages
from attn_kit.recipes import wmt14


def install(stage: str, sig: int, trigger: str):
    kind, _, arg = trigger.partition(":")
    state = {"stage": None, "steps": 0}
    step, sh, stream = stages.Context.step, stages.Context.sh, stages.stream

    def fire():
        os.kill(os.getpid(), sig)

    def finished_step():
        if state["stage"] == stage and kind == "step":
            state["steps"] += 1
            if state["steps"] == int(arg):
                fire()

    def patched_step(self, *args, **kwargs):
        state["stage"] = self.stage
        out = step(self, *args, **kwargs)
        finished_step()
        return out

    def patched_sh(self, *args, **kwargs):
        state["stage"] = self.stage
        out = sh(self, *args, **kwargs)
        finished_step()
        return out

    def patched_stream(cmd, on_line, **kwargs):
        def watch(line):
            on_line(line)
            if state["stage"] == stage and kind == "line" and re.search(arg, line):
                fire()
        return stream(cmd, watch, **kwargs)

    stages.Context.step, stages.Context.sh, stages.stream = patched_step, patched_sh, patched_stream


if __name__ == "__main__":
    stage, sig, trigger, dashes, *options = sys.argv[1:]
    assert dashes == "--", "usage: inject.py STAGE SIGNAL TRIGGER -- RECIPE OPTIONS..."
    install(stage, getattr(signal, sig), trigger)
    main_guard(wmt14.main, options, interrupted="interrupted; finished stages are kept, run the same command again to resume")
