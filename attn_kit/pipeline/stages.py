"""A small stage library shared by the recipes (WMT14 EN-DE / EN-FR, WSJ parsing).

A recipe is a list of :class:`Stage` objects run in order by :class:`Pipeline`:

- **idempotent**: a stage that finished leaves a stamp ``WORKDIR/.stages/NAME.done``
  (written last, after every output is in place); on the next run it is skipped,
  unless one of its declared ``outputs`` has since disappeared.
- **resumable**: a stage killed half-way leaves no stamp and runs again; stages
  write their outputs under a temporary name and rename them when complete
  (:meth:`Context.output`), and fairseq-train resumes from ``checkpoint_last.pt``.
- ``--dry-run`` prints every command each stage would run and runs nothing.
- ``--stage N`` / ``--stop-stage M`` run only stages N..M (1-based numbers or names).
- a stage's declared ``inputs`` are checked before it starts: a missing one is
  one error line, not a traceback from deep inside the stage.

A failing command is reported as one line naming the stage, the exit status,
the last line the command printed and its log file; the recipe exits non-zero.
"""
import json
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

from ..cli import UserError, atomic_output, log, write_json_atomic
from .process import stream


@dataclass
class Stage:
    """One step of a recipe.

    ``run(ctx)`` does the work through ``ctx`` (:meth:`Context.sh`,
    :meth:`Context.step`, :meth:`Context.output`) so that --dry-run can print it.
    ``inputs`` must exist before it runs; ``outputs`` must all exist (besides
    its stamp) for it to count as done.
    """

    name: str
    run: Callable[["Context"], None]
    help: str = ""
    inputs: Sequence[Path] = ()
    outputs: Sequence[Path] = ()


@dataclass
class Context:
    workdir: Path
    dry_run: bool
    stage: str = ""
    log_dir: Path = field(init=False)
    timings: dict = field(default_factory=dict)

    def __post_init__(self):
        self.log_dir = self.workdir / "logs"

    def sh(self, cmd: List, stdin: Optional[Path] = None, stdout: Optional[Path] = None,
           env: Optional[dict] = None, tail: Union[int, Callable[[str], bool]] = 0):
        """Run ``cmd`` (a list); stdout goes to the ``stdout`` file if given,
        everything else to ``logs/STAGE.log``; ``tail`` > 0 echoes log lines
        containing progress to the console as they come (a function of the
        line instead picks the lines to echo)."""
        cmd = [str(c) for c in cmd]
        shown = " ".join([*(f"{k}={shlex.quote(str(v))}" for k, v in (env or {}).items()),
                          *(shlex.quote(c) for c in cmd)])
        if stdin:
            shown += f" < {shlex.quote(str(stdin))}"
        if stdout:
            shown += f" > {shlex.quote(str(stdout))}"
        print(f"  $ {shown}", flush=True)
        if self.dry_run:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{self.stage}.log"
        full_env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1", **(env or {}))
        with open(log_path, "a", encoding="utf-8") as log_file:
            log_file.write(f"$ {shown}\n")
            log_file.flush()

            def on_line(line: str):
                log_file.write(line)
                log_file.flush()  # the log is the place to watch a long stage
                if tail and (tail(line) if callable(tail) else _is_progress(line)):
                    print(f"    {line.rstrip()[:160]}", flush=True)

            try:
                rc, last = stream(cmd, on_line, env=full_env, stdin=stdin, stdout=stdout)
            except FileNotFoundError:
                raise UserError(f"stage {self.stage}: command not found: {cmd[0]}") from None
        if rc != 0:  # last: a tool's own one-line error (attn_plugin, our scripts) without "error: "
            raise UserError(f"stage {self.stage} failed (exit {rc}): {last[:300]}; log: {log_path}")

    def step(self, description: str, fn: Callable, *args, **kwargs):
        """A step done in Python; --dry-run prints its description only."""
        print(f"  # {description}", flush=True)
        if not self.dry_run:
            return fn(*args, **kwargs)

    def output(self, path: Path):
        """A temporary path (:func:`attn_kit.cli.atomic_output`), renamed to ``path``
        only if the block completes; with --dry-run, nothing is created or renamed."""
        return _DryOutput(path) if self.dry_run else atomic_output(path)


class _DryOutput:
    def __init__(self, path):
        from ..cli import partial_path

        self.tmp = partial_path(path)

    def __enter__(self):
        return self.tmp

    def __exit__(self, *exc):
        return False


def _is_progress(line: str) -> bool:
    return any(k in line for k in ("| train_inner |", "| valid |", "| train |", "Translated", "BLEU",
                                   "Stopping training", "Loaded checkpoint", "done training"))


