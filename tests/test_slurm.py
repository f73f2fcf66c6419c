"""Slurm (--launcher slurm, attn_kit.pipeline.slurm), the fairseq-train options passed after "--"
and the recipes' training extras, end to end: with stand-in sbatch, srun, scontrol and squeue on
PATH (small scripts that do on this machine what Slurm does on a cluster), recipes/parallel.sh
prepares the data, writes and submits WORKDIR/train.sbatch, and the job trains two CPU processes
together under srun (fairseq's own Slurm discovery, gloo), in bf16, with a flag passed through,
writing its curves, then averages, translates and scores."""
import csv
import io
import json
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, assert_one_error_line

from attn_kit.pipeline import slurm

# Stand-ins for Slurm's commands, each a few lines of Python run by this interpreter.
SRUN = r'''
"""srun --nodes N --ntasks-per-node T [--opt ...] CMD: N*T copies of CMD here, with Slurm's task variables."""
import os, subprocess, sys
args, nodes, per = sys.argv[1:], 1, 1
while args and args[0].startswith("-"):
    name, eq, value = args.pop(0).partition("=")
    if name in ("--nodes", "--ntasks-per-node") and not eq:
        value = args.pop(0)
    nodes, per = (int(value), per) if name == "--nodes" else (nodes, int(value)) if name == "--ntasks-per-node" \
        else (nodes, per)
procs = [subprocess.Popen(args, env=dict(os.environ, SLURM_PROCID=str(r), SLURM_LOCALID=str(r % per),
                                         SLURM_NODEID=str(r // per), SLURM_NTASKS=str(nodes * per),
                                         SLURM_STEP_NUM_TASKS=str(nodes * per),
                                         SLURM_NNODES=str(nodes), SLURM_NTASKS_PER_NODE=str(per),
                                         SLURM_STEP_NODELIST="localhost"))
         for r in range(nodes * per)]
sys.exit(max(p.wait() for p in procs))
'''
SCONTROL = r'''
import sys
assert sys.argv[1:3] == ["show", "hostnames"], sys.argv
print("localhost")
'''
SBATCH = r'''
"""sbatch SCRIPT: runs the job now, its output into #SBATCH --output (%j = the job id)."""
import os, random, re, subprocess, sys
script = open(sys.argv[1]).read()
job = str(random.randint(10000, 99999))
out = re.search(r"^#SBATCH --output=(.*)$", script, re.M).group(1).replace("%j", job)
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "w") as f:
    rc = subprocess.call(["bash", sys.argv[1]], stdout=f, stderr=subprocess.STDOUT,
                         env=dict(os.environ, SLURM_JOB_ID=job, SLURM_JOB_NODELIST="localhost", SLURM_NNODES="1"))
open(os.path.join(os.path.dirname(out), "job_exit_status"), "w").write(str(rc))
print(f"Submitted batch job {job}")
'''
SQUEUE = r'''
import os, sys
print(os.environ.get("FAKE_SQUEUE_STATE", ""))
'''


@pytest.fixture
def slurm_path(tmp_path):
    """A PATH whose sbatch, srun, scontrol and squeue are the stand-ins above."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    for name, code in (("srun", SRUN), ("scontrol", SCONTROL), ("sbatch", SBATCH), ("squeue", SQUEUE)):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{code}")
        path.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"


def corpus(root: Path, sizes=(("train", 1500), ("valid", 40), ("test", 40))):
    """Real English-German pairs from the bundled Tatoeba data, as a user's raw text files."""
    import lzma

    root.mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        with lzma.open(REPO / "data" / "tatoeba-en-de" / f"{split}.en-de.tsv.xz", "rt", encoding="utf-8") as f, \
                open(root / f"{split}.en", "w", encoding="utf-8") as en, \
                open(root / f"{split}.de", "w", encoding="utf-8") as de:
            for _, line in zip(range(n), f):
                e, d = line.rstrip("\n").split("\t")
                en.write(e + "\n")
                de.write(d + "\n")
    return root


