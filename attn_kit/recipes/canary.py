"""``--canary``: the real run for a few minutes, then what the whole run will cost and whether it would fail.
The ``canary`` stage replaces train..score: fairseq-train as the run would start it, for ``--canary-minutes``,
into WORKDIR/canary/ (each process recording its steps and memory, :mod:`attn_plugin.run_stats`), then averaging
and generation timed on what it left; canary.json holds the measurements and the predicted wall time part by
part. A run that would fail (diverged or flat loss, out of memory, throughput below the floor, a disk too small)
exits non-zero with one line."""
import dataclasses
import math
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from ..planning import cost, step_model
from ..checkout import REPO
from ..cli import UserError, write_json_atomic
from ..pipeline.canary_check import checked_against, data_seconds
from ..pipeline.download import read_json_or
from ..pipeline.stages import Stage
from ..results import provenance
from . import common

WARMUP_SHARE = 0.05  # updates left out of the rates: cuDNN plans, allocator growth, first batches
GENERATION_SENTENCES = 256  # about this many test sentences (one shard) time the generation
NEVER = 10 ** 9  # an interval no canary reaches: it saves and validates once, when its time is up


# ---------------------------------------------------------------------------------------------- the stage
@dataclasses.dataclass(frozen=True)
class Job:
    """What a recipe's canary stage measures and predicts for (:func:`stage` says what each is)."""
    s: object
    out: Path
    data_bin: Path
    data_stages: Sequence[str]
    generate_command: Callable
    decoded: Sequence[Sequence[Path]]
    model_flags: Sequence[str]
    averages: bool = True


def stage(s, data_bin: Path, data_stages: Sequence[str], train_command: Callable, generate_command: Callable,
          decoded: Sequence[Sequence[Path]], model_flags: Sequence[str], train_inputs: Sequence[Path],
          name: str = "canary", averages: bool = True) -> Stage:
    """The ``canary`` stage of a recipe. ``train_command(canary_args, save_dir)``: the run's
    fairseq-train command under ``canary_args`` (its own budget and intervals);
    ``generate_command(checkpoint)``: the run's fairseq-generate of the test set with
    ``checkpoint``; ``decoded``: (source, target) files, in the model's tokens, of each
    split the run decodes, the test set last; ``model_flags``: the flags that size the arch, for the FLOPs;
    ``averages``: whether the run averages checkpoints (Table 3's rows do not)."""
    out = s.workdir / "canary"
    job = Job(s, out, data_bin, data_stages, generate_command, decoded, model_flags, averages)

    def run(ctx):
        c = dataclasses.replace(s, train_minutes=s.canary_minutes, save_interval_updates=NEVER,
                    validate_interval_updates=None, log_interval=min(s.log_interval, 10))
        save_dir, stats = out / "checkpoints", out / "stats"
        if not ctx.dry_run:
            for scratch in (save_dir, stats):  # a canary starts from scratch: nothing in them is kept
                shutil.rmtree(scratch, ignore_errors=True)
            stats.mkdir(parents=True)
            (ctx.log_dir / f"{ctx.stage}.log").unlink(missing_ok=True)  # read below: this canary's lines only
        cmd = train_command(c, save_dir)
        launched = time.time()
        failure = None
        try:
            common.run_training(ctx, c, cmd, record=out / "train_command.json", model=model_flags,
                                env={"ATTN_RUN_STATS": str(stats)})
        except UserError as exc:
            failure = training_failure(ctx.log_dir / f"{ctx.stage}.log", str(exc))
        ended = time.time()
        if ctx.dry_run:
            print("  # then: time averaging (1 and 2 copies of the canary's checkpoint) and generation (a shard of "
                  "the test set, outputs as long as their sources), write " + str(out / "canary.json"), flush=True)
            checkpoint = save_dir / "checkpoint_last.pt"
            if averages:
                averaging_seconds(ctx, checkpoint, s.average, out)
            generation_seconds(ctx, generate_command(checkpoint), decoded, out)
            return
        finish(ctx, job, launched, ended, ctx.log_dir / f"{ctx.stage}.log", failure)

    return Stage(name, run, f"{s.canary_minutes:g} minutes of the real training, then the whole run's "
                                "predicted cost (canary.json)",
                 inputs=list(train_inputs), outputs=[out / "canary.json"],
                 # not the run's checkpoint interval: the canary saves only at its end, and the interval it
                 # sizes from the canary's own measurement must not make the canary run again
                 options={**{k: v for k, v in common.train_options(s, model_flags).items()
                             if k != "save_interval_updates"}, "canary_minutes": s.canary_minutes,
                          **({"canary_epoch_pairs": s.canary_epoch_pairs} if s.canary_epoch_pairs else {}),
                          "floors": [s.canary_min_utilization, s.canary_min_tokens_per_second]})


