"""How fairseq-train is launched: batch sizing per device count, precision,
and the launcher (plain, torchrun for GPUs and multi-node, or our own CPU
data-parallel launcher).

Sec. 5.1: "Each training batch contained a set of sentence pairs containing
approximately 25000 source tokens and 25000 target tokens." fairseq's batch
size is ``--max-tokens`` per device times devices times ``--update-freq``, so
:func:`batch_plan` picks the smallest ``--update-freq`` that keeps
``--max-tokens`` within what one device holds, then spreads the budget evenly:
for the WMT recipes' 28000, 1 GPU x 7 x 4000, 2 x 4 x 3500, 8 x 1 x 3500.
``--max-tokens`` counts padded tokens (sentences x the longest of source and
target), so the real tokens per update are fewer: scripts/tokens_per_update.py
measures them, and results.json records them from the training log.

Slurm: inside an allocation, ``srun`` starts one fairseq-train task per device
(:func:`srun_launcher`); :mod:`attn_kit.pipeline.slurm` writes and submits the
job that does so.

CPU data parallel (``python -m attn_kit.pipeline.launch --nprocs N -- fairseq-train ...``):
fairseq's torchrun path assumes CUDA (it fails with a modulo by zero on CPU) and
its default DDP wrapper rejects CPU modules, so this starts N fairseq-train
processes itself with gloo, legacy_ddp and an explicit rank, world size and
rendezvous each: they are one job by construction.

Devices: :func:`visible_gpus` is what a recipe checks its ``--ngpus`` against
before its first stage (:func:`attn_kit.recipes.scale.check_devices`); the
training processes check that they form one job and hold their ``--save-dir``
themselves (``attn_plugin.fairseq_patches``, patch 8).
"""
import argparse
import math
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import List, Optional

from ..cli import UsageError
from .process import console_script, die_with_parent


@dataclass
class BatchPlan:
    devices: int
    max_tokens: int   # per device, per forward/backward
    update_freq: int

    @property
    def tokens_per_update(self) -> int:
        return self.devices * self.max_tokens * self.update_freq


def batch_plan(tokens_per_update: int, devices: int, max_tokens_per_device: int) -> BatchPlan:
    """--max-tokens and --update-freq for ``devices`` devices (CPU processes count
    as devices) so that an update holds ~``tokens_per_update`` tokens."""
    devices = max(1, devices)
    update_freq = max(1, math.ceil(tokens_per_update / (devices * max_tokens_per_device)))
    max_tokens = math.ceil(tokens_per_update / (devices * update_freq))
    return BatchPlan(devices, max_tokens, update_freq)


def paper_optimization(warmup_updates: int, lr_scale: float = 1.0, label_smoothing: float = 0.1) -> List[str]:
    """fairseq-train flags for the paper's optimizer, schedule and criterion:
    Adam (0.9, 0.98, 1e-9) (Sec. 5.3), eq. 3 with ``warmup_updates`` (times
    ``lr_scale``), label smoothing eps_ls (Sec. 5.4). ``--lr 1`` only satisfies
    fairseq's parser: attn_inverse_sqrt computes the rate from eq. 3."""
    return ["--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9",
            "--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", str(warmup_updates), "--lr", "1",
            *(["--lr-scale", f"{lr_scale:g}"] if lr_scale != 1 else []),
            "--criterion", "attn_label_smoothed_cross_entropy", "--label-smoothing", f"{label_smoothing:g}"]


PRECISIONS = ("auto", "bf16", "fp16", "fp32")

# The plugin task's option that trains (and validates) under bf16 autocast: fp32 master weights,
# matmuls in bf16, no loss scaling (attn_plugin/tasks/attn_translation.py). fairseq 0.12's own
# --bf16 "implies --tpu" and fails on GPUs (seen on an H100: no xla_device), so it is never used.
BF16_FLAG = "--bf16-autocast"


