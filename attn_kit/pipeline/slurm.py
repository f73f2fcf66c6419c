"""Recipes as Slurm jobs (``--launcher slurm``, docs/scaling.md): the sbatch scripts a recipe writes
(:func:`sbatch_script`: a data job and a training job, requeued before a time limit) and their submission."""
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from dataclasses import dataclass
from typing import List, Optional, Sequence

from ..cli import UsageError, UserError, log, one_line, write_json_atomic, write_text_atomic
from .download import read_json_or

PREP_SCRIPT = "prepare.sbatch"  # the data job's
SCRIPT = "train.sbatch"  # the training job's
RECORD = "slurm_job.json"


def _quote(args: Sequence) -> str:
    return " ".join(shlex.quote(str(a)) for a in args)


def _plain(what: str, value) -> str:
    """``value`` for a Slurm script, refused with a line break (sbatch would stop reading #SBATCH directives
    there, dropping --requeue, --signal and --output silently)."""
    return one_line(what, value, "a Slurm script")


def _directive(option: str, value) -> str:
    """An #SBATCH value: a plain word, or double-quoted when it holds spaces; a quote in it is refused."""
    text = _plain(option, value)
    if '"' in text:
        raise UsageError(f"{option} {text!r}: a Slurm directive cannot hold a double quote")
    return f'"{text}"' if any(c.isspace() for c in text) else text


@dataclass(frozen=True)
class Allocation:
    """What a job asks Slurm for (None: Slurm's default); ``cpus_per_task`` and ``mem`` are each task's."""
    nnodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    cpus_per_task: Optional[int] = None
    mem: Optional[str] = None
    partition: Optional[str] = None
    time_limit: Optional[str] = None
    account: Optional[str] = None


def sbatch_script(job_command: List[str], workdir: Path, script: str = SCRIPT, alloc: Allocation = Allocation(),
                  signal_seconds: int = 0, env: Optional[dict] = None, cwd: Optional[Path] = None,
                  watch: Optional[Path] = None) -> str:
    """The text of WORKDIR/``script``: an sbatch script that runs ``job_command`` once, on the first node of
    ``alloc``; ``signal_seconds`` > 0: stop and requeue that long before the time limit (USR1) if ``watch``
    (default ``workdir``) shows it saved something since it started, so that a ``--time`` too short for one
    checkpoint cannot requeue forever; SIGTERM (scancel, preemption) is passed on without requeueing. It exports
    ``SRUN_CPUS_PER_TASK`` (from Slurm 22.05 srun no longer passes ``--cpus-per-task`` on). fairseq-train cannot
    save on the signal: the work since the last checkpoint is lost, as at a crash (docs/scaling.md)."""
    for what, value in (("--workdir", workdir), ("the working directory", cwd or Path.cwd()),
                        *((f"the environment variable {k}", f"{k}={v}") for k, v in (env or {}).items()),
                        *(("an argument of the job's command", a) for a in job_command)):
        _plain(what, value)  # every value the script holds, before any is written
    job_name = re.sub(r"[^A-Za-z0-9._-]", "_", f"attn-{workdir.name}-{Path(script).stem}")
    a = alloc
    directives = [("job-name", job_name), ("nodes", a.nnodes), ("ntasks-per-node", a.tasks_per_node)]
    for key, value in (("gpus-per-node", a.gpus_per_node), ("cpus-per-task", a.cpus_per_task), ("mem", a.mem),
                       ("partition", a.partition), ("time", a.time_limit), ("account", a.account)):
        if value:  # mem is a string: "0" (all of a node's memory) is written
            directives.append((key, value))
    logs = workdir / "logs"
    directives += [("requeue", None), ("signal", f"B:USR1@{signal_seconds}")] if signal_seconds else \
        [("no-requeue", None)]
    directives += [("open-mode", "append"), ("output", logs / "slurm-%j.out")]  # a requeued run adds to its log
    lines = ["#!/bin/bash",
             "# Written by the attn_plugin recipe (--launcher slurm): it runs the recipe's stages named by",
             "# --stage/--stop-stage below on the job's first node (a training stage starts one",
             "# fairseq-train task per device with srun). Submit it with: sbatch " + shlex.quote(str(workdir / script)),
             *(f"#SBATCH --{key}" + ("" if value is None else f"={_directive('--' + key, value)}")
               for key, value in directives),
             "set -euo pipefail",
             f"cd {shlex.quote(str(cwd or Path.cwd()))}"]
    lines += [f"export {k}={shlex.quote(str(v))}" for k, v in (env or {}).items()]
    if a.cpus_per_task:
        lines.append(f"export SRUN_CPUS_PER_TASK={a.cpus_per_task}  # srun (Slurm >= 22.05) does not pass "
                     "--cpus-per-task on by itself")
    if not signal_seconds:
        return "\n".join([*lines, "exec " + _quote(job_command)]) + "\n"
    lines += _requeued_run(job_command, signal_seconds, logs, watch or workdir)
    return "\n".join(lines) + "\n"