# ---------------------------------------------------------------------------------------------- training
def training_failure(train_log: Path, message: str) -> str:
    """One line naming why fairseq-train failed, from its log."""
    text = train_log.read_text(encoding="utf-8", errors="replace") if train_log.exists() else ""
    if "gradients are Nan/Inf" in text or "FloatingPointError" in text:
        return ("the loss diverged (NaN/Inf gradients in fairseq-train): lower --lr-scale or raise "
                "--warmup-updates")
    if re.search(r"out of memory|OutOfMemoryError", text, re.I):
        return ("out of memory at the configured batch: lower --max-tokens-per-gpu (--update-freq makes up the "
                "tokens per update)")
    if "exit -9" in message or "exit 137" in message:
        return "fairseq-train was killed (SIGKILL; the machine's memory?): " + message
    return message


def read_stats(folder: Path) -> List[dict]:
    """The records of :mod:`attn_plugin.run_stats`, one per training process, rank 0 first."""
    records = (read_json_or(path) for path in sorted(folder.glob("stats.*.json")))
    return sorted((r for r in records if r is not None), key=lambda r: r.get("rank", 0))


def update_times(record: dict) -> Dict[int, float]:
    """{update (1-based): when its last step ended} of one process."""
    ends: Dict[int, float] = {}
    for step in record["steps"]:
        ends[step[0] + 1] = max(ends.get(step[0] + 1, 0.0), step[1])
    return dict(sorted(ends.items()))


def validation_spans(record: dict) -> List[List[float]]:
    """[start, end] of each validation of one process: from the end of the training step before
    its first valid step to its last valid step's end (iterator set-up included)."""
    ends = sorted(step[1] for step in record["steps"])
    spans = []
    for start, end in record["valid_steps"]:
        if spans and start - spans[-1][1] < 5 and not any(spans[-1][1] < t < start for t in ends):
            spans[-1][1] = end  # the same validation
        else:
            before = [t for t in ends if t <= start]
            spans.append([before[-1] if before else start, end])
    return spans


def rates(records: List[dict]) -> dict:
    """Training rates over the updates after the warm-up: seconds per update (rank 0's clock, the
    time of validations and checkpoint writes left out), target tokens/s per process, FLOP
    inputs, and the loss per update over all processes."""
    ends = update_times(records[0])
    updates = list(ends)
    if len(updates) < 4:
        raise UserError(f"the canary trained only {len(updates)} update(s) in its time: give it more "
                        "--canary-minutes (the first updates set up the run and are not representative)")
    warm = max(1, math.ceil(WARMUP_SHARE * len(updates)))
    first, last = updates[warm - 1], updates[-1]
    spans = validation_spans(records[0])
    timed_pairs = list(zip(updates[warm - 1:], updates[warm:]))
    typical = statistics.median([ends[b] - ends[a] for a, b in timed_pairs])
    paused = sum(ends[b] - ends[a] - typical for a, b in timed_pairs if any(ends[a] <= s[0] < ends[b] for s in spans))
    window = ends[last] - ends[first] - paused
    per_process = [sum(s[2] for s in record["steps"] if first < s[0] + 1 <= last) / window for record in records]
    losses: Dict[int, List[float]] = {}
    for record in records:
        for s in record["steps"]:
            if s[6] is not None:
                entry = losses.setdefault(s[0] + 1, [0.0, 0.0])
                entry[0] += s[6]
                entry[1] += s[7]
    loss = {u: (v[0] / v[1] / math.log(2) if v[1] else float("nan")) for u, v in sorted(losses.items())}
    return {"updates": len(updates), "warmup_updates_left_out": warm, "first_timed": first, "last": last,
            "seconds_per_update": window / (last - first), "window_seconds": window,
            "tokens_per_second": per_process, "first_end": ends[first], "last_end": ends[last], "loss": loss,
            "validations": spans}


