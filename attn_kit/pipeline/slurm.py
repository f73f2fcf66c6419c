"""Training as a Slurm job: the sbatch script a recipe writes for ``--launcher slurm``.

``--launcher slurm`` runs the stages that prepare the data where the recipe is
started (a login node), then writes ``WORKDIR/train.sbatch`` and submits it
with ``sbatch`` (where the command exists; the script is written either way).
The job runs the same recipe from its first training stage to the end
(train, average, generate, score) on the first node of its allocation, with
``--launcher srun``: its train stage starts ``srun`` with one fairseq-train task
per GPU on every node (:func:`attn_kit.pipeline.launch.srun_launcher`), and
fairseq's own Slurm discovery sets up the process group. ``--precision auto``
is resolved there, on the GPUs the job got, and ``--ngpus`` is checked there
against them (:func:`attn_kit.recipes.scale.check_devices`), not on the host
that submits, which may have none.

Running the same command again after the job ended resubmits it: finished
stages are skipped and training resumes from ``checkpoint_last.pt`` (after a
time limit, say). While the job recorded in ``WORKDIR/slurm_job.json`` is still
queued or running, the recipe refuses to submit a second one.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import List, Optional

from ..cli import UserError, log, write_json_atomic, write_text_atomic

SCRIPT = "train.sbatch"
RECORD = "slurm_job.json"


def sbatch_script(job_command: List[str], workdir: Path, nnodes: int, tasks_per_node: int, gpus_per_node: int,
                  partition: Optional[str] = None, time_limit: Optional[str] = None, account: Optional[str] = None,
                  cpus_per_task: Optional[int] = None, env: Optional[dict] = None, cwd: Optional[Path] = None,
                  job_name: Optional[str] = None) -> str:
    """The text of an sbatch script that runs ``job_command`` once, on the first node of an
    allocation of ``nnodes`` x ``tasks_per_node`` tasks (``gpus_per_node`` GPUs each node)."""
    directives = [("job-name", job_name or f"attn-{workdir.name}"), ("nodes", nnodes),
                  ("ntasks-per-node", tasks_per_node)]
    if gpus_per_node:
        directives.append(("gpus-per-node", gpus_per_node))
    if cpus_per_task:
        directives.append(("cpus-per-task", cpus_per_task))
    for key, value in (("partition", partition), ("time", time_limit), ("account", account)):
        if value:
            directives.append((key, value))
    directives.append(("output", workdir / "logs" / "slurm-%j.out"))
    lines = ["#!/bin/bash",
             "# Written by the attn_plugin recipe (--launcher slurm); the job runs the recipe's",
             "# training stages on its first node; their train stage starts one fairseq-train",
             "# task per device with srun. Submit it with: sbatch " + shlex.quote(str(workdir / SCRIPT)),
             *(f"#SBATCH --{key}={value}" for key, value in directives),
             "set -euo pipefail",
             f"cd {shlex.quote(str(cwd or Path.cwd()))}"]
    lines += [f"export {k}={shlex.quote(str(v))}" for k, v in (env or {}).items()]
    lines.append("exec " + " ".join(shlex.quote(str(c)) for c in job_command))
    return "\n".join(lines) + "\n"


def job_state(job_id: str) -> Optional[str]:
    """The state squeue reports for ``job_id`` (PENDING, RUNNING, ...), or None when it
    is not queued any more (or squeue is not there to ask)."""
    if not shutil.which("squeue"):
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


def submit(script: str, workdir: Path, dry_run: bool) -> Optional[str]:
    """Write ``script`` to WORKDIR/train.sbatch and submit it with sbatch where that exists;
    --dry-run prints it instead. Returns the job id (None when not submitted)."""
    path = workdir / SCRIPT
    if dry_run:
        print(f"  # {path}:", flush=True)
        for line in script.splitlines():
            print(f"  | {line}", flush=True)
        print(f"  $ sbatch {shlex.quote(str(path))}", flush=True)
        return None
    record = workdir / RECORD
    if record.exists():
        try:
            previous = json.loads(record.read_text())
        except (OSError, ValueError):
            previous = {}
        state = job_state(previous.get("job_id", "")) if previous.get("job_id") else None
        if state:
            raise UserError(f"Slurm job {previous['job_id']} of this workdir is still {state} "
                            f"({record}); wait for it or cancel it (scancel {previous['job_id']}), then run again")
    write_text_atomic(path, script)
    path.chmod(0o755)
    if not shutil.which("sbatch"):
        log(f"wrote {path}; sbatch is not on this machine's PATH: submit it on the cluster with "
            f"sbatch {shlex.quote(str(path))}")
        return None
    proc = subprocess.run(["sbatch", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        reason = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise UserError(f"sbatch {path} failed (exit {proc.returncode}): {reason[-1] if reason else 'no message'}")
    m = re.search(r"(\d+)", proc.stdout)
    job_id = m.group(1) if m else proc.stdout.strip()
    write_json_atomic(record, {"job_id": job_id, "script": str(path), "submitted": time.strftime("%Y-%m-%d %H:%M:%S")})
    log(f"submitted Slurm job {job_id} ({path}); it trains and evaluates, then writes {workdir / 'results.json'}; "
        f"its output: {workdir / 'logs' / f'slurm-{job_id}.out'}")
    return job_id


def job_environment() -> dict:
    """What the job's recipe needs of this shell's environment: PYTHONPATH, when set
    (a checkout used without ``pip install -e .``)."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