def visible_gpus() -> int:
    """How many CUDA GPUs torch sees on this machine (after CUDA_VISIBLE_DEVICES); 0 without
    CUDA (a login node, a laptop) or with a broken CUDA set-up."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 -- a broken CUDA setup is "no GPU visible"
        return 0


def gpu_supports_bf16() -> Optional[bool]:
    """Whether the GPUs torch sees here compute in bf16 natively (compute capability >= 8.0:
    A100, H100, L4, ...); None when no GPU is visible (a login node, a --dry-run elsewhere)."""
    try:
        import torch

        count = visible_gpus()
        return all(torch.cuda.get_device_capability(i)[0] >= 8 for i in range(count)) if count else None
    except Exception:  # noqa: BLE001 -- a broken CUDA setup is "no GPU visible"
        return None


_DETECT = object()


def used_precision(precision: str, gpus: int, bf16_ok=_DETECT) -> str:
    """What ``--precision auto|bf16|fp16|fp32`` trains in on ``gpus`` GPUs (0: CPU).

    - ``auto``: bf16 on GPUs that support it (``bf16_ok``; by default detected here, and
      assumed when no GPU is visible, as on a login node: a job re-resolves it on its node),
      fp16 on older GPUs, fp32 on CPU;
    - ``bf16``: bf16 autocast with fp32 master weights and no loss scaling (:data:`BF16_FLAG`),
      on GPUs and on CPU alike (torch has bf16 autocast on CPU);
    - ``fp16``: fairseq's fp16 mixed precision with loss scaling on GPUs; fp32 on CPU, where
      fairseq's fp16 does not run;
    - ``fp32``: fp32, the paper's (it trained on P100s in fp32)."""
    if precision not in PRECISIONS:
        raise UsageError(f"unknown --precision {precision!r}; choose {', '.join(PRECISIONS)}")
    if precision == "bf16" or precision == "fp32":
        return precision
    if gpus == 0:
        return "fp32"
    if precision == "fp16":
        return "fp16"
    if bf16_ok is _DETECT:
        bf16_ok = gpu_supports_bf16()
    return "fp16" if bf16_ok is False else "bf16"


def flags_for(used: str) -> List[str]:
    """fairseq-train flags of a precision :func:`used_precision` returned: ``--fp16``,
    :data:`BF16_FLAG` (the plugin task's; needs ``--task attn_translation``) or none."""
    return {"fp16": ["--fp16"], "bf16": [BF16_FLAG]}.get(used, [])


def precision_flags(precision: str, gpus: int) -> List[str]:
    """fairseq flags for ``--precision`` on ``gpus`` GPUs: those of :func:`used_precision`."""
    return flags_for(used_precision(precision, gpus))


def precision_of(argv: List[str]) -> str:
    """The precision a fairseq-train command line trains in (its last precision flag wins)."""
    used = "fp32"
    for arg in argv:
        if arg == "--fp16":
            used = "fp16"
        elif arg == BF16_FLAG:
            used = "bf16"
    return used


LAUNCHERS = ("torchrun", "slurm", "srun")


def launcher(gpus: int, cpu_procs: int, nnodes: int = 1, node_rank: int = 0,
             master_addr: Optional[str] = None, master_port: Optional[int] = None, log_dir: str = ".",
             module: str = "fairseq_cli.train", kind: str = "torchrun") -> List[str]:
    """The command that starts fairseq-train on the chosen devices; the caller
    appends fairseq-train's arguments. One device: ``fairseq-train``. Several GPUs
    or nodes: ``torchrun ... -m fairseq_cli.train`` (fairseq reads RANK, WORLD_SIZE
    and LOCAL_RANK from torchrun's environment; ``module`` names another entry point
    that runs fairseq-train, such as the comparison's worker). Several CPU processes:
    this module. ``kind="srun"`` (inside a Slurm allocation): :func:`srun_launcher`."""
    if kind == "srun":
        return srun_launcher(gpus, cpu_procs, nnodes, master_port)
    if gpus > 1 or nnodes > 1:
        run = [console_script("torchrun"), "--nproc-per-node", gpus]
        if nnodes > 1:
            run += ["--nnodes", nnodes, "--node-rank", node_rank,
                    "--master-addr", master_addr, "--master-port", master_port or DEFAULT_PORT]
        else:
            run += ["--standalone"]
        return run + ["-m", module]
    train = console_script("fairseq-train")
    if gpus == 0 and cpu_procs > 1:
        return [sys.executable, "-m", "attn_kit.pipeline.launch", "--nprocs", cpu_procs, "--log-dir", log_dir, "--", train]
    return [train]