TINY = ["--ngpus", "0", "--threads", "1", "--workers", "1", "--layers", "1", "--d-model", "32", "--d-ff", "64",
        "--h", "4", "--bpe-merges", "300", "--max-update", "12", "--tokens-per-update", "600",
        "--max-tokens-per-gpu", "300", "--warmup-updates", "5", "--save-interval-updates", "4", "--average", "2"]


def parallel(argv, env=None, cwd=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "attn_kit.recipes.parallel", *map(str, argv)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", **(env or {})),
                          cwd=cwd, timeout=timeout)


@pytest.mark.slow
def test_sbatch_script_trains_two_cpu_processes_under_srun(tmp_path, slurm_path):
    data, work = corpus(tmp_path / "corpus"), tmp_path / "w"
    argv = ["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
            data / "test", "--workdir", work, *TINY, "--cpu-procs", "2", "--precision", "bf16",
            "--launcher", "slurm", "--partition", "cpu", "--time", "0:30:00", "--account", "nmt",
            "--", "--log-interval", "2", "--validate-interval-updates", "4", "--clip-norm", "0.5"]
    proc = parallel(argv, env={"PATH": slurm_path})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    job_out = next((work / "logs").glob("slurm-*.out"))
    assert (work / "logs" / "job_exit_status").read_text() == "0", job_out.read_text()[-3000:]
    # here: the data stages ran, then the script was written and submitted
    assert "stage 5/9 binarize: finished" in proc.stdout and "stage 6/9 train" not in proc.stdout
    job_id = json.loads((work / "slurm_job.json").read_text())["job_id"]
    assert f"submitted Slurm job {job_id}" in proc.stdout and job_out.name == f"slurm-{job_id}.out"
    script = (work / "train.sbatch").read_text()
    for directive in ("--nodes=1", "--ntasks-per-node=2", "--partition=cpu", "--time=0:30:00", "--account=nmt",
                      "--cpus-per-task=1", f"--output={work}/logs/slurm-%j.out"):
        assert f"#SBATCH {directive}\n" in script, directive
    assert "--gpus-per-node" not in script
    job = shlex.split(script.splitlines()[-1])
    assert job[:4] == ["exec", sys.executable, "-m", "attn_kit.recipes.parallel"]
    assert job[job.index("--launcher") + 1] == "srun" and job.count("--launcher") == 1
    assert job[job.index("--stage") + 1] == "train" and job[job.index("--stop-stage") + 1] == "score"
    assert job[job.index("--") + 1:] == ["--log-interval", "2", "--validate-interval-updates", "4", "--clip-norm", "0.5"]

    # the job: srun started two fairseq-train tasks that found each other through Slurm's variables
    train_log = (work / "logs" / "train.log").read_text()
    assert " srun --nodes 1 --ntasks-per-node 2 --kill-on-bad-exit=1 " in train_log
    port = 20000 + int(job_id) % 20000
    assert f"--distributed-world-size 2 --distributed-port {port} --distributed-backend gloo" in train_log
    assert f"distributed init (rank 0): tcp://localhost:{port}" in train_log
    assert f"distributed init (rank 1): tcp://localhost:{port}" in train_log
    results = json.loads((work / "results.json").read_text())
    assert results["updates"] == 12 and results["averaged_updates"] == [8, 12] and results["mode"] == "files"
    assert results["precision"] == "bf16" and "--bf16-autocast" in results["train_command"]
    assert results["fairseq_extra_args"] == ["--log-interval", "2", "--validate-interval-updates", "4",
                                             "--clip-norm", "0.5"]
    assert results["train_command"].endswith("--clip-norm 0.5") and results["test_sentences"] == 40
    for key in ("sacrebleu", "bleu_tokenized", "bleu_t2t"):
        assert 0 <= results[key] <= 100
    assert "training precision: bf16" in job_out.read_text()
    # curves: train points every 2 updates, valid every 4, with rising training time
    rows = list(csv.DictReader(io.StringIO((work / "curves.csv").read_text())))
    assert [int(r["update"]) for r in rows if r["split"] == "train"] == [2, 4, 6, 8, 10, 12]
    assert [int(r["update"]) for r in rows if r["split"] == "valid"] == [4, 8, 12]
    assert all(float(r["lr"]) > 0 and float(r["tokens_per_s"]) > 0 for r in rows if r["split"] == "train")
    hours = [float(r["hours"]) for r in rows]
    assert hours == sorted(hours) and (work / "curves.png").stat().st_size > 10000

    # while the job is queued or running, the same command submits nothing
    again = parallel(argv, env={"PATH": slurm_path, "FAKE_SQUEUE_STATE": "RUNNING"})
    assert_one_error_line(again, f"Slurm job {job_id} of this workdir is still RUNNING", f"scancel {job_id}")


