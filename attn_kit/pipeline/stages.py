"""The stage engine the recipes run on: :class:`Pipeline` runs a recipe's :class:`Stage` objects in order, each
skipped when a stamp says it is done with the same inputs and options, started over when one changed, resumed
when it was cut off; :func:`run_recipe` holds the work directory's lock for the whole run. A failing command is
one line naming the stage, the exit status, the command's last line and its log file."""
import json
import os
import shlex
import shutil
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..cli import UserError, atomic_output, log, partial_path, write_json_atomic
from .boundary import check_inside, open_no_follow
from .canary_check import check_earlier
from .download import read_json_or
from .fingerprint import Fingerprints, difference
from .lock import workdir_lock
from .process import stream


@dataclass
class Stage:
    """One step of a recipe. ``run(ctx)`` works through ``ctx`` (:meth:`Context.sh`, ``step``, ``output``) so
    that --dry-run can print it. ``inputs``: all it reads (a change starts it over); ``outputs``: all there and
    unchanged for it to count as done; ``options``: the settings that shape its outputs (JSON values), of which
    ``resumable`` ones run it again on top of its outputs; ``scratch``: more it leaves, set aside with its
    outputs; ``check()`` raises a UserError for incomplete outputs, before the stamp is written. ``home``: the
    folder of its stamp, logs and lock when not the work directory (a shared data folder), named by
    ``home_option`` in messages."""

    name: str
    run: Callable[["Context"], None]
    help: str = ""
    inputs: Sequence[Path] = ()
    outputs: Sequence[Path] = ()
    options: Dict[str, object] = field(default_factory=dict)
    resumable: Sequence[str] = ()
    scratch: Sequence[Path] = ()
    check: Optional[Callable[[], None]] = None
    home: Optional[Path] = None
    home_option: str = "--data-workdir"
    legacy: Optional[Callable[[str], object]] = None  # an option's value in a run stamped before it was recorded


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
           env: Optional[dict] = None, tail: Optional[Callable[[str], Union[bool, str]]] = None,
           workers: bool = False):
        """Run ``cmd``; stdout to the ``stdout`` file if given, everything else to ``logs/STAGE.log``. ``tail(line)``
        picks the log lines to echo: true for the line, a string to echo instead. ``workers``: the command runs a
        worker pool, watched (:class:`attn_kit.pipeline.process.WorkerWatch`) for a worker killed from outside."""
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
        with os.fdopen(open_no_follow(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a",
                       encoding="utf-8") as log_file:
            log_file.write(f"$ {shown}\n")
            log_file.flush()

            def on_line(line: str):
                log_file.write(line)
                log_file.flush()  # the log is the place to watch a long stage
                echo = tail(line) if tail else False
                if echo:
                    print(f"    {(echo if isinstance(echo, str) else line).rstrip()[:160]}", flush=True)

            try:
                rc, last = stream(cmd, on_line, env=full_env, stdin=stdin, stdout=stdout, watch_workers=workers)
            except FileNotFoundError:
                raise UserError(f"stage {self.stage}: command not found: {cmd[0]}") from None
            except UserError as exc:  # a worker of its pool killed from outside (process.WorkerWatch)
                raise UserError(f"stage {self.stage}: {exc}") from None
        if rc != 0:  # last: a tool's own one-line error (attn_plugin, our scripts) without "error: "
            raise UserError(f"stage {self.stage} failed (exit {rc}): {last[:300]}; log: {log_path}")

    def step(self, description: str, fn: Callable, *args, **kwargs):
        """A step done in Python; --dry-run prints its description only."""
        print(f"  # {description}", flush=True)
        if not self.dry_run:
            return fn(*args, **kwargs)

    def output(self, path: Path):
        """A temporary path (:func:`attn_kit.cli.atomic_output`), renamed to ``path`` only if the block
        completes; with --dry-run, nothing is created or renamed."""
        return nullcontext(partial_path(path)) if self.dry_run else atomic_output(path)


def _plain(value):
    """``value`` as it reads back from JSON (tuples as lists, paths as strings)."""
    return json.loads(json.dumps(value, default=str))


class Pipeline:
    """Runs ``stages`` in order under ``workdir``; ``first``/``last`` (1-based numbers or stage names, or
    ``aliases`` of ranges) select a range, ``dry_run`` only prints. A finished stage leaves
    ``WORKDIR/.stages/NAME.done``, written last, with the fingerprints of its inputs, outputs and options: a later
    run skips it only if all are as recorded. A changed input or option starts it over (and so every stage that
    reads it), its old outputs set aside in ``WORKDIR/stale/NAME/``; a damaged output is set aside and made
    again; a ``resumable`` option runs it again on top of its outputs; a stage killed half-way resumes unless
    the inputs in ``.stages/NAME.started`` changed. A stage's ``home`` (a shared ``--data-workdir``) keeps its
    stamps, logs and set-asides and is locked while it runs, and is never started over (refused in one line).
    docs/faults.md says what each fault does.
    """

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
        self._fingerprints: Dict[Path, Fingerprints] = {}

    def home(self, stage: Stage) -> Path:
        """The folder of ``stage``'s stamp, logs and set-aside outputs: its ``home`` or the work directory."""
        return Path(stage.home) if stage.home is not None else self.workdir

    def _homes(self) -> List[Path]:
        return [self.workdir, *dict.fromkeys(Path(s.home) for s in self.stages if s.home is not None)]

    def fingerprints_of(self, stage: Optional[Stage] = None) -> Fingerprints:
        """The fingerprints of ``stage``'s home (default: the work directory), cached in its .stages/;
        paths in the pipeline's other homes are keyed relative to it (``../DATA/...``)."""
        root = self.home(stage) if stage is not None else self.workdir
        if root not in self._fingerprints:
            self._fingerprints[root] = Fingerprints(root, root / ".stages" / "fingerprints.json", near=self._homes())
        return self._fingerprints[root]

    def _save_fingerprints(self):
        for fingerprints in self._fingerprints.values():
            fingerprints.save()

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
        return self.home(stage) / ".stages" / f"{stage.name}.done"

    def started(self, stage: Stage) -> Path:
        return self.home(stage) / ".stages" / f"{stage.name}.started"

    # ------------------------------------------------------------------ what a stage needs
    def _changed(self, stage: Stage, record: dict, resumable: bool = False) -> Optional[str]:
        """The first option (``resumable``: only those in stage.resumable; else only the others) or, unless
        ``resumable``, input that differs from ``record``, in words."""
        before, now = record.get("options", {}), _plain(stage.options)
        for name in sorted(set(before) & set(now)):
            if before[name] != now[name] and (name in stage.resumable) == resumable:
                return f"option {name} changed ({before[name]} -> {now[name]})"
        for name in sorted(set(now) - set(before)):  # a stamp from before the option was recorded
            was = stage.legacy(name) if stage.legacy else None
            if was is not None and was != now[name] and (name in stage.resumable) == resumable:
                return f"option {name} changed ({was} -> {now[name]}, as the stage's own records say)"
        if resumable:
            return None
        inputs, fingerprints = record.get("inputs", {}), self.fingerprints_of(stage)
        keys = [fingerprints.key(path) for path in stage.inputs]
        for path, key in zip(stage.inputs, keys):
            if key in inputs and Path(path).exists():  # a missing input is reported when the stage must run
                change = difference(key, inputs[key], fingerprints.of(path), "since the stage ran")
                if change:
                    return f"input {change}"
        # inputs read from another place than before (another --data-workdir): the same files, or a change
        moved = [(path, key) for path, key in zip(stage.inputs, keys) if key not in inputs]
        before = [(key, value) for key, value in inputs.items() if key not in keys]
        if moved and len(moved) == len(before):
            for (path, key), (old, value) in zip(moved, before):
                if Path(path).exists() and fingerprints.of(path) != value:
                    return f"input {key} differs from {old}, which the stage read when it ran"
        return None

    def status(self, stage: Stage) -> Tuple[str, str, List[Path]]:
        """(what to do, why, outputs to set aside first): ``skip``; ``adopt`` (an older stamp without
        fingerprints: skip and record them); ``run`` (never started); ``resume`` (an earlier run stopped during
        it); ``over`` (an input or option changed); ``continue`` (a resumable option changed); ``redo`` (an output
        is missing or changed since the stage made it)."""
        done = read_json_or(self.stamp(stage)) if self.stamp(stage).exists() else None
        if done is None:
            started = read_json_or(self.started(stage))
            if started is None:
                return "run", "", []
            why = self._changed(stage, started)
            return ("over", why, []) if why else ("resume", "an earlier run stopped during this stage", [])
        if "inputs" not in done:
            missing = [p for p in stage.outputs if not Path(p).exists()]
            if missing:
                return "redo", f"output {self.fingerprints_of(stage).key(missing[0])} is missing", []
            return "adopt", "", []
        why = self._changed(stage, done)
        if why:
            return "over", why, []
        outputs, damaged, reason, fingerprints = done.get("outputs", {}), [], "", self.fingerprints_of(stage)
        for path in stage.outputs:
            key = fingerprints.key(path)
            now = fingerprints.of(path)
            change = difference(key, outputs[key], now, "since the stage made it") if key in outputs else (
                None if now is not None else f"{key} is missing")
            if change:
                damaged.append(Path(path))
                reason = reason or f"output {change}"
        if damaged:
            return "redo", reason, damaged
        why = self._changed(stage, done, resumable=True)
        return ("continue", why, []) if why else ("skip", "", [])

    def _set_aside(self, stage: Stage, paths: Sequence[Path]) -> str:
        """Move ``paths`` (those that exist) to WORKDIR/stale/STAGE/ (STAGE.2/, ... beside an earlier set-aside:
        never deleted), whole or not at all; return where, or "" if nothing was moved. They are gathered in a
        folder of their own first; a move that fails puts back those already moved and ends in one line."""
        home = self.home(stage)
        aside = home / "stale" / stage.name
        gathering = home / "stale" / f".{stage.name}.partial"
        for folder in (home / "stale", aside, gathering):  # nothing removed or moved through a link out of the home
            if folder.exists() or folder.is_symlink():
                check_inside(folder, home)

        def gathered(path: Path) -> Path:
            key = self.fingerprints_of(stage).key(path)
            return gathering / (key if not (Path(key).is_absolute() or key.startswith("../")) else path.name)

        paths = [Path(p) for p in paths]
        paths = [p for p in paths if not any(q != p and q in p.parents for q in paths)]  # a folder takes its files
        if gathering.exists():  # a set-aside a SIGKILL stopped half-way: what it had moved goes back first
            for path in paths:
                if not (path.exists() or path.is_symlink()) and gathered(path).exists():
                    shutil.move(str(gathered(path)), str(path))
            if any(gathering.rglob("*")):  # not ours to know where it came from: kept, never removed
                os.replace(gathering, gathering.with_name(f"{gathering.name}.{int(time.time())}"))
            else:
                shutil.rmtree(gathering)
        existing = [p for p in paths if p.exists() or p.is_symlink()]
        if not existing:
            return ""
        moved = []
        try:
            for path in existing:
                target = gathered(path)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(path), str(target))  # os.rename, or copy and remove across file systems
                moved.append((path, target))
        except OSError as exc:
            for path, target in reversed(moved):
                shutil.move(str(target), str(path))
            shutil.rmtree(gathering, ignore_errors=True)
            raise UserError(f"stage {stage.name}: could not set its old outputs aside in {aside} ({exc.strerror or exc}"
                            f"{': ' + str(exc.filename) if getattr(exc, 'filename', None) else ''}); nothing was "
                            "moved or removed") from None
        n = 1
        while aside.exists() or aside.is_symlink():
            n += 1
            aside = home / "stale" / f"{stage.name}.{n}"
        os.replace(gathering, aside)
        return f"{aside}/"

    def _inside(self, path, stage: Optional[Stage] = None) -> bool:
        """Whether ``path`` is in the pipeline's folders (its work directory, a stage's home)."""
        return not Path(self.fingerprints_of(stage).key(path)).is_absolute()

    def _record(self, stage: Stage, outputs: bool) -> dict:
        fingerprints = self.fingerprints_of(stage)
        record = {"options": _plain(stage.options), "inputs": fingerprints.record(stage.inputs)}
        if outputs:
            record["outputs"] = fingerprints.record(stage.outputs)
        return record

    def note_rewritten(self, path: Path):
        """``path``, a finished stage's output, was rewritten on purpose (the stage times in results.json, an
        earlier canary's check in canary.json): record its new fingerprint in the stamp of the stage that made
        it, one of this pipeline's, else of another run in the work directory (else a --canary would rerun)."""
        ours = [(self.stamp(stage), self.fingerprints_of(stage)) for stage in self.stages]
        others = [(stamp, self.fingerprints_of()) for stamp in sorted((self.workdir / ".stages").glob("*.done"))
                  if stamp not in {s for s, _ in ours}]
        for stamps in (ours, others):
            found = False
            for stamp, fingerprints in stamps:
                key = fingerprints.key(path)
                done = read_json_or(stamp) or {}
                if key in done.get("outputs", {}):
                    done["outputs"][key] = fingerprints.of(path)
                    write_json_atomic(stamp, done)
                    found = True
            if found:
                break
        self._save_fingerprints()

    # ------------------------------------------------------------------ running
    def check_shared_homes(self):
        """A shared folder (``--data-workdir``) holds only what this pipeline's stages there make: stamps of
        other stages mean another recipe or corpus prepared it: one UserError naming both."""
        names = {s.name for s in self.stages}  # a folder that was a whole run's work directory has its later stages
        for home in self._homes()[1:]:
            mine = {s.name for s in self.stages if s.home is not None and Path(s.home) == home}
            stamps = {p.name[:-len(".done")] for p in (home / ".stages").glob("*.done")}
            if stamps - names:
                option = next(s.home_option for s in self.stages if s.home is not None and Path(s.home) == home)
                raise UserError(f"{option} {home} holds data another recipe or corpus prepared (its stages: "
                                f"{', '.join(sorted(stamps))}; this run's there: {', '.join(sorted(mine))}): give "
                                f"this run a {option} of its own")

    def check_own_outputs(self):
        """A file where a selected stage would write, with no stamp of a run of it, was not made by this
        pipeline (a user's own results.json in --workdir): one UserError before anything runs."""
        for i, stage in enumerate(self.stages, 1):
            if not self.first <= i <= self.last or self.stamp(stage).exists() or self.started(stage).exists():
                continue
            found = next((Path(p) for p in stage.outputs if Path(p).exists() or Path(p).is_symlink()), None)
            if found is not None:
                raise UserError(f"{found} is there, but no run of stage {stage.name} made it ({self.home(stage)} has "
                                f"no stamp of it in .stages/): the stage would replace it; give a new folder, or move "
                                "it away (nothing was touched)")

    def run(self) -> dict:
        """Run the selected stages; return {stage name: seconds} of those that ran now."""
        self.check_shared_homes()
        if not self.dry_run:  # (a dry run writes nothing)
            self.check_own_outputs()
        ctx = Context(self.workdir, self.dry_run)
        n = len(self.stages)
        with ExitStack() as held:
            locked = None  # the home (other than the work directory) whose lock is held now
            earlier_runs = False  # the dry run: whether a stage before this one would run
            for i, stage in enumerate(self.stages, 1):
                tag = f"stage {i}/{n} {stage.name}"
                if not self.first <= i <= self.last:
                    continue
                ctx.stage, ctx.log_dir = stage.name, self.home(stage) / "logs"
                if self.dry_run:
                    would, runs = self._would(stage, earlier_runs)
                    earlier_runs = earlier_runs or runs
                    log(f"{tag}: {stage.help} (dry run{f', in {stage.home}' if stage.home is not None else ''}"
                        f"{would})")
                    stage.run(ctx)
                    continue
                if stage.home is not None and Path(stage.home) != locked:
                    held.close()  # one home at a time: its stages are consecutive
                    if self._read_only_and_done(Path(stage.home)):
                        log(f"{stage.home_option} {stage.home}: read-only, its stages done: read as it is")
                    else:
                        held.enter_context(workdir_lock(stage.home, stage.home_option, wait=True))
                    locked = Path(stage.home)
                elif stage.home is None and locked is not None:
                    held.close()
                    locked = None
                self._run_one(ctx, stage, i, tag)
        return ctx.timings

    def _read_only_and_done(self, home: Path) -> bool:
        """Whether the shared folder ``home`` is read-only with every selected stage of it done: a run then
        only reads it and takes no lock (which would fail there)."""
        if not home.is_dir() or os.access(home, os.W_OK):
            return False
        mine = [s for i, s in enumerate(self.stages, 1)
                if self.first <= i <= self.last and s.home is not None and Path(s.home) == home]
        return all(self.status(s)[0] == "skip" for s in mine)

    def _would(self, stage: Stage, earlier_runs: bool) -> Tuple[str, bool]:
        """For the dry run: what a run would do with ``stage`` now (a clause, "" if never run), and whether it runs."""
        action, why, _ = self.status(stage)
        if action in ("skip", "adopt"):
            return ("; done: a run would skip it" + (" unless a stage before it changes its inputs"
                                                     if earlier_runs else ""), False)
        return {"run": "", "resume": "; an earlier run stopped during it: a run would resume it",
                "over": f"; {why}: a run would start it over, its old outputs set aside in stale/",
                "redo": f"; {why}: a run would run it again, the damaged outputs set aside in stale/",
                "continue": f"; {why}: a run would run it again on top of its outputs"}[action], True

    def _run_one(self, ctx: "Context", stage: Stage, i: int, tag: str):
        action, why, damaged = self.status(stage)
        if action in ("skip", "adopt"):
            if action == "adopt":  # finished before stamps held fingerprints: trust it, record them now
                done = read_json_or(self.stamp(stage)) or {}
                write_json_atomic(self.stamp(stage), {**done, **self._record(stage, outputs=True)})
                self._save_fingerprints()
            log(f"{tag}: done already, skipping" + (f" (in {stage.home})" if stage.home is not None else ""))
            return
        if action == "over" and stage.home is not None:  # other runs may read what it made: never redone under them
            raise UserError(f"{stage.home_option} {stage.home} was prepared with other settings (stage {stage.name}: "
                            f"{why}) and other runs may use it: give another {stage.home_option} for these "
                            f"settings, or remove {stage.home} to prepare it again")
        if action == "over":
            moved = self._set_aside(stage, [*stage.outputs, *stage.scratch])
            log(f"{tag}: {why}; starting it over" + (f" (its old outputs moved to {moved})" if moved else ""))
        elif action == "redo":
            moved = self._set_aside(stage, damaged)
            log(f"{tag}: {why}; running it again" + (f" (moved to {moved})" if moved else ""))
        elif action == "continue":
            log(f"{tag}: {why}; running it again on top of its outputs")
        elif action == "resume":
            log(f"{tag}: {why}; resuming it")
        self.stamp(stage).unlink(missing_ok=True)
        log(f"{tag}: {stage.help}")
        # inputs an earlier stage makes (in the work directory); the stage checks the user's own files itself
        missing = [str(p) for p in stage.inputs if not Path(p).exists() and self._inside(p, stage)]
        if missing:
            earlier = " (run the earlier stages first)" if i > 1 else ""
            raise UserError(f"stage {stage.name}: missing input {missing[0]}{earlier}")
        self.started(stage).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.started(stage), self._record(stage, outputs=False))
        self._save_fingerprints()
        ctx.stage = stage.name
        start = time.time()
        try:
            stage.run(ctx)
            lost = [str(p) for p in stage.outputs if not Path(p).exists()]
            if lost:
                raise UserError(f"stage {stage.name} finished without making {lost[0]}")
            if stage.check:
                try:
                    stage.check()
                except UserError as exc:  # not trusted, so not kept where a rerun would resume from it
                    moved = self._set_aside(stage, stage.outputs)
                    raise UserError(f"stage {stage.name} made incomplete output: {exc} (its outputs moved to "
                                    f"{moved})") from None
        except OSError as exc:  # a file problem inside a Python step: one line, no traceback
            raise UserError(f"stage {stage.name} failed: {exc}") from None
        seconds = round(time.time() - start, 1)
        write_json_atomic(self.stamp(stage), {"seconds": seconds, "finished": time.time(),
                                              **self._record(stage, outputs=True)})
        self.started(stage).unlink(missing_ok=True)
        self._save_fingerprints()
        ctx.timings[stage.name] = seconds
        log(f"{tag}: finished in {seconds:.0f}s")

    def stage_seconds(self) -> dict:
        """Wall time each finished stage (stamped, its outputs there) took when it ran."""
        out = {}
        for stage in self.stages:
            if self.stamp(stage).exists() and all(Path(p).exists() for p in stage.outputs):
                try:
                    out[stage.name] = json.loads(self.stamp(stage).read_text())["seconds"]
                except (ValueError, KeyError):
                    pass
        return out


