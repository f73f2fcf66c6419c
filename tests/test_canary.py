"""--canary (attn_kit.recipes.canary) and what it reads (attn_plugin.run_stats): the record of each
training step agrees with fairseq's own log, the run's checkpoint writes and validations are
counted as fairseq-train makes them, the rates are what hand arithmetic gives, and the canary of
the WMT14 --smoke run passes, and fails in one line when its loss diverges or its disk is full."""
import collections
import importlib
import json
import math
import re
import shutil
import sys
import time

import pytest
from conftest import USER_DIR, assert_one_error_line, copy_prepared, run, run_main, train_cmd

from attn_kit.checkout import REPO
from attn_kit.cli import UserError
from attn_kit.fairseq_layer.fairseq_log import stats_lines
from attn_kit.planning import cost
from attn_kit.recipes import canary

RECIPE = [sys.executable, "-m", "attn_kit.recipes.translation"]
SMOKE_CANARY = ["--smoke", "--canary", "--canary-minutes", "0.2"]


# --------------------------------------------------------------------------- the record of each step
@pytest.mark.slow  # trains a model
def test_each_step_recorded_agrees_with_fairseqs_log(data_bin, tmp_path):
    """ATTN_RUN_STATS: two micro-batches per update (--update-freq 2); summed per update over the
    logging interval, loss / sample_size / ln 2 and the target tokens are fairseq's logged loss
    and wpb of that interval."""
    stats = tmp_path / "stats"
    cmd = train_cmd(data_bin, tmp_path / "ckpt", ["--user-dir", USER_DIR, "--task", "attn_translation",
                                                    "--arch", "attn_paper_base"],
                    ["--lr", "1", "--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", "5", "--lr-scale", "2",
                     "--criterion", "attn_label_smoothed_cross_entropy", "--max-update", "10", "--update-freq", "2",
                     "--no-save", "--disable-validation", "--log-format", "json"])  # the recipes' log format
    proc = run(cmd, env={"ATTN_RUN_STATS": str(stats)}, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = canary.read_stats(stats)
    steps = record["steps"]
    assert len(steps) == 20 and collections.Counter(s[0] for s in steps) == {u: 2 for u in range(10)}
    logged = list(stats_lines((proc.stdout + proc.stderr).splitlines(), "train_inner"))
    assert len(logged) == 2  # --log-interval 5
    for fields, updates in zip(logged, (range(0, 5), range(5, 10))):
        chosen = [s for s in steps if s[0] in updates]
        loss = sum(s[6] for s in chosen) / sum(s[7] for s in chosen) / math.log(2)
        assert round(loss, 3) == pytest.approx(float(fields["loss"]), abs=1e-3)
        assert sum(s[2] for s in chosen) / 5 == pytest.approx(float(fields["wpb"]), abs=0.1)
    assert record["kind"] == "cpu" and 0 < record["peak_rss_bytes"] < record["total_bytes"]


# --------------------------------------------------------------------------- the run's plan
def test_checkpoint_writes_and_validations_are_counted_as_fairseq_makes_them(smoke_run):
    """events() on the --smoke run's own settings (25 updates, a checkpoint every 10, epochs as its
    log says) gives the number of checkpoints its fairseq-train wrote and validations it ran."""
    text = (smoke_run / "logs" / "train.log").read_text()
    per_epoch = int(re.search(r"grouped total_num_itrs = (\d+)", text).group(1))
    counted = canary.events(25, per_epoch, 10, None)
    assert counted["checkpoint_writes"] == len(re.findall(r"Saved checkpoint", text))
    assert counted["validations"] == len(list(stats_lines(text.splitlines(), "valid")))
    assert canary.events(1000, 975, 100, 500) == {"checkpoint_writes": 11, "validations": 11}  # the bundled run
    assert canary.events(10, None, 4, 5) == {"checkpoint_writes": 3, "validations": 4}  # 4 8 10; 4 5 8 10


def test_updates_per_epoch_of_the_corpus_or_of_the_epochs_it_is_told():
    """From fairseq-train's log: its corpus's 624 pairs make 2 updates an epoch; epochs of 4.5M pairs
    as long on average make 2 x 4.5M / 624 = 14423 (rounded); a log without the count says nothing."""
    log = ("| fairseq.tasks.translation | data-bin train en-de 624 examples\n"
           "| fairseq.data.iterators | grouped total_num_itrs = 2\n")
    assert canary.updates_per_epoch(log) == (2, 624)
    assert canary.updates_per_epoch(log, 4_500_000) == (14423, 4_500_000)
    assert canary.updates_per_epoch("no epoch was begun") == (None, None)


def test_rates_by_hand():
    """Ten updates one second apart, a validation of 3 s after update 6 (so update 7 ends 4 s after
    6), 100 target tokens a step on each of two processes, losses falling: the first update
    (5% of 10, rounded up) is left out; the 3 s of the validation are too."""
    def record(rank, shift):
        times, t = [], 0.0
        for u in range(10):
            t += 4.0 if u == 6 else 1.0
            times.append(t)
        steps = [[u, times[u] + shift, 100, 120, 110, 4, 10.0 - u, 100.0] for u in range(10)]
        return {"rank": rank, "steps": steps, "valid_steps": [[times[5] + 0.5, times[5] + 3.0]] if rank == 0 else []}

    r = canary.rates([record(0, 0.0), record(1, 0.01)])
    assert r["updates"] == 10 and r["warmup_updates_left_out"] == 1 and (r["first_timed"], r["last"]) == (1, 10)
    assert r["seconds_per_update"] == pytest.approx(1.0)  # 12 s for updates 2..10, less the validation's 3
    assert r["tokens_per_second"] == pytest.approx([100.0, 100.0])
    assert r["loss"][1] == pytest.approx(2 * 10.0 / 200 / math.log(2))
    with pytest.raises(UserError, match="only 3 update"):
        canary.rates([{"rank": 0, "steps": record(0, 0)["steps"][:3], "valid_steps": []}])


def test_utilization_counts_the_real_tokens_against_the_measured_rate_by_hand():
    """The small model of tests/test_cost.py (N=1, d=4, d_ff=8, h=2, V=10), whose forward over one
    sentence of 3 source and 2 target tokens is 2032 FLOPs by hand. Padded to 4 source and 3 target
    positions it is 3000 (encoder 4 x 320, decoder 3 x 408, the encoder output's W^K, W^V 4 x 64,
    output layer 3 x 80). Two such steps in the timed update, 1 s: model FLOPs 2 x 3 x 2032 = 12192,
    the arithmetic done 2 x 3 x 3000 = 18000; 10 of the 14 positions are real."""
    side = cost.Side(layers=1, d_model=4, d_ff=8, h=2, d_k=2, d_v=2)
    shape = cost.Shape(side, side, vocab=10)
    assert cost.batch_train_flops(shape, 4, 3, 1) == 3 * 3000
    #        update, time, ntokens, src positions, tgt positions, sentences, loss, sample size, src tokens
    steps = [[0, 0.0, 2, 4, 3, 1, 1.0, 2.0, 3], [1, 0.5, 2, 4, 3, 1, 1.0, 2.0, 3], [1, 1.0, 2, 4, 3, 1, 1.0, 2.0, 3]]
    u = canary.utilization([{"steps": steps}], 1, 2, shape, 1.0, matmul=24384.0, peak=48768.0)
    assert u.real_tflops_per_second * 1e12 == pytest.approx(12192)
    assert u.padded_tflops_per_second * 1e12 == pytest.approx(18000)
    assert (u.mfu, u.mfu_of_datasheet_peak) == (pytest.approx(0.5), pytest.approx(0.25))
    assert u.padding_share == pytest.approx(1 - 10 / 14)
    # two processes: the rate and the peak are per device
    two = canary.utilization([{"steps": steps}, {"steps": steps}], 1, 2, shape, 1.0, 24384.0, 48768.0)
    assert (two.mfu, two.mfu_of_datasheet_peak) == (pytest.approx(0.5), pytest.approx(0.25))
    # a record from before the real source tokens were recorded: the source as padded as the target (4 x 2/3)
    old = [step[:8] for step in steps]
    assert canary.utilization([{"steps": old}], 1, 2, shape, 1.0).real_tflops_per_second * 1e12 == pytest.approx(
        2 * cost.batch_train_flops(shape, 4 * 2 / 3, 2, 1))
    assert canary.utilization([{"steps": steps}], 1, 2, shape, 1.0).mfu is None  # no rate measured: none


# --------------------------------------------------------------------------- the canary of --smoke
def canary_json(work):
    return json.loads((work / "canary" / "canary.json").read_text())


def copy_data(src, dst):
    """A work directory with ``src``'s finished data stages (their stamps and files), no canary."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("canary", "canary.*", "logs"), symlinks=True)
    return dst


@pytest.fixture(scope="module")
def smoke_canary(smoke_run, tmp_path_factory):
    """The canary of --smoke on the smoke run's prepared data (the same data options): its data stages
    are done already, and it trains, averages and decodes as a canary does."""
    work = copy_prepared(smoke_run, tmp_path_factory.mktemp("canary") / "w")
    proc = run([*RECIPE, *SMOKE_CANARY, "--workdir", work, "--canary-epoch-pairs", str(EPOCH_PAIRS)], timeout=600)
    return work, proc


EPOCH_PAIRS = 4_500_000  # the canary predicts for WMT14-sized epochs, as the GPU check's canaries on a stand-in corpus


@pytest.mark.slow
def test_the_smoke_canary_passes_with_every_field(smoke_canary):
    work, proc = smoke_canary
    c = canary_json(work)
    assert c["failed"] is None and "passed" in proc.stdout
    parts = c["predicted_seconds"]
    assert set(parts) == {"data_preparation", "training", "validations", "checkpoint_writes", "averaging",
                          "generation", "total"}
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"), abs=0.5)
    stamps = sum(json.loads((work / ".stages" / f"{s}.done").read_text())["seconds"]
                 for s in ("download", "extract", "tokenize", "bpe", "binarize"))
    assert parts["data_preparation"] == pytest.approx(stamps, abs=0.2)
    tps = c["tokens_per_second"]
    assert tps["total"] == pytest.approx(sum(d["tokens_per_second"] for d in tps["per_device"]), abs=1)
    assert len(tps["per_device"]) == 1 and tps["per_device"][0]["peak_memory_bytes"] > 0
    assert c["mfu"] is None and c["mfu_of_datasheet_peak"] is None  # a CPU: no rate measured, no peak known
    assert 0 < c["padding_share"] < 1 and 0 < c["real_token_tflops_per_second"] < c["padded_position_tflops_per_second"]
    assert c["loss_bits"]["last"] < c["loss_bits"]["first"]
    assert c["validation_seconds"] >= 0 and c["checkpoint"]["bytes"] > 0 and c["checkpoint"]["write_seconds"] >= 0
    assert c["plan"]["max_update"] == 60 and c["disk"]["kept_checkpoints"] == c["plan"]["average"] + 2
    # its epochs are EPOCH_PAIRS pairs long, the smoke corpus's updates per epoch scaled by its pairs (its log)
    log = (work / "logs" / "canary.log").read_text()
    own_pairs = int(re.search(r"train en-de (\d+) examples", log).group(1))
    own_updates = int(re.search(r"grouped total_num_itrs = (\d+)", log).group(1))
    assert c["plan"]["epoch_pairs"] == EPOCH_PAIRS
    assert c["plan"]["updates_per_epoch"] == round(own_updates * EPOCH_PAIRS / own_pairs) > own_updates
    assert c["measured"]["generation"]["sentences"] > 0 and not (work / "canary" / "checkpoints").exists()
    assert not (work / "checkpoints").exists() and not (work / "results.json").exists()  # the run itself is not made


@pytest.mark.slow
def test_a_diverging_run_fails_its_canary_in_one_line(smoke_canary, tmp_path):
    work = copy_data(smoke_canary[0], tmp_path / "w")
    # --max-update 20 (a third of --smoke's 60, which the canary reaches before its time is up): the loss
    # diverges within the first updates at --lr-scale 300; the check is that it did not fall
    proc = run([*RECIPE, *SMOKE_CANARY, "--workdir", work, "--lr-scale", "300", "--max-update", "20"], check=False,
               timeout=600)
    line = assert_one_error_line(proc, "canary: the loss did not fall")
    assert canary_json(work)["failed"] in line
    assert "predicted_seconds" not in canary_json(work)  # failed fast: no averaging or generation timed


@pytest.mark.slow
def test_a_disk_too_small_for_the_kept_checkpoints_fails_the_canary(smoke_canary, tmp_path, monkeypatch, capsys):
    from attn_kit.recipes import translation

    work = copy_data(smoke_canary[0], tmp_path / "w")
    usage = shutil.disk_usage(work)
    monkeypatch.setattr(canary.shutil, "disk_usage", lambda path: usage._replace(free=1_000_000))
    # The timing of the averaging and the generation (three processes that import fairseq, ~11 s CPU) is
    # test_the_smoke_canary_passes_with_every_field's; here it stands still: the disk's check needs only the
    # sizes of the checkpoint and of an average (at most a checkpoint's), far above the 1 MB free
    monkeypatch.setattr(canary, "averaging_seconds", lambda ctx, checkpoint, n, out: {
        "predicted": 0.0, "averaged_bytes": checkpoint.stat().st_size})
    monkeypatch.setattr(canary, "generation_seconds", lambda ctx, cmd, decoded, out, env=None: {
        "predicted": 0.0, "decoded_sentences": 0})
    # --max-update 20 (a third of --smoke's 60, which the canary reaches before its time is up): the loss falls
    # and a checkpoint is written as in 60; the disk's check depends on the checkpoints' size and number only
    with pytest.raises(UserError, match=r"^canary: disk: the run keeps 7 checkpoints of .* 0\.0 GB free"):
        translation.main([*SMOKE_CANARY, "--workdir", str(work), "--max-update", "20"])
    assert canary_json(work)["failed"].startswith("disk:")


# --------------------------------------------------------------------------- every training recipe
@pytest.mark.parametrize("recipe,argv,canaries", [
    ("translation", ["--smoke"], ["canary"]),
    ("translation", ["--arch", "attn_paper_big", "--ngpus", "8"], ["canary"]),
    ("parallel", ["--src", "en", "--tgt", "de", "--train", "t", "--valid", "v", "--test", "s"], ["canary"]),
    ("wsj", ["--smoke"], ["canary"]),
    ("table3", ["--smoke", "--rows", "base,big"], ["canary-base", "canary-big"]),
])
def test_every_training_recipe_has_a_canary_in_place_of_its_training(recipe, argv, canaries, tmp_path):
    """--canary --dry-run: the data stages, then the canary (Table 3: one per row, then their sum),
    whose commands are the run's fairseq-train with the canary's budget, averaging and generation."""
    # the recipe's main() here (its process would import torch again for the parallel recipe's device check);
    # the recipes' processes are run by the tests of their errors (test_a_canary_of_the_tuning_grid_..., ...)
    proc = run_main(importlib.import_module(f"attn_kit.recipes.{recipe}").main,
                    *argv, "--canary", "--canary-minutes", "3", "--workdir", tmp_path / "w", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    names = re.findall(r"stage \d+/\d+ ([\w-]+):", proc.stdout)
    assert names[-len(canaries) - (recipe == "table3"):] == canaries + (["canary-table"] if recipe == "table3" else [])
    assert not {"train", "average", "generate", "score"} & set(names)
    train = [line for line in proc.stdout.splitlines()
             if ("fairseq-train" in line or "fairseq_cli.train" in line) and "$ " in line]
    assert len(train) == len(canaries) and all("--stop-time-hours 0.0500" in t and "ATTN_RUN_STATS=" in t
                                               for t in train)
    assert proc.stdout.count("--match-source-len") == len(canaries)


def test_a_canary_of_the_tuning_grid_is_refused_in_one_line(tmp_path):
    proc = run([sys.executable, "-m", "attn_kit.recipes.wsj", "--smoke", "--tune", "--canary", "--workdir",
                tmp_path / "w", "--dry-run"], check=False)
    assert_one_error_line(proc, "--canary checks one training run")


@pytest.mark.parametrize("device,precision,peak", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989), ("NVIDIA H100 PCIe", "bf16", 756), ("NVIDIA H200", "fp32", 67),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312), ("NVIDIA A10", "fp16", 125), ("NVIDIA L40S", "bf16", 362),
    ("Tesla V100-SXM2-16GB", "bf16", None), ("NVIDIA GeForce RTX 4090", "bf16", None)])
def test_the_peak_of_the_gpu_torch_names(device, precision, peak):
    """Utilization needs the device's peak: torch's device names map to attn_kit.planning.cost's datasheet GPUs
    (the longest name that fits: an A100 is no A10, an H100 PCIe no H100 SXM); a V100 has no bf16 units."""
    assert canary.device_peak({"kind": "cuda", "device": device}, precision) == peak
    assert canary.device_peak({"kind": "cpu", "device": "cpu"}, precision) is None


@pytest.mark.parametrize("recipe,argv", [
    ("parallel", ["--src", "en", "--tgt", "de", "--train", "t", "--valid", "v", "--test", "s", "--ngpus", "0"]),
    ("translation", ["--smoke"]), ("wsj", ["--smoke"])])
def test_every_recipes_canary_reports_its_canary_table(recipe, argv, tmp_path, monkeypatch):
    """A canary's results are its canary.json, whichever recipe ran it: reported with the canary's table.
    (recipes/parallel.sh --canary once printed them with the full run's report: a KeyError traceback
    after the canary had run, seen on the GPU machine.) The canary.json is the base canary the GPU
    check filed; the recipe's stages are replaced by one that writes it."""
    from attn_kit.pipeline.stages import Stage

    filed = json.loads((REPO / "benchmarks" / "results" / "h200_gpu_check.json").read_text())
    result = filed["canary"]["base"]["canary"]
    work = tmp_path / "w"

    def write(ctx):
        (work / "canary").mkdir(parents=True, exist_ok=True)
        (work / "canary" / "canary.json").write_text(json.dumps(result))

    module = importlib.import_module(f"attn_kit.recipes.{recipe}")
    stages_module = module if recipe != "parallel" else importlib.import_module("attn_kit.recipes.translation")
    monkeypatch.setattr(stages_module, "stages", lambda s: [Stage("canary", write, outputs=[work / "canary" /
                                                                                             "canary.json"])])
    proc = run_main(module.main, *argv, "--canary", "--workdir", work)
    assert proc.returncode == 0, proc.stderr
    assert "target tokens/s" in proc.stdout and f"{result['tokens_per_second']['total']:.0f}" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_gpu_busy_share_is_the_median_of_nvidia_smis_samples_over_the_timed_updates(tmp_path):
    """The GPU check's "GPU busy" column: the median of nvidia-smi's utilization samples between the
    first and last timed update (the first 30% of the updates, at least 3, left out), not those of the
    run's start-up or of the idle machine after it."""
    import datetime

    from lab.bench.gpu_check import add_utilization

    t0 = datetime.datetime(2026, 11, 27, 15, 0, 0)
    smi = tmp_path / "smi.csv"
    busy = [0, 0, 0, 10, 80, 90, 70, 60, 0, 0, 0, 0]  # one sample a second from t0
    smi.write_text("".join(f"{(t0 + datetime.timedelta(seconds=i)).strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, "
                           f"{b} %, 1011 MiB, 80.0 W\n" for i, b in enumerate(busy)) + "garbage line\n")
    stats = tmp_path / "run" / "stats"
    stats.mkdir(parents=True)
    # 10 updates, one step each, ending at t0 + 1.5 s, 2.0 s, ... 6.0 s: timed from update 3's end (2.5 s)
    steps = [[u, t0.timestamp() + 1.5 + 0.5 * u, 100, 100, 100, 0, 1.0, 100.0] for u in range(10)]
    (stats / "stats.1.json").write_text(json.dumps({"rank": 0, "steps": steps}))
    entry = {}
    add_utilization(entry, tmp_path / "run", smi)
    assert entry["gpu_utilization_percent_median"] == 75  # samples at 3, 4, 5, 6 s: 10, 80, 90, 70


PREDICTED = {"data_preparation": 100.0, "training": 500.0, "validations": 50.0, "checkpoint_writes": 50.0,
             "averaging": 20.0, "generation": 80.0, "total": 800.0}


def test_a_canary_run_before_the_full_run_is_checked_by_hand(tmp_path):
    """canary.json kept checked_against: null when the canary ran first in the work directory (the
    comparison was made only when the canary ran after the run): the run's end fills it in, its stage
    times summed part by part as the prediction is made."""
    from attn_kit.pipeline.canary_check import check_earlier

    work = tmp_path / "w"
    (work / "canary").mkdir(parents=True)
    (work / "canary" / "canary.json").write_text(json.dumps({"predicted_seconds": PREDICTED, "checked_against": None,
                                                             "data_stages": ["download", "binarize"]}))
    stage_seconds = {"download": 40.0, "binarize": 60.0, "train": 750.0, "average": 25.0, "generate": 70.0,
                     "score": 10.0}
    (work / "results.json").write_text(json.dumps({"stage_seconds": stage_seconds}))
    assert check_earlier(work) == canary_json(work)["checked_against"]
    check = canary_json(work)["checked_against"]
    assert check["measured_seconds"] == {"data_preparation": 100.0, "training + validations + checkpoint_writes": 750.0,
                                         "averaging": 25.0, "generation + scoring": 80.0, "total": 955.0}
    assert check["error"]["training + validations + checkpoint_writes"] == round(600 / 750 - 1, 4)
    assert check["error"]["total"] == round(800 / 955 - 1, 4)
    assert check_earlier(work) is None  # checked already: left as it is


def assert_checked_by_the_run(work):
    """canary.json's checked_against is the prediction beside the stage times the run wrote to
    results.json: the data stages the canary names summed, train, average, the rest (generate, score;
    WSJ: trees too) summed, and the error of each part, by hand."""
    c, seconds = canary_json(work), json.loads((work / "results.json").read_text())["stage_seconds"]
    data = sum(seconds[s] for s in c["data_stages"])
    rest = sum(v for k, v in seconds.items() if k not in ("train", "average", *c["data_stages"]))
    measured = {"data_preparation": data, "training + validations + checkpoint_writes": seconds["train"],
                "averaging": seconds["average"], "generation + scoring": rest, "total": sum(seconds.values())}
    check = c["checked_against"]
    assert check is not None, "the full run left the earlier canary unchecked"
    assert check["measured_seconds"] == pytest.approx(measured)
    p = c["predicted_seconds"]
    assert check["predicted_seconds"]["training + validations + checkpoint_writes"] == pytest.approx(
        p["training"] + p["validations"] + p["checkpoint_writes"], abs=0.05)
    assert check["error"]["total"] == pytest.approx(p["total"] / measured["total"] - 1, abs=1e-4)


@pytest.mark.parametrize("recipe,argv", [
    ("parallel", ["--src", "en", "--tgt", "de", "--train", "t", "--valid", "v", "--test", "s", "--ngpus", "0"]),
    ("translation", ["--smoke"]), ("wsj", ["--smoke"])])
def test_every_recipes_full_run_checks_an_earlier_canary(recipe, argv, tmp_path, monkeypatch):
    """Each recipe's entry point: a --canary run, then the full run in the same work directory; the full
    run's end fills in the canary's checked_against (wmt14_en_de.sh and wmt14_en_fr.sh left it null when
    the check was each recipe's own to call), and the canary stays done. The stages stand in for the real ones (a data stage, train,
    average and score, each writing its output; the canary's writes canary.json with a prediction):
    the real runs are tests/test_canary.py's and tests/test_recipe_wsj.py's smoke-sized ones."""
    from attn_kit.pipeline.stages import Stage

    work = tmp_path / "w"

    def write(path, value, seconds=0.0):
        def run(ctx):
            time.sleep(seconds)  # a stage time above the 0.1 s the stamps round to
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        return run

    def stand_ins(s):
        if s.canary:
            return [Stage("prep", write(work / "prep.json", {})), Stage("canary", write(
                work / "canary" / "canary.json", {"predicted_seconds": PREDICTED, "checked_against": None,
                                                  "data_stages": ["prep"], "failed": None}),
                outputs=[work / "canary" / "canary.json"])]
        return [Stage("prep", write(work / "prep.json", {})),
                Stage("train", write(work / "train.json", {}, 0.2), outputs=[work / "train.json"]),
                Stage("average", write(work / "average.json", {}), outputs=[work / "average.json"]),
                Stage("score", write(work / "results.json", {"sacrebleu": 1.0}), outputs=[work / "results.json"])]

    module = importlib.import_module(f"attn_kit.recipes.{recipe}")
    stages_module = module if recipe != "parallel" else importlib.import_module("attn_kit.recipes.translation")
    monkeypatch.setattr(stages_module, "stages", stand_ins)
    monkeypatch.setattr(stages_module, "report", lambda r: None)  # the stand-ins' results have no scores
    monkeypatch.setattr(canary, "report", lambda c: None)
    first = run_main(module.main, *argv, "--canary", "--workdir", work)
    assert first.returncode == 0, first.stderr
    assert canary_json(work)["checked_against"] is None  # no run here yet
    full = run_main(module.main, *argv, "--workdir", work)
    assert full.returncode == 0, full.stderr
    assert_checked_by_the_run(work)
    assert "its prediction checked against this run" in full.stdout
    # the canary's stamp follows its canary.json: the same --canary again skips it (it ran it again, minutes)
    again = run_main(module.main, *argv, "--canary", "--workdir", work)
    assert again.returncode == 0 and "canary: done already, skipping" in again.stdout, again.stdout
    assert canary_json(work)["checked_against"] is not None


@pytest.mark.slow
def test_the_smoke_canary_is_checked_when_the_full_run_ends_after_it(smoke_run, smoke_canary, tmp_path):
    """recipes/wmt14_en_de.sh (python -m attn_kit.recipes.translation): the canary of --smoke ran first
    (smoke_canary: no results.json beside it, checked_against null); the full run ends after it in the same
    work directory: here the smoke run up to its last stage (a copy without results.json, which the score
    stage writes), given the canary's canary.json, and the recipe's process runs the score stage."""
    from conftest import SMOKE_RUN

    work = tmp_path / "w"
    shutil.copytree(smoke_run, work, symlinks=True)
    (work / "results.json").unlink()
    (work / "canary").mkdir()
    shutil.copy(smoke_canary[0] / "canary" / "canary.json", work / "canary")
    assert canary_json(work)["checked_against"] is None
    proc = run([*RECIPE, *SMOKE_RUN, "--workdir", work])
    assert "stage 9/9 score: output results.json is missing" in proc.stdout
    assert_checked_by_the_run(work)