def utilization(records: List[dict], first: int, last: int, shape, window: float,
                matmul: Optional[float] = None, peak: Optional[float] = None) -> cost.Utilization:
    """Model FLOP utilization of all processes over updates first+1..last (``window`` seconds): the model FLOPs
    of their real tokens against ``matmul`` (the matmul FLOP/s measured on one device) and ``peak`` (one device's
    datasheet FLOP/s), the padded positions' beside them. Records without the real source tokens count the
    source as padded as the target."""
    real = padded = real_positions = padded_positions = 0.0
    for record in records:
        for s in record["steps"]:
            if first < s[0] + 1 <= last and s[5]:
                src = s[8] if len(s) > 8 and s[8] is not None else s[3] * s[2] / s[4]
                real += cost.batch_train_flops(shape, src, s[2], s[5])
                padded += cost.batch_train_flops(shape, s[3], s[4], s[5])
                real_positions += src + s[2]
                padded_positions += s[3] + s[4]
    n = len(records)
    return cost.Utilization.of(real, padded, real_positions, padded_positions, window,
                               matmul and matmul * n, peak and peak * n)


def matmul_rate(device: str, precision: str) -> float:
    """Measured dense matmul FLOP/s at ``precision`` (fp32, bf16, fp16): the best of several timed
    square products (8192 on CUDA, 1024 on a CPU): the rate model FLOP utilization is counted against."""
    import torch

    n = 8192 if device == "cuda" else 1024
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    reps, best = (10 if device == "cuda" else 3), float("inf")
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    for trial in range(8):  # three to warm up, five timed
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync()
        if trial >= 3:
            best = min(best, (time.perf_counter() - start) / reps)
    return 2 * n ** 3 / best


def device_peak(record: dict, precision: str) -> Optional[float]:
    """The dense peak TFLOPS at ``precision`` of the GPU a process trained on (attn_kit.planning.cost's
    datasheet values); None on a CPU or a GPU it does not list."""
    name = cost.gpu_of_device(record.get("device", "")) if record.get("kind") == "cuda" else None
    return cost.GPUS[name].peak(precision) if name else None


def expected_utilization(record: dict, s, shape) -> Optional[float]:
    """The utilization attn_kit.planning.step_model predicts for the GPU a process trained on, at the run's
    forwards; None on a CPU or a GPU it does not list."""
    name = cost.gpu_of_device(record.get("device", "")) if record.get("kind") == "cuda" else None
    if not name:
        return None
    p = common.plan(s)
    return step_model.predicted_utilization(shape, p.max_tokens, p.update_freq, name, s.precision_used,
                                            cost.MEAN_LENGTH)


# ---------------------------------------------------------------------------------------------- the run's plan
def events(max_update: int, updates_per_epoch: Optional[int], save_interval: int,
           validate_interval: Optional[int]) -> dict:
    """How many checkpoint writes and validations fairseq-train makes in a run of ``max_update``:
    a save (and a validation) every ``save_interval`` updates, at each epoch's end and at the
    last update; a validation also every ``validate_interval`` updates."""
    saves = set(range(save_interval, max_update + 1, save_interval)) | {max_update}
    if updates_per_epoch:
        saves |= set(range(updates_per_epoch, max_update + 1, updates_per_epoch))
    validations = set(saves)
    if validate_interval:
        validations |= set(range(validate_interval, max_update + 1, validate_interval))
    return {"checkpoint_writes": len(saves), "validations": len(validations)}


def updates_per_epoch(train_log: str, epoch_pairs: Optional[int] = None):
    """(updates per epoch, training pairs per epoch) of the run the canary predicts: its own corpus's, from
    fairseq-train's log ("train en-de P examples", "grouped total_num_itrs = U"), or for epochs of ``epoch_pairs``
    pairs (--canary-epoch-pairs) U x epoch_pairs / P; (None, None) where the log says neither."""
    m = re.search(r"grouped total_num_itrs = (\d+)", train_log)
    pairs = re.search(r"\btrain \S+ (\d+) examples", train_log)
    if not m:
        return None, None
    own = int(pairs.group(1)) if pairs else None
    if epoch_pairs and own:
        return max(1, round(int(m.group(1)) * epoch_pairs / own)), epoch_pairs
    return int(m.group(1)), own