class Pipeline:
    """Runs ``stages`` in order under ``workdir``; ``first``/``last`` (1-based
    numbers or stage names) select a range, ``dry_run`` only prints."""

    def __init__(self, workdir: Path, stages: List[Stage], dry_run=False,
                 first: Union[int, str, None] = 1, last: Union[int, str, None] = None,
                 aliases: Optional[Dict[str, tuple]] = None):
        self.workdir = Path(workdir)
        self.stages = stages
        self.dry_run = dry_run
        aliases = aliases or {}  # a name for a range of stages: (first, last)
        self.first = self._index(aliases[first][0] if first in aliases else first, 1)
        self.last = self._index(aliases[last][1] if last in aliases else last, len(stages))
        if not 1 <= self.first <= self.last <= len(stages):
            raise UserError(f"--stage/--stop-stage must satisfy 1 <= stage <= stop-stage <= {len(stages)} "
                              f"(stages: {self.names()})")

    def names(self) -> str:
        return ", ".join(f"{i} {s.name}" for i, s in enumerate(self.stages, 1))

    def _index(self, value, default: int) -> int:
        """A stage number from a 1-based number, a numeric string or a stage name."""
        if value is None:
            return default
        if isinstance(value, int) or str(value).isdigit():
            return int(value)
        for i, stage in enumerate(self.stages, 1):
            if stage.name == value:
                return i
        raise UserError(f"unknown stage {value!r}; stages: {self.names()}")

    def stamp(self, stage: Stage) -> Path:
        return self.workdir / ".stages" / f"{stage.name}.done"

    def is_done(self, stage: Stage) -> bool:
        """Stamped, and every declared output still there."""
        return self.stamp(stage).exists() and all(Path(p).exists() for p in stage.outputs)

    def run(self) -> dict:
        """Run the selected stages; return {stage name: seconds} of those that ran now."""
        ctx = Context(self.workdir, self.dry_run)
        n = len(self.stages)
        for i, stage in enumerate(self.stages, 1):
            tag = f"stage {i}/{n} {stage.name}"
            if not self.first <= i <= self.last:
                continue
            if self.is_done(stage) and not self.dry_run:
                log(f"{tag}: done already, skipping")
                continue
            if self.stamp(stage).exists() and not self.dry_run:
                log(f"{tag}: an output is missing, redoing it")
                self.stamp(stage).unlink()
            log(f"{tag}: {stage.help}" + (" (dry run)" if self.dry_run else ""))
            if not self.dry_run:
                missing = [str(p) for p in stage.inputs if not Path(p).exists()]
                if missing:
                    earlier = " (run the earlier stages first)" if i > 1 else ""
                    raise UserError(f"stage {stage.name}: missing input {missing[0]}{earlier}")
            ctx.stage = stage.name
            start = time.time()
            try:
                stage.run(ctx)
            except OSError as exc:  # a file problem inside a Python step: one line, no traceback
                raise UserError(f"stage {stage.name} failed: {exc}") from None
            seconds = round(time.time() - start, 1)
            if not self.dry_run:
                self.stamp(stage).parent.mkdir(parents=True, exist_ok=True)
                self.stamp(stage).write_text(json.dumps({"seconds": seconds, "finished": time.time()}))
                ctx.timings[stage.name] = seconds
                log(f"{tag}: finished in {seconds:.0f}s")
        return ctx.timings

    def stage_seconds(self) -> dict:
        """Wall time each finished stage took when it ran."""
        out = {}
        for stage in self.stages:
            if self.is_done(stage):
                try:
                    out[stage.name] = json.loads(self.stamp(stage).read_text())["seconds"]
                except (ValueError, KeyError):
                    pass
        return out


class TrainProgress:
    """A ``tail`` filter for :meth:`Context.sh` on fairseq-train: echoes validation
    and end-of-training lines, and for each progress line
    ``updates done/total, s/update, ETA`` from the update rate measured since the
    first progress line this run printed (so a resumed run is timed on its own)."""

    _UPDATES = re.compile(r"num_updates[= ](\d+)")  # "num_updates=50" (fairseq's simple format) or "| num_updates 50"

    def __init__(self, total: int, clock: Callable[[], float] = time.time):
        self.total, self.clock, self.start = total, clock, None

    def __call__(self, line: str) -> bool:
        m = self._UPDATES.search(line) if "| train_inner |" in line else None
        if not m:
            return any(k in line for k in ("| valid |", "Stopping training", "Loaded checkpoint", "done training"))
        done, now = int(m.group(1)), self.clock()
        if self.start is None:
            self.start = (now, done)
            print(f"    {done}/{self.total} updates", flush=True)
            return False
        t0, u0 = self.start
        rate = (now - t0) / max(1, done - u0)
        eta = max(0, self.total - done) * rate
        print(f"    {done}/{self.total} updates, {rate:.2f} s/update, ETA {int(eta // 60)}m{int(eta % 60):02d}s",
              flush=True)
        return False


