"""CPU data parallel for fairseq-train: ``python -m attn_kit.fairseq_layer.fairseq_cpu_ddp --nprocs N --
fairseq-train ...`` (:func:`attn_kit.fairseq_layer.fairseq_commands.launcher`). fairseq's torchrun path assumes
CUDA and its default DDP wrapper rejects CPU modules, so this starts N fairseq-train processes itself with gloo,
legacy_ddp and an explicit rank, world size and rendezvous each.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys

from ..pipeline.process import die_with_parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ddp_main(argv=None) -> int:
    """Run ``CMD`` as N gloo data-parallel CPU workers; rank 0's output is ours,
    the others' go to ``<save-dir>/worker<R>.log``-style files next to it.
    If one worker fails the others are stopped; the exit status is the first failure's."""
    p = argparse.ArgumentParser(prog="python -m attn_kit.fairseq_layer.fairseq_cpu_ddp",
                                description=cpu_ddp_main.__doc__)
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