DEFAULT_PORT = 29500


def slurm_port(master_port: Optional[int] = None) -> int:
    """The rendezvous port of a Slurm job's training: ``master_port`` if given, else one
    derived from SLURM_JOB_ID (as fairseq does for its own single-node case), so that
    two jobs sharing a node do not collide."""
    if master_port:
        return master_port
    job = os.environ.get("SLURM_JOB_ID", "")
    return 20000 + int(job) % 20000 if job.isdigit() else DEFAULT_PORT


def srun_launcher(gpus: int, cpu_procs: int, nnodes: int = 1, master_port: Optional[int] = None) -> List[str]:
    """fairseq-train as ``nnodes`` x (``gpus`` or ``cpu_procs``) Slurm tasks, one per device.

    fairseq's own Slurm discovery (``fairseq.distributed.utils.infer_init_method``)
    sets up the process group from srun's variables: the first node of
    SLURM_STEP_NODELIST (``scontrol show hostnames``) at ``--distributed-port``,
    rank SLURM_PROCID, device SLURM_LOCALID; ``--distributed-world-size`` must equal
    the number of tasks. CPU tasks train together with gloo and fairseq's legacy DDP
    (its default DDP wrapper rejects CPU modules); the plugin lets fairseq's
    discovery run without CUDA (attn_plugin.fairseq_patches, patch 5)."""
    per_node = gpus if gpus else cpu_procs
    cmd = ["srun", "--nodes", nnodes, "--ntasks-per-node", per_node, "--kill-on-bad-exit=1",
           console_script("fairseq-train")]
    if nnodes * per_node > 1:
        cmd += ["--distributed-world-size", nnodes * per_node, "--distributed-port", slurm_port(master_port)]
        if not gpus:
            cmd += ["--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"]
    return cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ddp_main(argv=None) -> int:
    """Run ``CMD`` as N gloo data-parallel CPU workers; rank 0's output is ours,
    the others' go to ``<save-dir>/worker<R>.log``-style files next to it.
    If one worker fails the others are stopped; the exit status is the first failure's."""
    p = argparse.ArgumentParser(prog="python -m attn_kit.pipeline.launch", description=cpu_ddp_main.__doc__)
    p.add_argument("--nprocs", type=int, required=True, help="number of CPU worker processes")
    p.add_argument("--port", type=int, default=0, help="TCP port for the rendezvous (default: a free one)")
    p.add_argument("--log-dir", default=".", help="where workers 1..N-1 write their logs")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- fairseq-train command")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("give the fairseq-train command after --")
    port = args.port or free_port()
    common = ["--cpu", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
              "--distributed-init-method", f"tcp://127.0.0.1:{port}",
              "--distributed-world-size", str(args.nprocs), "--distributed-no-spawn"]
    procs, logs = [], []
    for rank in range(args.nprocs):
        out = None
        if rank > 0:
            os.makedirs(args.log_dir, exist_ok=True)
            out = open(os.path.join(args.log_dir, f"worker{rank}.log"), "w")
            logs.append(out)
        procs.append(subprocess.Popen(cmd + common + ["--distributed-rank", str(rank)], preexec_fn=die_with_parent,
                                      stdout=out, stderr=subprocess.STDOUT if out else None))
    status, failed = 0, None
    try:
        remaining = list(procs)
        while remaining:
            for proc in list(remaining):
                try:
                    rc = proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    continue
                remaining.remove(proc)
                if rc != 0 and status == 0:
                    status, failed = rc, procs.index(proc)
                    for other in remaining:
                        other.send_signal(signal.SIGTERM)
    except KeyboardInterrupt:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            proc.wait()
        status = 130
    finally:
        for f in logs:
            f.close()
    if failed:  # rank 0 then only reports a lost connection: name the worker that failed first
        log = os.path.join(args.log_dir, f"worker{failed}.log")
        print(f"error: CPU worker {failed} failed first (exit {status}); its log: {log}", file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(cpu_ddp_main())