def timed(ctx, cmd: List, **kwargs) -> float:
    """Seconds ``ctx.sh(cmd)`` took (printed and logged as every command of the recipe)."""
    start = time.time()
    ctx.sh(cmd, **kwargs)
    return time.time() - start


def averaging_seconds(ctx, checkpoint: Path, n: int, out: Path) -> dict:
    """The run's averaging of ``n`` checkpoints, projected from the real script on 1 and 2 copies of
    ``checkpoint`` (page-cached as the run's freshly written checkpoints are)."""
    script = [sys.executable, REPO / "scripts" / "average_checkpoints.py"]
    one = timed(ctx, [*script, "--inputs", checkpoint, "--output", out / "avg1.pt", "--force"])
    two = timed(ctx, [*script, "--inputs", checkpoint, checkpoint, "--output", out / "avg2.pt", "--force"])
    if ctx.dry_run:
        return {}
    averaged_bytes = (out / "avg1.pt").stat().st_size
    for name in ("avg1.pt", "avg2.pt"):
        (out / name).unlink(missing_ok=True)
    per = max(0.0, two - one)
    return {"one_seconds": round(one, 2), "two_seconds": round(two, 2), "averaged_bytes": averaged_bytes,
            "predicted": one + (n - 1) * per}


TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s")


def token_ratio(decoded: Sequence[Sequence[Path]]) -> float:
    """Target tokens per source token of the reference pairs (source, target) the run decodes."""
    src, tgt = (sum(len(line.split()) for path in paths for line in open(path, encoding="utf-8"))
                for paths in zip(*decoded))
    return tgt / max(src, 1)


