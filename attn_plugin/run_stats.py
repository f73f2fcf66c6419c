"""What a training process did, step by step, for the recipes' ``--canary``.

With ``ATTN_RUN_STATS=DIR`` in its environment, each training process (one per
device) records, from the ``attn_translation`` task:

- every training step (a micro-batch: ``--update-freq`` of them make an update):
  its update number, when it ended, its target tokens (``ntokens``), the padded
  source and target positions the model computed on, its sentences, its summed
  loss and sample size (the criterion's, so that loss / sample_size / ln 2 is
  fairseq's logged ``loss``), and its real (non-padding) source tokens;
- every validation step: when it started and ended;
- at exit: the device, its memory (peak allocated and reserved on a GPU, peak
  resident set on a CPU) and the device's total memory,

and writes them to ``DIR/stats.<pid>.json`` (every 200 steps and at exit, so a
crash leaves what was recorded). Without the variable nothing is recorded. The
loss stays a tensor until the file is written: recording costs no GPU sync.
"""
import atexit
import json
import os
import resource
import time

import torch

DIR = os.environ.get("ATTN_RUN_STATS")
FLUSH_EVERY = 200


class _Recorder:
    def __init__(self, folder: str):
        self.path = os.path.join(folder, f"stats.{os.getpid()}.json")
        self.steps, self.pending, self.valid = [], [], []
        self.device = None
        os.makedirs(folder, exist_ok=True)
        atexit.register(self.write)

    def train_step(self, update_num: int, sample: dict, loss, sample_size):
        net_input = sample["net_input"]
        self.device = net_input["src_tokens"].device
        nsrc = sample.get("nsrc_tokens")  # counted on the host as the batch was made (attn_translation)
        self.steps.append([int(update_num), time.time(), int(sample["ntokens"]), net_input["src_tokens"].numel(),
                           sample["target"].numel(), int(sample["nsentences"]), None, float(sample_size),
                           None if nsrc is None else int(nsrc)])
        self.pending.append(loss.detach().float() if torch.is_tensor(loss) else torch.tensor(float(loss)))
        if len(self.steps) % FLUSH_EVERY == 0:
            self.write()

    def _resolve_losses(self):
        if self.pending:
            values = torch.stack([p.reshape(()).cpu() for p in self.pending]).tolist()
            for step, value in zip(self.steps[len(self.steps) - len(values):], values):
                step[6] = value
            self.pending = []

    def memory(self) -> dict:
        if self.device is not None and self.device.type == "cuda":
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            return {"device": torch.cuda.get_device_name(index), "kind": "cuda",
                    "peak_allocated_bytes": torch.cuda.max_memory_allocated(index),
                    "peak_reserved_bytes": torch.cuda.max_memory_reserved(index),
                    "total_bytes": torch.cuda.get_device_properties(index).total_memory}
        return {"device": "cpu", "kind": "cpu", "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}

    def write(self):
        try:
            self._resolve_losses()
            rank = torch.distributed.get_rank() if torch.distributed.is_available() \
                and torch.distributed.is_initialized() else int(os.environ.get("RANK", 0))
            record = {"pid": os.getpid(), "rank": rank, **self.memory(),
                      "step_fields": ["update", "time", "ntokens", "src_positions", "tgt_positions", "sentences",
                                      "loss", "sample_size", "src_ntokens"],
                      "steps": self.steps, "valid_steps": self.valid}
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, self.path)
        except Exception:  # a record must never break training (a CUDA error at exit, a full disk)
            pass


_recorder = None


def recorder():
    """The process's recorder when ``ATTN_RUN_STATS`` is set, else None."""
    global _recorder
    if DIR and _recorder is None:
        _recorder = _Recorder(DIR)
    return _recorder
