"""attn_kit.planning.step_model: the step time and memory fitted to the GPU check's results file, checked
against what ran there (each run's seconds per update and reserved memory) and against the paper's
own hardware (Sec. 5.2: 8 P100s, base 12 hours, big 3.5 days); the recipes' --max-tokens-per-gpu auto
that reads it; and benchmarks/gpu_check.sh's dry run, which CI runs so that a GPU hour is not spent
on a command that does not parse."""
import json
import math
import subprocess
import sys

import pytest
from conftest import REPO, run, run_main

from attn_kit.planning import cost, step_model
from lab import calibration
from attn_kit.planning.paper import TABLE2_TRAINING
from attn_kit.recipes import translation

FILED = REPO / "benchmarks" / "results" / "h200_gpu_check.json"


def plain_runs():
    data = json.loads(FILED.read_text())
    return [r for model in ("base", "big") for r in calibration.plain_runs(data, model)]


def test_the_fits_reproduce_the_runs_they_come_from():
    """Each plain run's seconds per update, predicted from its model's fit (forwards x (c + FLOPs / R),
    plus fairseq's Adam's extra time where it ran), within 15%; the reserved memory within 10%."""
    fits = {f.model: f for f in calibration.fits_of(FILED)}
    assert set(fits) == {"base", "big"} and all(f.points >= 3 for f in fits.values())
    for r in plain_runs():
        f = fits[r["model"]]
        flops_per_forward = calibration.padded_tflops(r) * 1e12 * r["seconds_per_update"] / r["update_freq"]
        rate = f.efficiency * f.matmul_tflops * 1e12
        predicted = r["update_freq"] * (f.forward_seconds + flops_per_forward / rate)
        if r["optimizer"] == "attn_adam":  # the other runs carry fairseq's Adam on top
            assert predicted == pytest.approx(r["seconds_per_update"], rel=0.15), r["name"]
        shape = cost.model_shape(f"attn_paper_{r['model']}", [], 20860)
        memory = step_model.BYTES_PER_PARAMETER * shape.parameters() + f.fixed_bytes \
            + f.bytes_per_token * r["max_tokens"]
        assert memory / 2 ** 30 == pytest.approx(r["peak_reserved_gib"], rel=0.10), r["name"]
    assert 0 < fits["base"].efficiency < fits["big"].efficiency < 1  # a wider model keeps the GPU busier


@pytest.mark.parametrize("arch", ["attn_paper_base", "attn_paper_big"])
def test_the_papers_own_run_is_predicted_within_a_quarter(arch):
    """8 x P100 in fp32, the paper's batch: the estimate within 25% of Sec. 5.2's training time, and the
    range around it."""
    shape = cost.model_shape(arch)
    updates = cost.paper_updates(arch)
    p = step_model.predict(shape, 28000 / 8, 1, "P100", "fp32", cost.MEAN_LENGTH)
    paper_seconds = TABLE2_TRAINING[arch]["hours"] * 3600
    assert updates * p.estimate.seconds_per_update == pytest.approx(paper_seconds, rel=0.25)
    assert p.low.seconds_per_update <= p.estimate.seconds_per_update <= p.high.seconds_per_update
    assert p.estimate.calibration == "paper" and "Sec. 5.2" in p.estimate.source


def test_a_measured_gpu_is_predicted_from_its_measurement_and_the_range_holds_the_canary():
    """On the H100 (the H200's chip) the estimate is the fit of the model nearer in width, no paper
    calibration; the base canary's measured seconds per update lies in the range."""
    canary = json.loads(FILED.read_text())["canary"]["base"]["canary"]
    shape = cost.model_shape("attn_paper_base", [], 20860)
    p = step_model.predict(shape, 28000, 1, "H100", "bf16", cost.MEAN_LENGTH)
    assert (p.estimate.calibration, p.estimate.model) == ("measured", "base")
    assert "training of base measured on an NVIDIA H200" in p.estimate.source
    assert p.low.seconds_per_update <= canary["seconds_per_update"] <= p.high.seconds_per_update * 1.05
    assert not any(e.calibration == "paper" for e in step_model.update_seconds(
        shape, 28000, 1, "H100", "bf16", cost.MEAN_LENGTH))