def train_log_summary(train_log: Path) -> dict:
    """From a fairseq-train log: ``updates`` (the last update the run reached) and
    ``tokens_per_update``: the mean real (unpadded) target tokens (fairseq's
    ``wpb``) and source tokens (the plugin criterion's ``src_wpb``) per update,
    each progress line weighted by the updates it covers."""
    try:
        text = Path(train_log).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {"updates": None}
    # fairseq: "Saved checkpoint .../checkpoint_last.pt (epoch 1 @ 712 updates, ...)"
    last = re.findall(r"@ (\d+) updates", text) or re.findall(r"num_updates[ =](\d+)", text)
    out = {"updates": int(last[-1]) if last else None}
    sums, weight, previous = {"tgt": 0.0, "src": 0.0}, 0, 0
    for line in text.splitlines():
        if "| train_inner |" not in line:
            continue
        fields = dict(re.findall(r"(\w+)(?:=| )([\d.]+)(?:,|\s|$)", line.split("| train_inner |", 1)[1]))
        if "num_updates" not in fields or "wpb" not in fields:
            continue
        n = int(fields["num_updates"])
        w = n - previous if n > previous else 1
        previous = n
        sums["tgt"] += w * float(fields["wpb"])
        sums["src"] += w * float(fields.get("src_wpb", "nan"))
        weight += w
    if weight:
        out["tokens_per_update"] = {"target": round(sums["tgt"] / weight, 1),
                                    "source": None if sums["src"] != sums["src"] else round(sums["src"] / weight, 1),
                                    "updates_measured": weight}
    return out


def binarize(ctx: Context, src: str, tgt: str, text_dir: Path, dest: Path, workers: int):
    """fairseq-preprocess of ``text_dir/{train,valid,test}.{src,tgt}`` into ``dest``
    with one dictionary for both sides (the shared embeddings of Sec. 3.4 need it)."""
    with ctx.output(dest) as tmp:
        ctx.sh(["fairseq-preprocess", "--source-lang", src, "--target-lang", tgt,
                "--trainpref", text_dir / "train", "--validpref", text_dir / "valid", "--testpref", text_dir / "test",
                "--destdir", tmp, "--joined-dictionary", "--workers", workers])


def average_checkpoints(ctx: Context, ckpt_dir: Path, output: Path, n: int):
    """Average the last ``n`` update checkpoints of ``ckpt_dir`` into ``output``
    (Sec. 6.1) with :mod:`attn_kit.checkpoints` (scripts/average_checkpoints.py), fewer if fewer exist. The
    averaged set always ends at the run's final update (checkpoint_last.pt when
    the run did not end on a checkpoint interval); the paths and update numbers
    averaged go to :func:`averaged_info_path` (read it with :func:`read_averaged`)."""
    info = averaged_info_path(output)
    with ctx.output(output) as tmp:
        if not ctx.dry_run:
            from ..checkpoints import update_candidates

            have = len(update_candidates(ckpt_dir))
            if have == 0:
                raise UserError(f"no update checkpoints in {ckpt_dir}; did training run long enough?")
            if have < n:
                log(f"only {have} update checkpoints; averaging those")
                n = have
        ctx.sh([sys.executable, "-m", "attn_kit.checkpoints", "--inputs", ckpt_dir, "--num-update-checkpoints", n, "--output", tmp,
                "--info-json", info])


def averaged_info_path(output: Path) -> Path:
    """Where :func:`average_checkpoints` records what it averaged into ``output``."""
    return Path(output).with_suffix(".json")


def read_averaged(output: Path) -> Optional[dict]:
    """``{"paths": [...], "updates": [...]}`` (updates ascending, the last the
    final update) of the average in ``output``, or None if it was not recorded."""
    try:
        return json.loads(averaged_info_path(output).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run_recipe(args, stages: List[Stage], report: Callable[[dict], None], aliases: Optional[Dict[str, tuple]] = None):
    """Run ``stages`` as ``args`` (workdir, dry_run, stage, stop_stage) select
    (``aliases``: names for ranges of stages, see :class:`Pipeline`).
    If the run has results, record each stage's wall time in results.json,
    ``report(results)`` (the recipe prints its scores), then print the times."""
    pipeline = Pipeline(args.workdir, stages, args.dry_run, args.stage, args.stop_stage, aliases)
    if not args.dry_run:
        args.workdir.mkdir(parents=True, exist_ok=True)
    pipeline.run()
    path = args.workdir / "results.json"
    if args.dry_run or not path.exists():
        return
    results, seconds = json.loads(path.read_text()), pipeline.stage_seconds()
    if seconds and results.get("stage_seconds") != seconds:
        results.update(stage_seconds=seconds, total_seconds=round(sum(seconds.values()), 1))
        write_json_atomic(path, results)
    report(results)
    if seconds:
        print("\n" + stage_time_table(seconds))
    print(f"results: {path}")


def stage_time_table(seconds: dict) -> str:
    """Wall time per stage (as each stage took when it ran) and the total, as a small table."""
    width = max(len(name) for name in [*seconds, "total"])
    rows = [f"  {name:<{width}}  {_clock(s)}" for name, s in seconds.items()]
    return "\n".join(["stage times:", *rows, f"  {'total':<{width}}  {_clock(sum(seconds.values()))}"])


def _clock(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:6.1f}s"
    m, sec = divmod(int(round(seconds)), 60)
    return f"{m:3d}m{sec:02d}s"
