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

CPU data parallel (``python -m attn_kit.pipeline.launch --nprocs N -- fairseq-train ...``):
fairseq's torchrun path assumes CUDA (it fails with a modulo by zero on CPU) and
its default DDP wrapper rejects CPU modules, so this starts N fairseq-train
processes itself with gloo, legacy_ddp and an explicit rank each.
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


PRECISIONS = ("auto", "fp16", "fp32")


def used_precision(precision: str, gpus: int) -> str:
    """What ``--precision auto|fp16|fp32`` really trains in on ``gpus`` GPUs (0: CPU):
    fp32 on CPU whatever was asked, fp16 mixed precision on GPUs for auto and fp16.
    The paper trained in fp32 on P100s; mixed precision is what makes the runs
    affordable today. bf16 is refused: fairseq 0.12's ``--bf16`` "implies --tpu"
    and fails on a GPU (seen on an H100: no xla_device), so asking for it would
    only relabel an fp16 run."""
    if precision == "bf16":
        raise UsageError("--precision bf16 is not available yet: fairseq 0.12's --bf16 means TPU training "
                         "(it fails on GPUs); use --precision auto or fp16 (fp16 mixed precision) or fp32")
    if precision not in PRECISIONS:
        raise UsageError(f"unknown --precision {precision!r}; choose {', '.join(PRECISIONS)}")
    return "fp32" if gpus == 0 or precision == "fp32" else "fp16"


def precision_flags(precision: str, gpus: int) -> List[str]:
    """fairseq flags for ``--precision auto|fp16|fp32`` on ``gpus`` GPUs: those of
    :func:`used_precision` (``--fp16`` for fp16, none for fp32)."""
    return ["--fp16"] if used_precision(precision, gpus) == "fp16" else []


def launcher(gpus: int, cpu_procs: int, nnodes: int = 1, node_rank: int = 0,
             master_addr: Optional[str] = None, master_port: int = 29500, log_dir: str = ".",
             module: str = "fairseq_cli.train") -> List[str]:
    """The command that starts fairseq-train on the chosen devices; the caller
    appends fairseq-train's arguments. One device: ``fairseq-train``. Several GPUs
    or nodes: ``torchrun ... -m fairseq_cli.train`` (fairseq reads RANK, WORLD_SIZE
    and LOCAL_RANK from torchrun's environment; ``module`` names another entry point
    that runs fairseq-train, such as the comparison's worker). Several CPU processes:
    this module."""
    if gpus > 1 or nnodes > 1:
        run = [console_script("torchrun"), "--nproc-per-node", gpus]
        if nnodes > 1:
            run += ["--nnodes", nnodes, "--node-rank", node_rank,
                    "--master-addr", master_addr, "--master-port", master_port]
        else:
            run += ["--standalone"]
        return run + ["-m", module]
    train = console_script("fairseq-train")
    if gpus == 0 and cpu_procs > 1:
        return [sys.executable, "-m", "attn_kit.pipeline.launch", "--nprocs", cpu_procs, "--log-dir", log_dir, "--", train]
    return [train]


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