@pytest.mark.parametrize("gpu,arch,forward,forwards", [
    ("H100", "attn_paper_base", 28000, 1), ("H100", "attn_paper_big", 28000, 1),
    ("H200", "attn_paper_big", 28000, 1), ("A100", "attn_paper_big", 14000, 2)])
def test_auto_sizes_the_forward_to_the_gpus_memory(gpu, arch, forward, forwards, tmp_path):
    """bash recipes/wmt14_en_de.sh --dry-run --ngpus 1 --gpu NAME: one or two forwards per update on
    one GPU at the paper's 28000 tokens (the A100 listed at its 40 GB); its share (3500) on 8."""
    proc = run_main(translation.main, "--dry-run", "--ngpus", "1", "--gpu", gpu, "--arch", arch, "--workdir",
                    tmp_path / "w", "--stage", "train", "--stop-stage", "train")
    assert proc.returncode == 0, proc.stderr
    assert f"1 device(s) x --max-tokens {forward} x --update-freq {forwards} = 28000 tokens" in proc.stdout
    assert f"training wall time on 1 x {gpu} ({forward}-token forwards, {forwards} per update" in proc.stdout
    assert "  range: " in proc.stdout and "  to " in proc.stdout
    eight = run_main(translation.main, "--dry-run", "--ngpus", "8", "--gpu", gpu, "--arch", arch, "--workdir",
                     tmp_path / "w", "--stage", "train", "--stop-stage", "train")
    assert "8 device(s) x --max-tokens 3500 x --update-freq 1" in eight.stdout


def test_auto_holds_the_memory_it_predicts_within_the_share():
    for arch in ("attn_paper_base", "attn_paper_big"):
        shape = cost.model_shape(arch)
        for gpu in ("L4", "A10", "V100"):
            g = cost.GPUS[gpu]
            precision = "bf16" if g.bf16 else "fp16"
            tokens = step_model.size_forward(shape, 28000, 1, g.memory_gib, precision)
            assert tokens < 28000 and tokens % 128 == 0
            assert step_model.forward_bytes(shape, tokens, precision) <= step_model.MEMORY_SHARE * g.memory_gib * 2 ** 30
            assert step_model.forward_bytes(shape, tokens + 256, precision) > \
                step_model.MEMORY_SHARE * g.memory_gib * 2 ** 30


def test_auto_on_a_cpu_is_the_papers_batch_and_a_given_cap_is_balanced(tmp_path):
    cpu = run_main(translation.main, "--dry-run", "--ngpus", "0", "--workdir", tmp_path / "w", "--stage", "train",
                   "--stop-stage", "train")
    assert "1 device(s) x --max-tokens 4000 x --update-freq 7" in cpu.stdout  # 4096 at most, balanced
    given = run_main(translation.main, "--dry-run", "--ngpus", "1", "--max-tokens-per-gpu", "9000", "--workdir",
                     tmp_path / "w", "--stage", "train", "--stop-stage", "train")
    assert "1 device(s) x --max-tokens 7000 x --update-freq 4" in given.stdout  # the user's cap, balanced
    bad = run_main(translation.main, "--dry-run", "--max-tokens-per-gpu", "lots", "--workdir", tmp_path / "w")
    assert bad.returncode == 2 and "give a number or auto" in bad.stderr


def _train_line(out: str) -> str:
    return next(line for line in out.splitlines() if "fairseq-train " in line and line.startswith("  $ "))


def _flag(command: str, flag: str) -> str:
    words = command.split()
    return words[words.index(flag) + 1]