def generation_seconds(ctx, cmd: List, decoded: Sequence[Sequence[Path]], out: Path, env=None) -> dict:
    """fairseq-generate of one shard of the test set, each output as long as its source, projected to what the
    run decodes (``decoded``: (source, target) token files of each split, one fairseq-generate each): per split
    the process's fixed cost, plus the sentences at the measured rate times the references' target/source
    length ratio (a trained model's outputs are near the references' length)."""
    sentences = sum(common.count_lines(source) for source, _ in decoded) if not ctx.dry_run else 0
    test_sentences = common.count_lines(decoded[-1][0]) if not ctx.dry_run else 2 * GENERATION_SENTENCES
    shards = max(1, test_sentences // GENERATION_SENTENCES)
    seconds = timed(ctx, [*cmd, "--match-source-len", "--num-shards", shards, "--shard-id", 0],
                    stdout=out / "generate.out", env=env)
    if ctx.dry_run:
        return {}
    found = TRANSLATED.findall((ctx.log_dir / f"{ctx.stage}.log").read_text(encoding="utf-8", errors="replace"))
    if not found:
        raise UserError("canary: fairseq-generate printed no 'Translated N sentences' line")
    done, _, decoding = found[-1]
    done, decoding = int(done.replace(",", "")), float(decoding)
    fixed, ratio = max(0.0, seconds - decoding), token_ratio(decoded)
    return {"sentences": done, "seconds": round(seconds, 2), "decoding_seconds": decoding,
            "length_ratio": round(ratio, 4), "decoded_sentences": sentences,
            "predicted": len(decoded) * fixed + sentences * ratio * decoding / max(done, 1)}


# ---------------------------------------------------------------------------------------------- the report
def finish(ctx, job: Job, launched: float, ended: float, train_log: Path, failure: Optional[str]):
    """Analyse the canary's training (launched and ended at those times, its log ``train_log``,
    ``failure``: why fairseq-train failed), time averaging and generation, write canary.json, print
    the table; raise a one-line UserError naming the first cause of failure."""
    s, out, model_flags, data_bin = job.s, job.out, job.model_flags, job.data_bin
    records = read_stats(out / "stats")
    result = {**provenance(), "canary_minutes": s.canary_minutes, "arch": s.arch,
              "model_flags": list(model_flags), "precision": s.precision_used,
              "devices": common.devices(s), "failed": None}
    causes = [failure] if failure else []
    if not records or not records[0]["steps"]:
        causes.append(failure or "the canary recorded no training step (see the log)")
        return conclude(out, result, causes)
    r = rates(records)
    text = train_log.read_text(encoding="utf-8", errors="replace")
    per_epoch, corpus_pairs = updates_per_epoch(text, s.canary_epoch_pairs)
    writes = [float(x) for x in re.findall(r"writing took ([\d.]+) seconds", text)]
    checkpoint = out / "checkpoints" / "checkpoint_last.pt"
    vocab = common.dictionary_size(next(iter(sorted(data_bin.glob("dict.*.txt"))), data_bin / "dict.txt"))
    shape = cost.model_shape(s.arch, [*model_flags, *s.fairseq_extra], vocab or cost.EN_DE_VOCAB)
    devices = [{"device": rec.get("device"), "tokens_per_second": round(tps, 1),
                "peak_memory_bytes": rec.get("peak_reserved_bytes", rec.get("peak_rss_bytes")),
                "total_memory_bytes": rec.get("total_bytes")} for rec, tps in zip(records, r["tokens_per_second"])]
    peak = device_peak(records[0], s.precision_used)
    matmul = matmul_rate("cuda", s.precision_used) if records[0].get("kind") == "cuda" else None
    u = utilization(records, r["first_timed"], r["last"], shape, r["window_seconds"], matmul, peak and peak * 1e12)
    expected = expected_utilization(records[0], s, shape)
    floor = s.canary_min_utilization or (0.5 * expected if peak and expected else None)
    loss = r["loss"]
    values = list(loss.values())
    k = max(1, len(values) // 10)
    head, tail = sum(values[:k]) / k, sum(values[-k:]) / k
    spans = r["validations"]
    valid_seconds = spans[-1][1] - spans[-1][0] if spans else None
    plan = events(s.max_update, per_epoch, s.save_interval_updates, s.validate_interval_updates)
    result.update({
        "updates": r["updates"], "warmup_updates_left_out": r["warmup_updates_left_out"],
        "seconds_per_update": round(r["seconds_per_update"], 4),
        "tokens_per_second": {"total": round(sum(r["tokens_per_second"]), 1), "per_device": devices},
        **u.fields(), "measured_matmul_tflops": None if matmul is None else round(matmul / 1e12, 1),
        "peak_tflops_per_device": peak, "mfu_of_datasheet_peak_floor": floor,
        "mfu_of_datasheet_peak_expected": None if expected is None else round(expected, 4),
        "loss_bits": {"first": values[0], "last": values[-1], "first_10pct_mean": head, "last_10pct_mean": tail},
        "validation_seconds": None if valid_seconds is None else round(valid_seconds, 2),
        "checkpoint": {"write_seconds": writes[-1] if writes else None,
                       "bytes": checkpoint.stat().st_size if checkpoint.exists() else None},
        "plan": {"max_update": s.max_update, "updates_per_epoch": per_epoch, "epoch_pairs": corpus_pairs,
                 "save_interval_updates": s.save_interval_updates,
                 "validate_interval_updates": s.validate_interval_updates, "average": s.average, **plan},
    })
    if not all(math.isfinite(v) for v in values):
        causes.append(f"the loss is NaN/Inf at update {next(u for u, v in loss.items() if not math.isfinite(v))}: "
                      "lower --lr-scale or raise --warmup-updates")
    elif not tail < head:
        causes.append(f"the loss did not fall ({head:.3f} bits over the first {k} updates, {tail:.3f} over the "
                      f"last {k}): check --lr-scale, --warmup-updates and the data")
    if floor and u.mfu_of_datasheet_peak is not None and u.mfu_of_datasheet_peak < floor:
        causes.append(f"throughput: the model FLOPs of the real tokens at {u.mfu_of_datasheet_peak:.1%} of the "
                      f"GPU's datasheet {s.precision_used} peak, below the floor {floor:.1%} "
                      "(--canary-min-utilization): a larger --max-tokens-per-gpu, or check the GPUs")
    total_tps = sum(r["tokens_per_second"])
    if s.canary_min_tokens_per_second and total_tps < s.canary_min_tokens_per_second:
        causes.append(f"throughput: {total_tps:.0f} target tokens/s, below --canary-min-tokens-per-second "
                      f"{s.canary_min_tokens_per_second:g}")
    if not checkpoint.exists() or not writes:
        causes.append(failure or "the canary wrote no checkpoint (see the log)")
    if causes:  # fail fast: nothing more is worth measuring
        return conclude(out, result, causes)
    causes += predict(ctx, job, result, r, writes, valid_seconds, (launched, ended))
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # measured; a canary's weights are no product
    return conclude(out, result, causes)


def predict(ctx, job: Job, result: dict, r: dict, writes: List[float], valid_seconds: Optional[float],
            times: Sequence[float]) -> List[str]:
    """Time averaging and generation, predict the whole run's wall time part by part (``r``: the
    training's :func:`rates`; ``times``: when it was launched and ended) and check the disk, into
    ``result``; the causes of failure found (the disk's)."""
    (launched, ended), causes = times, []
    s, out, data_stages = job.s, job.out, job.data_stages
    checkpoint = out / "checkpoints" / "checkpoint_last.pt"
    spans, plan = r["validations"], result["plan"]
    size = checkpoint.stat().st_size
    avg = averaging_seconds(ctx, checkpoint, s.average, out) if job.averages else {"predicted": 0.0,
                                                                                   "averaged_bytes": 0}
    kept = (s.average + 2) * size + avg["averaged_bytes"]
    have = sum(p.stat().st_size for p in (s.workdir / "checkpoints").glob("*.pt")) \
        if (s.workdir / "checkpoints").is_dir() else 0
    free = shutil.disk_usage(s.workdir).free
    result["disk"] = {"kept_bytes": kept, "free_bytes": free, "kept_checkpoints": s.average + 2}
    if kept - have > free:
        causes.append(f"disk: the run keeps {s.average + 2} checkpoints of {size / 1e9:.2f} GB and an average "
                      f"({kept / 1e9:.1f} GB), {s.workdir}'s file system has {free / 1e9:.1f} GB free")
    gen = generation_seconds(ctx, job.generate_command(checkpoint), job.decoded, out, env=common.thread_env(s))
    startup = r["first_end"] - launched
    # after the last update: the final validation and checkpoint write (counted below), then the
    # process ends (the dataloaders, the distributed group): measured from the last event to the exit
    last_event = max([r["last_end"], *(span[1] for span in spans)])
    shutdown = max(0.0, ended - last_event - writes[-1])
    training = startup + (s.max_update - r["first_timed"]) * r["seconds_per_update"] + shutdown
    data_workdir = getattr(s, "data_workdir", None) or s.workdir  # where the data stages ran (wsj: here)
    predicted = {"data_preparation": data_seconds(data_workdir, data_stages), "training": training,
                 "validations": plan["validations"] * (valid_seconds or 0.0),
                 "checkpoint_writes": plan["checkpoint_writes"] * statistics.median(writes),
                 "averaging": avg["predicted"], "generation": gen["predicted"]}
    predicted["total"] = sum(v for v in predicted.values() if v is not None)
    result["predicted_seconds"] = {k: None if v is None else round(v, 1) for k, v in predicted.items()}
    result["measured"] = {"startup_seconds": round(startup, 2), "shutdown_seconds": round(shutdown, 2),
                          "averaging": avg, "generation": gen, "decoded_sentences": gen["decoded_sentences"]}
    result["warnings"] = schedule_warnings(s, startup, r["seconds_per_update"])
    result["data_stages"] = list(data_stages)  # for checking it against a full run that ends after it
    result["checked_against"] = checked_against(s.workdir, data_workdir, data_stages, result["predicted_seconds"])
    return causes


def schedule_warnings(s, startup: float, per_update: float) -> List[str]:
    """What the run's schedule cannot do in its budget (--train-minutes): the updates it reaches
    against --max-update and the warm-up."""
    if not s.train_minutes:
        return []
    reach = max(0, int((s.train_minutes * 60 - startup) / per_update))
    out = []
    if reach < s.max_update:
        out.append(f"--train-minutes {s.train_minutes:g} stops training near update {reach} of --max-update "
                   f"{s.max_update}")
    if reach < s.warmup_updates:
        out.append(f"the budget ends before the {s.warmup_updates}-update warm-up does (eq. 3): the learning rate "
                   "never reaches its peak; a shorter --warmup-updates or a smaller --tokens-per-update fits it")
    return out


def conclude(out: Path, result: dict, causes: List[str]):
    result["failed"] = causes[0] if causes else None
    write_json_atomic(out / "canary.json", result)
    if causes:  # the recipe prints the table of a canary that passed (attn_kit.pipeline.stages.run_recipe)
        report(result)
        raise UserError(f"canary: {causes[0]} ({out / 'canary.json'})")


def clock(seconds: Optional[float]) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def utilization_text(c: dict) -> str:
    """The canary's model FLOP utilization in words: against the matmul rate it measured, against the
    datasheet peak (and the floor), the padding's share."""
    parts = []
    if c.get("mfu") is not None:
        parts.append(f"{c['mfu']:.1%} of the {c['measured_matmul_tflops']:g} TFLOP/s matmul rate measured here")
    if c.get("mfu_of_datasheet_peak") is not None:
        floor = c.get("mfu_of_datasheet_peak_floor")
        parts.append(f"{c['mfu_of_datasheet_peak']:.1%} of the {c['peak_tflops_per_device']:g} TFLOP/s datasheet "
                     "peak" + (f" (floor {floor:.1%})" if floor else ""))
    if c.get("utilization") is not None:  # a canary.json from before the real tokens were counted apart
        parts.append(f"{c['utilization']:.1%} of the {c['peak_tflops_per_device']:g} TFLOP/s datasheet peak, "
                     "padded positions counted as work")
    text = "; ".join(parts) or "n/a on a CPU (no matmul rate or peak measured)"
    return text + (f"; padding {c['padding_share']:.1%} of the positions" if "padding_share" in c else "")


def report(c: dict):
    """The canary's table."""
    rows = []
    tps = c.get("tokens_per_second")
    if tps:
        per = ", ".join(f"{d['tokens_per_second']:.0f}" for d in tps["per_device"])
        rows.append(("target tokens/s, all devices (per device)", f"{tps['total']:.0f} ({per})"))
        rows.append(("seconds per update", f"{c['seconds_per_update']:.3f} ({c['updates']} updates, the first "
                                           f"{c['warmup_updates_left_out']} left out)"))
        rows.append(("model FLOP utilization (real tokens)", utilization_text(c)))
        for i, d in enumerate(tps["per_device"]):
            if d["peak_memory_bytes"] and d["total_memory_bytes"]:
                rows.append((f"peak memory, process {i} ({d['device']})",
                             f"{d['peak_memory_bytes'] / 2**30:.2f} of {d['total_memory_bytes'] / 2**30:.1f} GiB "
                             f"(headroom {1 - d['peak_memory_bytes'] / d['total_memory_bytes']:.0%})"))
        loss = c["loss_bits"]
        rows.append(("loss, first and last update (bits)", f"{loss['first']:.3f} -> {loss['last']:.3f}"))
        rows.append(("one validation", clock(c.get("validation_seconds"))))
        ck = c.get("checkpoint") or {}
        if ck.get("bytes"):
            rows.append(("one checkpoint write", f"{ck['write_seconds']:.2f} s, {ck['bytes'] / 1e6:.1f} MB"))
    predicted = c.get("predicted_seconds")
    if predicted:
        plan = c["plan"]
        labels = {"data_preparation": "data preparation (as it ran here)",
                  "training": f"training, {plan['max_update']} updates",
                  "validations": f"validations, {plan['validations']}",
                  "checkpoint_writes": f"checkpoint writes, {plan['checkpoint_writes']}",
                  "averaging": f"averaging {plan['average']} checkpoints",
                  "generation": f"generation, {c['measured']['decoded_sentences']} sentences",
                  "total": "the whole run"}
        rows.append(("predicted wall time:", ""))
        rows += [(f"  {labels[k]}", clock(v)) for k, v in predicted.items()]
    width = max(len(k) for k, _ in rows) if rows else 0
    print(f"\ncanary: {c['arch']}, {c['devices']} device(s), {c['precision']}, {c['canary_minutes']:g} minutes")
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    check = c.get("checked_against")
    if check and "total" in check["error"]:
        print(f"  the finished run in this work directory took {clock(check['measured_seconds']['total'])}: the "
              f"prediction is {check['error']['total']:+.1%} off")
    for w in c.get("warnings") or []:
        print(f"  warning: {w}")
    print(f"  {'FAILED: ' + c['failed'] if c['failed'] else 'passed'}")
