"""The stage engine the recipes run on: a recipe is a list of :class:`Stage` objects that
:class:`Pipeline` runs in order, each skipped when a stamp says it is done with the same
inputs and options, started over when one changed, resumed when it was cut off. ``--dry-run``
prints every command, ``--stage``/``--stop-stage`` pick a range; :func:`run_recipe` holds
the work directory's lock for the whole run. A failing command is one line naming the
stage, the exit status, the command's last line and its log file."""
import json
import os
import shlex
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..cli import UserError, atomic_output, log, partial_path, write_json_atomic
from .boundary import check_inside, open_no_follow
from .canary_check import check_earlier
from .fingerprint import Fingerprints, difference
from .lock import workdir_lock
from .process import stream


@dataclass
class Stage:
    """One step of a recipe.

    ``run(ctx)`` does the work through ``ctx`` (:meth:`Context.sh`,
    :meth:`Context.step`, :meth:`Context.output`) so that --dry-run can print it.
    ``inputs`` (files or folders) are everything it reads: they must exist before
    it runs, and a change to one makes it start over. ``outputs`` must all exist,
    unchanged since it made them, for it to count as done. ``options``: the
    settings that shape its outputs (JSON values); ``resumable``: those of them
    whose change runs it again on top of its outputs rather than from scratch.
    ``scratch``: more of what it leaves (partial work, logs) that goes aside with
    its outputs when it starts over. ``check()`` raises a UserError if the
    outputs are incomplete; it runs before the stamp is written. ``legacy(name)``:
    the value of an option that a stamp written before the option was recorded
    lacks, as the stage's own records say (None: unknown, taken as unchanged). ``home``: the
    folder that holds its stamp, logs and lock when it is not the pipeline's work
    directory (a shared data folder: see :class:`Pipeline`); ``home_option``: the
    option that names it, for messages.
    """

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
        """Run ``cmd`` (a list); stdout goes to the ``stdout`` file if given,
        everything else to ``logs/STAGE.log``; ``tail``, a function of each log
        line, picks the lines to echo to the console as they come: true to echo
        the line, a string to echo that instead (e.g.
        :func:`attn_kit.fairseq_layer.fairseq_log.progress_line`). ``workers``: the command runs a pool of worker
        processes, watched (:class:`attn_kit.pipeline.process.WorkerWatch`): one killed from outside
        fails the stage in one line instead of leaving it waiting forever."""
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
        """A temporary path (:func:`attn_kit.cli.atomic_output`), renamed to ``path``
        only if the block completes; with --dry-run, nothing is created or renamed."""
        return _DryOutput(path) if self.dry_run else atomic_output(path)


class _DryOutput:
    def __init__(self, path):
        self.tmp = partial_path(path)

    def __enter__(self):
        return self.tmp

    def __exit__(self, *exc):
        return False