def _requeued_run(job_command: List[str], signal_seconds: int, logs: Path, watch: Path) -> List[str]:
    """The script's lines that run ``job_command`` in the background (so that bash acts on signals) and requeue
    the job on USR1 when ``watch`` shows it saved something (see :func:`sbatch_script`)."""
    started = shlex.quote(str(logs)) + '/.slurm-"${SLURM_JOB_ID:-0}".started'
    return [
        f"# USR1, {signal_seconds} s before the time limit: stop the recipe (SIGTERM: it stops fairseq-train and keeps",
        "# finished stages), then requeue this job, whose recipe resumes from checkpoint_last.pt; the work since",
        "# the last saved checkpoint is lost. Requeued only if the job saved something, so that a --time too",
        "# short for one checkpoint does not loop. SIGTERM (scancel, preemption): passed on, no requeue.",
        "set +e  # the recipe's exit status is the job's, after the requeue below",
        f"mkdir -p {shlex.quote(str(logs))} && touch {started}",
        'requeue=0 recipe=""',
        'stop() { if [ -n "$recipe" ]; then kill -TERM "$recipe" 2>/dev/null; fi; }',
        "trap 'requeue=1; echo \"[attn] USR1: the time limit is near; stopping the recipe\"; stop' USR1",
        "trap stop TERM",
        _quote(job_command) + " &",
        "recipe=$!",
        'while kill -0 "$recipe" 2>/dev/null; do wait "$recipe"; done  # a trapped signal ends wait early',
        'wait "$recipe"; status=$?  # the recipe\'s exit status (bash keeps it)',
        'if [ "$requeue" = 1 ] && [ -n "${SLURM_JOB_ID:-}" ]; then',
        f"  if [ -n \"$(find {shlex.quote(str(watch))} -newer {started} \\( -name checkpoint_last.pt "
        "-o -path '*/.stages/*.done' \\) -print -quit)\" ]; then",
        '    echo "[attn] requeueing job $SLURM_JOB_ID: finished stages are kept, training resumes from '
        'checkpoint_last.pt"',
        '    scontrol requeue "$SLURM_JOB_ID"',
        "  else",
        '    echo "[attn] not requeued: the job saved no checkpoint and finished no stage; give a longer --time"',
        "  fi",
        "fi",
        f"rm -f {started}",
        'exit "$status"']


def job_state(job_id: str) -> Optional[str]:
    """The state squeue reports for ``job_id`` (PENDING, RUNNING, ...); None when not queued (or no squeue)."""
    if not shutil.which("squeue"):
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


def check_no_job(workdir: Path):
    """Refuse in one line while a job WORKDIR/slurm_job.json records (one ``job_id``: older) is queued or running."""
    record = read_json_or(workdir / RECORD, {})
    for job in record.get("jobs", [record] if record.get("job_id") else []):
        state = job_state(job["job_id"])
        if state:
            raise UserError(f"Slurm job {job['job_id']} of this workdir is still {state} "
                            f"({workdir / RECORD}); wait for it or cancel it (scancel {job['job_id']}), "
                            "then run again")