def test_dry_run_prints_the_sbatch_script_and_what_the_job_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attn_kit.recipes.wmt14", "--dry-run", "--ngpus", "8", "--nnodes",
                           "4", "--launcher", "slurm", "--time", "2-00:00:00", "--workdir", tmp_path / "w", "--",
                           "--tensorboard-logdir", "tb"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for line in ("  | #SBATCH --nodes=4", "  | #SBATCH --ntasks-per-node=8", "  | #SBATCH --gpus-per-node=8",
                 "  | #SBATCH --time=2-00:00:00", f"  $ sbatch {tmp_path / 'w' / 'train.sbatch'}"):
        assert line + "\n" in out, line
    assert "#SBATCH --partition" not in out and "#SBATCH --account" not in out
    # the job's train stage: 32 tasks, 28000 tokens per update (875 x 32), fairseq's Slurm discovery
    assert "$ srun --nodes 4 --ntasks-per-node 8 --kill-on-bad-exit=1 " in out
    assert "--distributed-world-size 32 --distributed-port" in out and "--max-tokens 875 --update-freq 1" in out
    assert "--bf16-autocast" in out and out.count("--tensorboard-logdir tb") == 2  # the script's and the job's
    assert "torchrun" not in out and not (tmp_path / "w").exists()


@pytest.mark.parametrize("argv,message", [
    (["--", "--save-dir", "x"], "--save-dir after --: checkpoints stay in WORKDIR/checkpoints"),
    (["--", "--max-update=5"], "--max-update after --: it is a recipe option; give it before --"),
    (["--", "--fp16"], "--fp16 after --: use --precision"),
    (["--", "--distributed-world-size", "4"], "--distributed-world-size after --: the launcher sets it"),
    (["--", "--log-format", "json"], "--log-format after --: the recipe reads fairseq's simple log format"),
    (["--", "--keep-interval-updates", "1"], "averaging needs the last --average checkpoints"),
    (["--partition", "gpu"], "--partition is an sbatch option: it needs --launcher slurm"),
    (["--nnodes", "2", "--ngpus", "8"], "--nnodes > 1 needs --master-addr"),
    (["--gpu", "Z80"], "unknown --gpu 'Z80'"),
])
def test_options_that_would_break_the_run_are_one_line(argv, message):
    proc = subprocess.run([sys.executable, "-m", "attn_kit.recipes.wmt14", "--dry-run", "--smoke", *argv],
                          capture_output=True, text=True)
    assert_one_error_line(proc, message)


def test_passed_through_options_end_the_training_command_of_every_recipe(tmp_path):
    extra = ["--tensorboard-logdir", str(tmp_path / "tb"), "--patience", "3"]
    for module, argv in (("wmt14", ["--smoke"]), ("wsj", ["--smoke"]),
                         ("parallel", ["--src", "en", "--tgt", "de", "--train", "a", "--valid", "b", "--test", "c"])):
        proc = subprocess.run([sys.executable, "-m", f"attn_kit.recipes.{module}", "--dry-run", *argv, "--workdir",
                               tmp_path / module, "--", *extra], capture_output=True, text=True)
        assert proc.returncode == 0, (module, proc.stderr)
        train = next(line for line in proc.stdout.splitlines()
                     if line.startswith("  $ ") and ("fairseq-train " in line or "fairseq_cli.train" in line))
        assert shlex.split(train)[-4:] == extra, module


def test_submission_without_sbatch_writes_the_script(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    assert slurm.submit("#!/bin/bash\necho hi\n", tmp_path, dry_run=False) is None
    assert (tmp_path / slurm.SCRIPT).read_text() == "#!/bin/bash\necho hi\n"
    assert not (tmp_path / slurm.RECORD).exists()