def _plain(value):
    """``value`` as it reads back from JSON (tuples as lists, paths as strings)."""
    return json.loads(json.dumps(value, default=str))


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class Pipeline:
    """Runs ``stages`` in order under ``workdir``; ``first``/``last`` (1-based
    numbers or stage names) select a range, ``dry_run`` only prints.

    - **idempotent**: a stage that finished leaves a stamp ``WORKDIR/.stages/NAME.done``
      (written last, after its outputs passed their completeness check). The stamp
      records the fingerprints (size, sha256: :mod:`attn_kit.pipeline.fingerprint`)
      of the stage's declared ``inputs`` and ``outputs`` and the ``options`` that
      shape it. A later run skips the stage only if all of them are as recorded:
    - **nothing stale**: when an input or an option changed, the stage starts over
      (its old outputs are moved to ``WORKDIR/stale/NAME/``, or ``NAME.2/``, ... beside an earlier
      set-aside: never deleted) and the
      recipe says which in one line; what it makes then differs, so every stage
      that reads it starts over in turn. A stage whose output was damaged or deleted
      since is run again (the damaged file moved aside first). An option listed in
      ``resumable`` (training's ``--max-update``) runs the stage again on top of
      its outputs instead. Unchanged files cost a ``stat``, so a finished run
      reruns in seconds.
    - **resumable**: a stage killed half-way leaves no stamp and runs again; stages
      write their outputs under a temporary name and rename them when complete
      (:meth:`Context.output`), and a training resumes from its checkpoints.
      ``.stages/NAME.started`` records the inputs it started from: if they changed
      before the rerun, the stage starts over instead of resuming.
    - ``--dry-run`` prints every command each stage would run and runs nothing.
    - ``--stage N`` / ``--stop-stage M`` run only stages N..M (1-based numbers or names).
    - a stage's declared ``inputs`` that earlier stages make are checked before it
      starts: a missing one is one error line, not a traceback from deep inside the
      stage (inputs outside the work directory, the user's data, the stage checks
      itself, with a message that knows what they are).
    - one run per work directory: :func:`run_recipe` holds
      :func:`attn_kit.pipeline.lock.workdir_lock` for the whole run.
    - stages that live in another folder (``Stage.home``: the data stages in a
      ``--data-workdir`` that several runs share) keep their stamps, logs and set-aside
      outputs there, and run holding that folder's lock (a second run waits for it, then
      finds them done). Such a folder is never started over: a stage there whose inputs
      or options differ from those it was done with is refused in one line, since other
      runs may be reading what it made.
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

    def shared(self, stage: Stage) -> bool:
        """Whether ``stage`` lives in a folder of its own (:attr:`Stage.home`), which other runs may share."""
        return stage.home is not None

    def _homes(self) -> List[Path]:
        return [self.workdir, *dict.fromkeys(Path(s.home) for s in self.stages if s.home is not None)]

    def fingerprints_of(self, stage: Optional[Stage] = None) -> Fingerprints:
        """The fingerprints of ``stage``'s home (default: the work directory), cached in its .stages/;
        paths in the pipeline's other homes are keyed relative to it (``../DATA/...``)."""
        root = self.home(stage) if stage is not None else self.workdir
        if root not in self._fingerprints:
            self._fingerprints[root] = Fingerprints(root, root / ".stages" / "fingerprints.json", near=self._homes())
        return self._fingerprints[root]

    @property
    def fingerprints(self) -> Fingerprints:
        return self.fingerprints_of()

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

    def is_done(self, stage: Stage) -> bool:
        """Stamped, and every declared output still there (see :meth:`status` for the full check)."""
        return self.stamp(stage).exists() and all(Path(p).exists() for p in stage.outputs)

    # ------------------------------------------------------------------ what a stage needs
    def _changed(self, stage: Stage, record: dict, resumable: bool = False) -> Optional[str]:
        """The first option (``resumable``: only those in stage.resumable; else only the
        others) or, unless ``resumable``, input that differs from ``record``, in words."""
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
        """(what to do, why, outputs to set aside first): ``skip``; ``adopt`` (a stamp of an
        earlier version without fingerprints: skip and record them); ``run`` (never
        started); ``resume`` (an earlier run stopped during it); ``over`` (an input or
        option changed: start over); ``continue`` (a resumable option changed); ``redo``
        (an output is missing or changed since the stage made it)."""
        done = _read_json(self.stamp(stage)) if self.stamp(stage).exists() else None
        if done is None:
            started = _read_json(self.started(stage))
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
        """Move ``paths`` (those that exist) to WORKDIR/stale/STAGE/ (STAGE.2/, ... beside an earlier
        set-aside: what is set aside is never deleted, a user's file in a stage's folder included), whole
        or not at all; return where, or "" if nothing was moved. A path inside another one goes with it;
        they are gathered in a folder of their own first (a move across file systems copies, then
        removes), and a move that fails puts back those already moved and ends in one line, every
        output where it was."""
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
        """``path``, an output of a finished stage, was rewritten on purpose (run_recipe adds
        the stage times to results.json, an earlier canary's check to its canary.json): record its
        new fingerprint in the stamp of the stage that made it: one of this pipeline's, else one
        of another run in the work directory (the canary's: else a --canary run again would redo it)."""
        ours = [(self.stamp(stage), self.fingerprints_of(stage)) for stage in self.stages]
        others = [(stamp, self.fingerprints) for stamp in sorted((self.workdir / ".stages").glob("*.done"))
                  if stamp not in {s for s, _ in ours}]
        for stamps in (ours, others):
            found = False
            for stamp, fingerprints in stamps:
                key = fingerprints.key(path)
                done = _read_json(stamp) or {}
                if key in done.get("outputs", {}):
                    done["outputs"][key] = fingerprints.of(path)
                    write_json_atomic(stamp, done)
                    found = True
            if found:
                break
        self._save_fingerprints()

    # ------------------------------------------------------------------ running
    def check_shared_homes(self):
        """A shared folder (a stage's :attr:`Stage.home`, ``--data-workdir``) holds only what this
        pipeline's stages there make: stamps of other stages mean another recipe or corpus prepared
        it (recipes/parallel.sh on a folder of wmt14_en_de.sh --smoke found every stage done and would
        train on the WMT text): one UserError naming both."""
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
        """A file where a selected stage would write, in a folder no run of it has stamped, was not made
        by this pipeline (a user's own results.json in the folder given as --workdir): one UserError
        before anything runs, where the stage would have replaced it."""
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
        """Whether the shared folder ``home`` cannot be written and every selected stage of it is done: a
        run then only reads it and needs no lock (taking one would fail on a read-only data folder)."""
        if not home.is_dir() or os.access(home, os.W_OK):
            return False
        mine = [s for i, s in enumerate(self.stages, 1)
                if self.first <= i <= self.last and s.home is not None and Path(s.home) == home]
        return all(self.status(s)[0] == "skip" for s in mine)

    def _would(self, stage: Stage, earlier_runs: bool) -> Tuple[str, bool]:
        """For the dry run: what a run would do with ``stage`` as the folders are now (a clause,
        "" for a stage that never ran), and whether it would run. Nothing is written."""
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
                done = _read_json(self.stamp(stage)) or {}
                write_json_atomic(self.stamp(stage), {**done, **self._record(stage, outputs=True)})
                self._save_fingerprints()
            log(f"{tag}: done already, skipping" + (f" (in {stage.home})" if stage.home is not None else ""))
            return
        if action == "over" and self.shared(stage):  # other runs may read what it made: never redone under them
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
        """Wall time each finished stage took when it ran."""
        out = {}
        for stage in self.stages:
            if self.is_done(stage):
                try:
                    out[stage.name] = json.loads(self.stamp(stage).read_text())["seconds"]
                except (ValueError, KeyError):
                    pass
        return out


def run_recipe(args, stages: List[Stage], report: Callable[[dict], None], aliases: Optional[Dict[str, tuple]] = None):
    """Run ``stages`` as ``args`` (workdir, dry_run, stage, stop_stage) select
    (``aliases``: names for ranges of stages, see :class:`Pipeline`), holding the
    work directory's lock (:func:`attn_kit.pipeline.lock.workdir_lock`: one run per
    work directory). If the run has results, record each stage's wall time in
    results.json, check a canary that ran before it in the work directory against it
    (:func:`attn_kit.pipeline.canary_check.check_earlier`), ``report(results)`` (the recipe
    prints its scores), then print the times."""
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
