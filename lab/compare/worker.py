"""fairseq-train in this process, with the comparison's timing and memory counts.

    python -m lab.compare.worker STATS_JSON FAIRSEQ_TRAIN_ARGS...

(or the same module under torchrun, one process per GPU). Runs fairseq-train
exactly as its command line would, with three of fairseq's functions wrapped to
record: the time spent in train steps (forward, backward, optimizer) and their
target tokens (the first :data:`WARMUP_STEPS` left out: allocator, caches,
kernel selection), the parameter count, the peak memory and every validation's
unsmoothed losses with the training time at which it ran. Writes them to
STATS_JSON (``STATS_JSON.rankR`` per rank with several GPUs).
"""
import json
import logging
import os
import resource
import sys
import time
from pathlib import Path

from attn_kit.cli import write_json_atomic

WARMUP_STEPS = 5  # train steps left out of tokens/s (allocator, caches, kernel selection)


def stats_path(path: str) -> Path:
    """Where this process writes its numbers: ``path``, or ``path.rankR`` under torchrun."""
    rank = os.environ.get("RANK")
    return Path(path if rank is None or os.environ.get("WORLD_SIZE", "1") == "1" else f"{path}.rank{rank}")


def read_stats(path: Path) -> dict:
    """The numbers the worker(s) wrote to ``path``; with several GPUs one file per rank:
    their tokens add up, the slowest rank's step time counts. None if there are none."""
    files = [path] if path.exists() else sorted(path.parent.glob(path.name + ".rank*"))
    if not files:
        return None
    ranks = [json.loads(f.read_text()) for f in files]
    stats = dict(ranks[0])
    stats["tokens"] = sum(r["tokens"] for r in ranks)
    stats["step_seconds"] = max(r["step_seconds"] for r in ranks)
    stats["world_size"] = len(ranks)
    return stats


def fairseq_train(stats_file: str, fairseq_argv):
    """Run fairseq-train with ``fairseq_argv``; write the numbers (see the module) to ``stats_file``."""
    import torch
    from fairseq.trainer import Trainer

    import fairseq_cli.train as fairseq_train_cli

    stats = {"tokens": 0, "step_seconds": 0.0, "all_tokens": 0, "all_step_seconds": 0.0, "steps": 0,
             "valid": [], "params": None, "updates": 0}
    clock = {"start": None}

    init, train_step, get_valid_stats = Trainer.__init__, Trainer.train_step, fairseq_train_cli.get_valid_stats

    def patched_init(self, cfg, task, model, criterion, *a, **kw):
        init(self, cfg, task, model, criterion, *a, **kw)
        stats["params"] = sum(p.numel() for p in model.parameters())

    def patched_train_step(self, samples, *a, **kw):
        if clock["start"] is None:
            clock["start"] = time.perf_counter()
        start = time.perf_counter()
        out = train_step(self, samples, *a, **kw)
        if self.cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        tokens = sum(int(s.get("ntokens", 0)) for s in samples if isinstance(s, dict))
        stats["steps"] += 1
        stats["all_tokens"] += tokens
        stats["all_step_seconds"] += seconds
        if stats["steps"] > WARMUP_STEPS:
            stats["tokens"] += tokens
            stats["step_seconds"] += seconds
        stats["updates"] = self.get_num_updates()
        return out

    def patched_get_valid_stats(cfg, trainer, valid_stats, *a, **kw):
        out = get_valid_stats(cfg, trainer, valid_stats, *a, **kw)
        stats["valid"].append({"num_updates": trainer.get_num_updates(),
                               **{k: float(out.get(k, float("nan"))) for k in ("loss", "nll_loss", "ppl")},
                               "train_seconds": time.perf_counter() - clock["start"] if clock["start"] else 0.0})
        return out

    Trainer.__init__, Trainer.train_step = patched_init, patched_train_step
    # fairseq-train's log format (an import above may have configured logging already)
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        level=os.environ.get("LOGLEVEL", "INFO").upper(), stream=sys.stdout, force=True)
    fairseq_train_cli.get_valid_stats = patched_get_valid_stats
    sys.argv = ["fairseq-train", *fairseq_argv]
    try:
        fairseq_train_cli.cli_main()
    finally:
        if stats["steps"] <= 2 * WARMUP_STEPS:  # too short to leave warm-up out
            stats["tokens"], stats["step_seconds"] = stats["all_tokens"], stats["all_step_seconds"]
            stats["tokens_note"] = "all train steps"
        else:
            stats["tokens_note"] = f"train steps after the first {WARMUP_STEPS}"
        stats["train_seconds"] = time.perf_counter() - clock["start"] if clock["start"] else 0.0
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            stats["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
            stats["peak_memory_kind"] = "peak CUDA memory allocated (per GPU)"
        else:
            stats["peak_memory_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            stats["peak_memory_kind"] = "peak memory (process RSS)"
        write_json_atomic(stats_path(stats_file), stats)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m lab.compare.worker STATS_JSON FAIRSEQ_TRAIN_ARGS...", file=sys.stderr)
        sys.exit(2)
    fairseq_train(argv[0], argv[1:])
    # Training is over and its stats are written. Skip the interpreter's
    # teardown: in this patched worker it intermittently aborted
    # ("terminate called without an active exception", about 1 run in 8 on CPU)
    # after all the work was done, which failed a finished run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