def sbatch_command(path: Path, after: Sequence[str] = ()) -> str:
    """sbatch of the script ``path``, started once the jobs ``after`` ended well, cancelled if one failed."""
    deps = f"--dependency=afterok:{':'.join(after)} --kill-on-invalid-dep=yes " if after else ""
    return f"sbatch {deps}{shlex.quote(str(path))}"


def output_folder(text: str) -> Optional[Path]:
    """The folder of a script's ``#SBATCH --output``, which sbatch does not create (the job would fail silently)."""
    m = re.search(r"^#SBATCH --output=\"?(.*?)\"?$", text, re.M)
    return Path(m.group(1)).parent if m else None


def submit(scripts: List[tuple], workdir: Path, dry_run: bool) -> List[Optional[str]]:
    """Write each (file name, text[, after]) of ``scripts`` to WORKDIR and submit them in order with sbatch
    where there is one; ``after``: the indices of the jobs it waits for (default: the one before it).
    --dry-run prints them instead. Returns the job ids (None where not submitted)."""
    paths = [workdir / s[0] for s in scripts]
    waits = [tuple(s[2]) if len(s) > 2 else (i - 1,) if i else () for i, s in enumerate(scripts)]
    if any(j >= i or j < 0 for i, w in enumerate(waits) for j in w):
        raise ValueError(f"a job can only wait for jobs submitted before it: {waits}")
    placeholders = [tuple(f"<job id of {paths[j].relative_to(workdir)}>" for j in w) for w in waits]
    logs = [output_folder(s[1]) or workdir / "logs" for s in scripts]
    if dry_run:
        for path, script, after in zip(paths, scripts, placeholders):
            print(f"  # {path}:", flush=True)
            for line in script[1].splitlines():
                print(f"  | {line}", flush=True)
            print(f"  $ {sbatch_command(path, after)}", flush=True)
        return [None] * len(scripts)
    check_no_job(workdir)
    for path, script in zip(paths, scripts):
        write_text_atomic(path, script[1])
        path.chmod(0o755)
    for folder in logs:
        folder.mkdir(parents=True, exist_ok=True)
    if not shutil.which("sbatch"):
        how = "; then ".join(sbatch_command(path, after) for path, after in zip(paths, placeholders))
        log(f"wrote {', '.join(map(str, paths))}; sbatch is not on this machine's PATH: submit on the cluster: {how}")
        return [None] * len(scripts)
    jobs: List[dict] = []
    for path, wait, folder in zip(paths, waits, logs):
        after = [jobs[j]["job_id"] for j in wait]
        proc = subprocess.run(shlex.split(sbatch_command(path, after)), capture_output=True, text=True)
        if proc.returncode != 0:
            reason = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            before = (f"; job(s) {', '.join(j['job_id'] for j in jobs)} were submitted before it: cancel them "
                      f"(scancel {' '.join(j['job_id'] for j in jobs)}) or let them run, then run again") \
                if jobs else ""
            raise UserError(f"sbatch {path} failed (exit {proc.returncode}): "
                            f"{reason[-1] if reason else 'no message'}{before}")
        m = re.search(r"(\d+)", proc.stdout)
        job_id = m.group(1) if m else proc.stdout.strip()
        jobs.append({"job_id": job_id, "script": str(path), **({"after": ":".join(after)} if after else {})})
        write_json_atomic(workdir / RECORD, {"jobs": jobs, "submitted": time.strftime("%Y-%m-%d %H:%M:%S")})
        log(f"submitted Slurm job {job_id} ({path})" + (f", to start once job(s) {', '.join(after)} ended well"
                                                        if after else "")
            + f"; its output: {folder / f'slurm-{job_id}.out'}")
    return [job["job_id"] for job in jobs]


def job_environment() -> dict:
    """What the job's recipe needs of this shell's environment: PYTHONPATH, when set (a checkout not installed)."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