def test_with_no_gpu_known_the_dry_run_plans_what_the_job_sizes_at_its_start(tmp_path):
    """Issue 50: a dry run on a login node (no GPU, no --gpu) does not print a 4K-token plan the Slurm
    job would not run: the command says auto, and the plan lists each GPU kind's forward, which is what
    the same dry run with --gpu KIND puts in its command (the job sizes it the same way at its start)."""
    common = ["--dry-run", "--ngpus", "1", "--arch", "attn_paper_big", "--launcher", "slurm", "--workdir",
              tmp_path / "w", "--stage", "train", "--stop-stage", "train"]
    unknown = run_main(translation.main, *common)
    assert unknown.returncode == 0, unknown.stderr
    command = _train_line(unknown.stdout)
    assert _flag(command, "--max-tokens") == "auto" and _flag(command, "--update-freq") == "auto"
    assert _flag(command, "--save-interval-updates") == "auto"
    assert "4096 tokens per forward" not in unknown.stdout and "--max-tokens 4000" not in unknown.stdout
    kinds = next(line for line in unknown.stdout.splitlines() if "per GPU kind" in line)
    for kind in ("H100", "A100", "L4"):
        known = run_main(translation.main, *common, "--gpu", kind)
        assert known.returncode == 0, known.stderr
        command = _train_line(known.stdout)
        forward = f"{kind} ({cost.GPUS[kind].memory_gib:g} GiB) {_flag(command, '--max-tokens')} x " \
                  f"{_flag(command, '--update-freq')}:"
        assert forward in kinds, (forward, kinds)
        if kind == "H100":  # the case: the whole update in at most two forwards, GPU-hours beside hours
            assert int(_flag(command, "--max-tokens")) >= 16000 and int(_flag(command, "--update-freq")) <= 2
            wall = next(line for line in known.stdout.splitlines() if "training wall time on 1 x H100" in line)
            hours = float(wall.split("): ")[1].split(" h,")[0])
            assert f"{hours:.1f} h, {hours:.1f} GPU-hours" in wall


def test_the_gpu_check_dry_run_prints_and_parses_every_command():
    """bash benchmarks/gpu_check.sh --dry-run: the install commands docs/scaling.md gives, every
    training command (checked by fairseq-train's own parser, the plugin's options included) and the
    recipe's dry run of both canaries."""
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--dry-run"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "env -u CUDA_HOME python3 -m pip install" in out and "fairseq-fixed==0.12.3.1" in out
    trainings = [line for line in out.splitlines() if line.startswith("  $ [") and "fairseq-train" in line]
    assert len(trainings) >= 10 and all("--optimizer" in t and "--bf16-autocast" in t for t in trainings)
    assert f"fairseq-train's parser accepts the {len(trainings)} training commands" in out
    assert out.count("the recipe's dry run of canary:") == 2 and out.count("--match-source-len") == 2
    for forward in ("--max-tokens 4000 --update-freq 7", "--max-tokens 28000 --update-freq 1"):
        assert forward in out
    # the compiled layers' profile, run without the compiled runs before it (--only), compiles from
    # nothing (~16 s on the H200, where a 20-second budget once ended it after one update): it stops at
    # the updates past its profiled steps, with the compile budget as its cap
    from lab.bench.gpu_check import COMPILE_SECONDS, PROFILE_STEPS

    line = next(t for t in trainings if t.startswith("  $ [base_28k_compile_profile]")).split()
    assert int(line[line.index("--max-update") + 1]) > PROFILE_STEPS[1] + 3
    assert float(line[line.index("--stop-time-hours") + 1]) * 3600 >= COMPILE_SECONDS - 1
    # the lean step's changes, each turned off (or on) alone, come first, the recipe's training as it is
    # before them; the bundled runs go through the recipe (its dry run), the paper's base size last
    names = [t.split("]")[0][5:] for t in trainings]
    assert names[:8] == ["base_28k_profile", "base_28k", "base_28k_sync_every_update", "base_28k_whole_loss",
                         "base_28k_bf16_residual", "base_28k_compile_loss", "big_28k", "big_28k_bf16_residual"]
    flags = {"base_28k_sync_every_update": "--check-finite-every-update", "base_28k_whole_loss": "--loss-chunk-tokens 0",
             "base_28k_compile_loss": "--compile-loss", "base_28k_bf16_residual": "--bf16-residual"}
    for name, flag in flags.items():
        assert flag in next(t for t in trainings if t.startswith(f"  $ [{name}]"))
        assert flag not in trainings[1]
    assert out.count("the recipe's dry run of bundled:") == 2
    base = next(line for line in out.splitlines() if line.startswith("  $ [bundled:base]"))
    assert "--bundled --ngpus 1 --precision bf16" in base and "--d-model 512 --d-ff 2048 --h 8 --p-drop 0.1" in base