def run_recipe(args, stages: List[Stage], report: Callable[[dict], None], aliases: Optional[Dict[str, tuple]] = None):
    """Run ``stages`` as ``args`` (workdir, dry_run, stage, stop_stage) select, holding the work directory's
    lock. If the run has results: record the stage times in results.json, check an earlier canary there
    against it (:func:`attn_kit.pipeline.canary_check.check_earlier`), ``report(results)``, print the times."""
    pipeline = Pipeline(args.workdir, stages, args.dry_run, args.stage, args.stop_stage, aliases)
    if args.dry_run:
        pipeline.run()
        return
    with workdir_lock(args.workdir):
        pipeline.run()
        canary = getattr(args, "canary", False)  # a canary's results are its canary.json (attn_kit.recipes.canary)
        path = args.workdir / ("canary/canary.json" if canary else "results.json")
        if not path.exists():
            return
        results, seconds = json.loads(path.read_text()), pipeline.stage_seconds()
        if seconds and results.get("stage_seconds") != seconds and not canary:
            results.update(stage_seconds=seconds, total_seconds=round(sum(seconds.values()), 1))
            write_json_atomic(path, results)
            pipeline.note_rewritten(path)
        # a canary that ran here before this run: its prediction beside the run, here for every recipe
        if not canary and check_earlier(args.workdir, getattr(args, "data_workdir", None)):
            pipeline.note_rewritten(args.workdir / "canary" / "canary.json")
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