def test_the_gpu_check_rehearses_its_preparation_and_run_on_a_cpu(tmp_path):
    """`bash benchmarks/gpu_check.sh --rehearse`: prepare (what --prepare runs before a GPU session) on
    a small corpus of the bundled data's sentence shapes with no joined long pairs (the corpus of the
    GPU results on file), through the recipe's data stages; then the run's own code on it (the forked
    trainings, the profile, the rates read from the runs' records, the results file) with a tiny model
    on the CPU. prepare once stopped in a traceback before writing anything (the data-prep benchmark's
    corpus had grown options it did not pass), which only a GPU session's preparation would have met."""
    out = tmp_path / "out" / "gpu_check.json"
    # the suite rehearses the profile and a plain training (its time: CI's); bash benchmarks/gpu_check.sh
    # --rehearse also rehearses each change of the lean step turned off and both bundled runs through the recipe
    # (their commands are checked by the dry run's test above, results.json's loss curve by tests/test_curves.py)
    run([sys.executable, "-m", "lab.bench.gpu_check", "rehearse", "--dir", tmp_path, "--output", out,
         "--only", "base_28k_profile,base_28k"])
    from attn_kit.recipes.wmt14_smoke import read_sample
    from lab.bench.gpu_check import PROFILE_STEPS, REHEARSAL_UPDATES

    train = (tmp_path / "corpus" / "train.en").read_text(encoding="utf-8").splitlines()
    assert len(train) == 1000
    longest = max(len(en.split()) for en, _ in read_sample("de", "valid", 300))
    assert max(len(line.split()) for line in train) <= longest  # a joined pair would be up to twice as long
    bins = {p.name for p in (tmp_path / "data").rglob("*.bin")}
    assert {f"{split}.en-de.{lang}.bin" for split in ("train", "valid", "test") for lang in ("en", "de")} <= bins

    result = json.loads(out.read_text())
    assert result["command"].startswith("bash benchmarks/gpu_check.sh --rehearse")
    assert [r["name"] for r in result["sweep"]] == ["base_28k_profile", "base_28k"] and not result["skipped"]
    for r in result["sweep"]:  # every update ran and was timed from its record, the first 30% left out
        assert r["exit_status"] == 0 and r["updates"] == REHEARSAL_UPDATES and r["device"] == "cpu"
        assert r["timed_updates"] == REHEARSAL_UPDATES - math.ceil(0.3 * REHEARSAL_UPDATES)
        assert r["seconds_per_update"] > 0 and 0 < r["mfu"] < 1 and 0 < r["padding_share"] < 1
        assert r["real_token_tflops_per_second"] < r["padded_position_tflops_per_second"]
        assert 0 < r["target_tokens_per_update"] <= r["max_tokens"] == 28000
    profile = result["profile"]
    assert profile["run"] == "base_28k_profile" and profile["updates"] == PROFILE_STEPS[1] - PROFILE_STEPS[0]
    assert profile["wall_ms_per_update"] > 0 and any(e["name"] == "backward" for e in profile["top_cpu_total"])
    assert result["environment"]["measured_bf16_matmul_tflops"] > 0
    assert result["bundled"] == {}  # not asked for
