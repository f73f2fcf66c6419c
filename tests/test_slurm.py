"""Slurm (--launcher slurm, attn_kit.pipeline.slurm), the fairseq-train options passed after "--"
and the recipes' training extras, end to end: with stand-in sbatch, srun, scontrol and squeue on
PATH (small scripts that do on this machine what Slurm does on a cluster), recipes/parallel.sh
writes and submits WORKDIR/prepare.sbatch (a CPU job that prepares the data) and WORKDIR/train.sbatch
(submitted to start once the first ended well), and the training job trains two CPU processes
together under srun (fairseq's own Slurm discovery, gloo), in bf16, with a flag passed through,
writing its curves, then averages, translates and scores. A job's script, run by bash with the
stand-ins: USR1 (Slurm's signal before the time limit) stops the recipe and requeues the job with
scontrol; SIGTERM only stops it."""
import csv
import importlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, assert_one_error_line, run_main

from attn_kit.pipeline import slurm
from attn_kit.recipes import parallel as parallel_recipe

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
"""scontrol show hostnames: this machine; scontrol requeue JOB: a line of scontrol.log beside this file."""
import os, sys
if sys.argv[1:2] == ["requeue"]:
    with open(os.path.join(os.path.dirname(__file__), "scontrol.log"), "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\n")
    sys.exit(0)
assert sys.argv[1:3] == ["show", "hostnames"], sys.argv
print("localhost")
'''
SBATCH = r'''
"""sbatch [--dependency=afterok:JOB[:JOB...] --kill-on-invalid-dep=yes] SCRIPT: runs the job now, unless
FAKE_SBATCH_RUN=0, and only if each JOB ended well; its output is appended to #SBATCH --output
(%j = the job id), whose folder must exist (Slurm's job fails otherwise). Each submission is a line
of jobs.jsonl beside this file."""
import json, os, random, re, subprocess, sys
*options, path = sys.argv[1:]
script = open(path).read()
log = os.path.join(os.path.dirname(__file__), "jobs.jsonl")
ended = {j["job"]: j["rc"] for j in map(json.loads, open(log))} if os.path.exists(log) else {}
job = str(random.randint(10000, 99999))
after = [a for o in options if o.startswith("--dependency=afterok:") for a in o.split(":")[1:]]
cpus = re.search(r"^#SBATCH --cpus-per-task=(\d+)$", script, re.M)
rc = None
out = re.search(r"^#SBATCH --output=(.*)$", script, re.M).group(1).replace("%j", job)
if not os.path.isdir(os.path.dirname(out)):  # as Slurm: the job fails, its output nowhere
    rc = 1
elif os.environ.get("FAKE_SBATCH_RUN") != "0" and all(ended[a] == 0 for a in after):
    with open(out, "a") as f:
        rc = subprocess.call(["bash", path], stdout=f, stderr=subprocess.STDOUT,
                             env=dict(os.environ, SLURM_JOB_ID=job, SLURM_JOB_NODELIST="localhost", SLURM_NNODES="1",
                                      **({"SLURM_CPUS_PER_TASK": cpus.group(1)} if cpus else {})))
with open(log, "a") as f:
    f.write(json.dumps({"job": job, "script": path, "options": options, "rc": rc}) + "\n")
print(f"Submitted batch job {job}")
'''
SQUEUE = r'''
import os, sys
print(os.environ.get("FAKE_SQUEUE_STATE", ""))
'''


@pytest.fixture
def slurm_path(tmp_path):
    """A PATH whose sbatch, srun, scontrol and squeue are the stand-ins above (what they were
    asked: :func:`submitted`, tmp_path / "slurm-bin" / "scontrol.log")."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    for name, code in (("srun", SRUN), ("scontrol", SCONTROL), ("sbatch", SBATCH), ("squeue", SQUEUE)):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{code}")
        path.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"


def submitted(tmp_path) -> list:
    """The jobs the stand-in sbatch was given, in order: job id, script, options, exit status (None: not run)."""
    log = tmp_path / "slurm-bin" / "jobs.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def job_command(script: str) -> list:
    """The recipe command line a job's script runs."""
    line = next(line for line in script.splitlines() if " -m attn_kit.recipes." in line)
    return shlex.split(line.removeprefix("exec ").removesuffix(" &"))


def directives(script: str) -> list:
    return [line.split(" ", 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]


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
            "--log-interval", "2", "--validate-interval-updates", "4", "--clip-norm", "0.5", "--", "--weight-decay", "0"]
    proc = parallel(argv, env={"PATH": slurm_path})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # two jobs: the data job, then the training job, submitted to start once the data job ended well
    prep, train = submitted(tmp_path)
    prep_out, job_out = ((work / "logs" / f"slurm-{j['job']}.out").read_text() for j in (prep, train))
    assert (prep["script"], train["script"]) == (str(work / "prepare.sbatch"), str(work / "train.sbatch"))
    assert prep["options"] == [] and prep["rc"] == 0, prep_out[-3000:]
    assert train["options"] == [f"--dependency=afterok:{prep['job']}", "--kill-on-invalid-dep=yes"]
    assert train["rc"] == 0, job_out[-3000:]
    record = json.loads((work / "slurm_job.json").read_text())["jobs"]
    assert [(j["job_id"], j.get("after")) for j in record] == [(prep["job"], None), (train["job"], prep["job"])]
    assert f"submitted Slurm job {train['job']}" in proc.stdout
    # nothing ran here: the data job ran the stages before training, the training job the rest
    assert "stage 1/9" not in proc.stdout
    assert "stage 5/9 binarize: finished" in prep_out and "stage 6/9" not in prep_out
    assert "stage 6/9 train" in job_out and "stage 5/9" not in job_out
    script, prep_script = (work / "train.sbatch").read_text(), (work / "prepare.sbatch").read_text()
    for directive in ("--nodes=1", "--ntasks-per-node=2", "--partition=cpu", "--time=0:30:00", "--account=nmt",
                      "--cpus-per-task=2", "--mem=0", "--requeue", "--signal=B:USR1@300",
                      f"--output={work}/logs/slurm-%j.out"):
        assert directive in directives(script), directive
    for directive in ("--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=32G", "--partition=cpu",
                      "--time=0:30:00", "--account=nmt", "--requeue", f"--output={work}/logs/slurm-%j.out"):
        assert directive in directives(prep_script), directive
    assert "--gpus-per-node" not in script + prep_script
    for text, first, last in ((prep_script, "check", "binarize"), (script, "train", "score")):
        job = job_command(text)
        assert job[:3] == [sys.executable, "-m", "attn_kit.recipes.parallel"]
        assert job[job.index("--launcher") + 1] == "srun" and job.count("--launcher") == 1
        assert job[job.index("--stage") + 1] == first and job[job.index("--stop-stage") + 1] == last
        assert job[job.index("--") + 1:] == ["--weight-decay", "0"] and "--clip-norm" in job
        assert job[job.index("--log-interval") + 1] == "2" and job[job.index("--validate-interval-updates") + 1] == "4"

    # the job: srun started two fairseq-train tasks that found each other through Slurm's variables
    train_log = (work / "logs" / "train.log").read_text()
    assert " srun --nodes 1 --ntasks-per-node 2 --kill-on-bad-exit=1 " in train_log
    port = 20000 + int(train["job"]) % 20000
    assert f"--distributed-world-size 2 --distributed-port {port} --distributed-backend gloo" in train_log
    assert f"distributed init (rank 0): tcp://localhost:{port}" in train_log
    assert f"distributed init (rank 1): tcp://localhost:{port}" in train_log
    results = json.loads((work / "results.json").read_text())
    assert results["updates"] == 12 and results["averaged_updates"] == [8, 12] and results["mode"] == "files"
    assert results["precision"] == "bf16" and "--bf16-autocast" in results["train_command"]
    assert results["fairseq_extra_args"] == ["--weight-decay", "0"]
    assert "--log-interval 2 " in results["train_command"] and "--validate-interval-updates 4 " in \
        results["train_command"]
    assert results["train_command"].endswith("--weight-decay 0") and results["test_sentences"] == 40
    assert " --clip-norm 0.5 " in results["train_command"]  # the recipe's option, typed again by the job
    for key in ("sacrebleu", "bleu_tokenized", "bleu_t2t"):
        assert 0 <= results[key] <= 100
    assert "training precision: bf16" in job_out
    # curves: train points every 2 updates, valid every 4, with rising training time
    rows = list(csv.DictReader(io.StringIO((work / "curves.csv").read_text())))
    assert [int(r["update"]) for r in rows if r["split"] == "train"] == [2, 4, 6, 8, 10, 12]
    assert [int(r["update"]) for r in rows if r["split"] == "valid"] == [4, 8, 12]
    assert all(float(r["lr"]) > 0 and float(r["tokens_per_s"]) > 0 for r in rows if r["split"] == "train")
    hours = [float(r["hours"]) for r in rows]
    assert hours == sorted(hours) and (work / "curves.png").stat().st_size > 10000

    # the data is prepared: the same command submits the training job alone (its main() in this process: a
    # process of its own would import torch again, ~2 s CPU; the refusal below is the recipe's process)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", slurm_path)
        mp.setenv("FAKE_SBATCH_RUN", "0")
        mp.setenv("OMP_NUM_THREADS", "1")
        again = run_main(parallel_recipe.main, *argv)
    assert again.returncode == 0, again.stderr
    assert "stages check..binarize are done already: no data job" in again.stdout
    third = submitted(tmp_path)[2:]
    assert [(j["script"], j["options"]) for j in third] == [(str(work / "train.sbatch"), [])]
    # while a job is queued or running, the same command submits nothing
    again = parallel(argv, env={"PATH": slurm_path, "FAKE_SQUEUE_STATE": "RUNNING"})
    assert_one_error_line(again, f"Slurm job {third[0]['job']} of this workdir is still RUNNING",
                          f"scancel {third[0]['job']}")
    assert len(submitted(tmp_path)) == 3


def test_data_job_first_then_the_training_job_after_it(tmp_path, slurm_path, monkeypatch):
    data, work = corpus(tmp_path / "corpus", sizes=(("train", 20), ("valid", 5), ("test", 5))), tmp_path / "w"
    argv = ["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
            data / "test", "--workdir", work, "--ngpus", "2", "--workers", "3", "--launcher", "slurm",
            "--partition", "gpu", "--prep-partition", "cpu", "--prep-time", "4:00:00", "--time", "1-00:00:00"]
    # the recipe's main() in this process (its own would import torch again, ~2 s CPU), with the stand-ins on
    # PATH; the recipe's process submits in the tests above and below
    monkeypatch.setenv("PATH", slurm_path)
    monkeypatch.setenv("FAKE_SBATCH_RUN", "0")
    proc = run_main(parallel_recipe.main, *argv)
    assert proc.returncode == 0, proc.stderr
    prep, train = submitted(tmp_path)
    assert prep["script"] == str(work / slurm.PREP_SCRIPT) and prep["options"] == []
    assert train["script"] == str(work / slurm.SCRIPT)
    assert train["options"] == [f"--dependency=afterok:{prep['job']}", "--kill-on-invalid-dep=yes"]
    assert [j["job_id"] for j in json.loads((work / slurm.RECORD).read_text())["jobs"]] == [prep["job"], train["job"]]
    assert not (work / ".stages").exists()  # nothing ran here
    # the data job: one CPU task with --workers CPUs, on its own partition and time
    prep_script = (work / slurm.PREP_SCRIPT).read_text()
    assert [d for d in directives(prep_script) if d.split("=")[0] in ("--ntasks-per-node", "--cpus-per-task",
                                                                       "--partition", "--time", "--mem")] == \
        ["--ntasks-per-node=1", "--cpus-per-task=3", "--mem=32G", "--partition=cpu", "--time=4:00:00"]
    assert "--gpus-per-node" not in prep_script
    job = job_command(prep_script)
    assert job[job.index("--stage") + 1:job.index("--stage") + 4] == ["check", "--stop-stage", "binarize"]
    assert job[job.index("--workers") + 1] == "3"
    assert "--gpus-per-node=2" in directives((work / slurm.SCRIPT).read_text())


@pytest.mark.slow  # runs the recipe's data stages for real
def test_prepare_here_runs_the_data_stages_here_and_submits_training_alone(tmp_path, slurm_path):
    data, work = corpus(tmp_path / "corpus", sizes=(("train", 60), ("valid", 5), ("test", 5))), tmp_path / "w"
    argv = ["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
            data / "test", "--workdir", work, *TINY, "--launcher", "slurm", "--prepare-here"]
    proc = parallel(argv, env={"PATH": slurm_path, "FAKE_SBATCH_RUN": "0"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "stage 5/9 binarize: finished" in proc.stdout and "stage 6/9" not in proc.stdout
    assert (work / ".stages" / "binarize.done").exists() and not (work / slurm.PREP_SCRIPT).exists()
    [train] = submitted(tmp_path)
    assert train["script"] == str(work / slurm.SCRIPT) and train["options"] == []


def run_job_script(tmp_path, slurm_path, send, save: bool, signal_seconds=300):
    """Run a job's script with bash as Slurm would (SLURM_JOB_ID 4242, 3 CPUs per task), its recipe a
    stand-in that saves a checkpoint if ``save`` and waits to be stopped; ``send`` it a signal once the
    stand-in is running. Returns (exit status, output, what the stand-in saw, scontrol's calls)."""
    work = tmp_path / "w"
    recipe = tmp_path / "recipe.py"
    recipe.write_text(RECIPE)
    text = slurm.sbatch_script([sys.executable, recipe, work, "save" if save else "wait"], work,
                               alloc=slurm.Allocation(cpus_per_task=3), signal_seconds=signal_seconds, cwd=tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    proc = subprocess.Popen(["bash", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PATH=slurm_path, SLURM_JOB_ID="4242", SLURM_CPUS_PER_TASK="3"))
    deadline = time.time() + 60
    while not (work / "ready").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(send)
    out, _ = proc.communicate(timeout=60)
    log = tmp_path / "slurm-bin" / "scontrol.log"
    seen = {f.name: f.read_text() for f in work.iterdir() if f.is_file()}
    return proc.returncode, out, seen, log.read_text() if log.exists() else ""


# A recipe as a job's script runs it: ready (with the CPUs srun would give its tasks), a checkpoint saved
# if asked, then training until SIGTERM, which it records and exits on with 143 as a recipe does.
RECIPE = r'''
import os, pathlib, signal, sys, time
work = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    (work / "stopped").write_text(signal.Signals(signum).name)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
if sys.argv[2] == "save":
    (work / "checkpoints").mkdir(parents=True, exist_ok=True)
    (work / "checkpoints" / "checkpoint_last.pt").write_text("state")
(work / "ready").write_text(os.environ.get("SRUN_CPUS_PER_TASK", ""))
time.sleep(60)
'''


def test_usr1_before_the_time_limit_stops_the_recipe_and_requeues_the_job(tmp_path, slurm_path):
    rc, out, seen, requeued = run_job_script(tmp_path, slurm_path, signal.SIGUSR1, save=True)
    assert seen["stopped"] == "SIGTERM" and rc == 143, out  # the recipe was stopped; its exit status is the job's
    assert requeued == "requeue 4242\n", out
    assert seen["ready"] == "3"  # srun gives each task the job's --cpus-per-task
    assert "requeueing job 4242" in out
    assert not list((tmp_path / "w" / "logs").glob(".slurm-*"))  # the job's start mark is removed


def test_usr1_does_not_requeue_a_job_that_saved_nothing(tmp_path, slurm_path):
    rc, out, seen, requeued = run_job_script(tmp_path, slurm_path, signal.SIGUSR1, save=False)
    assert seen["stopped"] == "SIGTERM" and rc == 143 and requeued == ""
    assert "not requeued: the job saved no checkpoint and finished no stage; give a longer --time" in out


def test_sigterm_stops_the_recipe_without_requeueing(tmp_path, slurm_path):
    rc, out, seen, requeued = run_job_script(tmp_path, slurm_path, signal.SIGTERM, save=True)
    assert seen["stopped"] == "SIGTERM" and rc == 143 and requeued == ""


def test_without_signal_seconds_the_job_runs_the_recipe_itself(tmp_path, slurm_path):
    # --signal-seconds 0: the recipe is the job's process (exec): no requeue, Slurm's signals reach it directly
    rc, out, seen, requeued = run_job_script(tmp_path, slurm_path, signal.SIGTERM, save=True, signal_seconds=0)
    assert seen["stopped"] == "SIGTERM" and rc == 143 and requeued == ""
    script = (tmp_path / "job.sbatch").read_text()
    assert "--no-requeue" in directives(script) and "--signal" not in script


def translation_here(*argv):
    """The WMT14 recipe's main() in this process (conftest.run_main), for what its dry run prints and its error
    lines: its process and that process's one error line are tests/test_recipe_wmt14.py's
    (test_bad_options_are_one_line) and the runs above."""
    from attn_kit.recipes import translation

    return run_main(translation.main, *argv)


def dry_run_scripts(argv, tmp_path) -> dict:
    """--dry-run of the WMT14 recipe with --launcher slurm: {script name: its #SBATCH directives}."""
    proc = translation_here("--dry-run", "--launcher", "slurm", "--workdir", tmp_path / "w", *argv)
    assert proc.returncode == 0, proc.stderr
    scripts, name = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("  # ") and line.endswith(".sbatch:"):
            name = Path(line[4:-1]).name
            scripts[name] = []
        elif line.startswith("  | #SBATCH "):
            scripts[name].append(line[len("  | #SBATCH "):])
    return scripts


@pytest.mark.parametrize("argv,train,prep", [
    # defaults: all of each GPU node's memory, 4 CPUs per GPU task; the data job: --workers CPUs, 32G
    ([], ["--gpus-per-node=8", "--cpus-per-task=4", "--mem=0", "--requeue", "--signal=B:USR1@300"],
     ["--cpus-per-task=8", "--mem=32G", "--requeue", "--signal=B:USR1@300"]),
    (["--threads", "6"], ["--cpus-per-task=7"], ["--cpus-per-task=8"]),
    (["--mem", "200G", "--cpus-per-task", "12", "--prep-mem", "8G", "--workers", "4", "--signal-seconds", "900",
      "--partition", "gpu", "--prep-partition", "cpu"],
     ["--cpus-per-task=12", "--mem=200G", "--partition=gpu", "--signal=B:USR1@900"],
     ["--cpus-per-task=4", "--mem=8G", "--partition=cpu", "--signal=B:USR1@900"]),
    (["--signal-seconds", "0"], ["--no-requeue"], ["--no-requeue"]),
])
def test_memory_cpus_and_signal_of_both_jobs(tmp_path, argv, train, prep):
    scripts = dry_run_scripts(["--ngpus", "8", "--workers", "8", *argv], tmp_path)
    assert list(scripts) == [slurm.PREP_SCRIPT, slurm.SCRIPT]
    for directive in train:
        assert directive in scripts[slurm.SCRIPT], directive
    for directive in prep:
        assert directive in scripts[slurm.PREP_SCRIPT], directive
    assert not any(d.startswith("--gpus-per-node") for d in scripts[slurm.PREP_SCRIPT])
    if train == ["--no-requeue"]:  # --signal-seconds 0
        assert not any(d.startswith("--signal") for d in scripts[slurm.SCRIPT] + scripts[slurm.PREP_SCRIPT])


def test_dry_run_prints_both_scripts_and_what_the_jobs_run(tmp_path):
    proc = translation_here("--dry-run", "--ngpus", "8", "--nnodes", "4", "--launcher", "slurm", "--gpu", "H100",
                            "--time", "2-00:00:00", "--workdir", tmp_path / "w", "--", "--tensorboard-logdir", "tb")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for line in ("  | #SBATCH --nodes=4", "  | #SBATCH --ntasks-per-node=8", "  | #SBATCH --gpus-per-node=8",
                 "  | #SBATCH --time=2-00:00:00", f"  $ sbatch {tmp_path / 'w' / 'prepare.sbatch'}",
                 "  $ sbatch --dependency=afterok:<job id of prepare.sbatch> --kill-on-invalid-dep=yes "
                 f"{tmp_path / 'w' / 'train.sbatch'}"):
        assert line + "\n" in out, line
    assert out.index("prepare.sbatch:") < out.index("train.sbatch:")
    assert "#SBATCH --partition" not in out and "#SBATCH --account" not in out
    # the data job's stages, then the training job's: 32 tasks, 28000 tokens per update (875 x 32)
    assert out.index("stage 5/9 binarize") < out.index("the job of train.sbatch runs") < out.index("stage 6/9 train")
    assert "$ fairseq-preprocess " in out
    assert "$ srun --nodes 4 --ntasks-per-node 8 --kill-on-bad-exit=1 " in out
    assert "--distributed-world-size 32 --distributed-port" in out and "--max-tokens 875 --update-freq 1" in out
    assert "--bf16-autocast" in out and out.count("--tensorboard-logdir tb") == 3  # the two scripts', the job's
    assert "torchrun" not in out and not (tmp_path / "w").exists()


def test_table3_prepares_the_en_de_data_as_its_data_job(tmp_path):
    # Table 3's rows train on the EN-DE recipe's data, in that recipe's work directory
    from attn_kit.recipes import table3

    proc = run_main(table3.main, "--smoke", "--rows", "base", "--dry-run", "--launcher", "slurm", "--workdir",
                    tmp_path / "t3", "--data-workdir", tmp_path / "data")  # as translation_here
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    prep = job_command(out[out.index("prepare.sbatch:"):out.index("train.sbatch:")].replace("  | ", ""))
    assert prep[prep.index("-m") + 1] == "attn_kit.recipes.translation" and "--dry-run" not in prep
    assert prep[prep.index("--workdir") + 1] == str(tmp_path / "data") and "--stop-stage" in prep
    assert f"  $ sbatch --dependency=afterok:<job id of prepare.sbatch> --kill-on-invalid-dep=yes " \
           f"{tmp_path / 't3' / 'train.sbatch'}\n" in out
    assert not (tmp_path / "t3").exists() and not (tmp_path / "data").exists()


@pytest.mark.parametrize("argv,message", [
    (["--", "--save-dir", "x"], "--save-dir after --: checkpoints stay in WORKDIR/checkpoints"),
    (["--", "--max-update=5"], "--max-update after --: it is a recipe option; give it before --"),
    (["--", "--fp16"], "--fp16 after --: use --precision"),
    (["--", "--distributed-world-size", "4"], "--distributed-world-size after --: the launcher sets it"),
    (["--", "--log-format", "simple"], "--log-format after --: the recipe reads fairseq's json log format"),
    (["--", "--keep-interval-updates", "1"], "averaging needs the last --average checkpoints"),
    (["--partition", "gpu"], "--partition is an sbatch option: it needs --launcher slurm"),
    (["--mem", "0"], "--mem is an sbatch option: it needs --launcher slurm"),
    (["--prepare-here"], "--prepare-here is an sbatch option: it needs --launcher slurm"),
    (["--launcher", "slurm", "--mem", "64GB"], "--mem 64GB: give a size as sbatch takes it: 64G, 64000M, or 0"),
    (["--launcher", "slurm", "--signal-seconds", "-1"], "--signal-seconds must be in 0..65535"),
    (["--launcher", "slurm", "--cpus-per-task", "0"], "--cpus-per-task must be >= 1"),
    (["--nnodes", "2", "--ngpus", "8"], "--nnodes > 1 needs --master-addr"),
    (["--gpu", "Z80"], "unknown --gpu 'Z80'"),
])
def test_options_that_would_break_the_run_are_one_line(argv, message):
    assert_one_error_line(translation_here("--dry-run", "--smoke", *argv), message)


def test_passed_through_options_end_the_training_command_of_every_recipe(tmp_path):
    extra = ["--tensorboard-logdir", str(tmp_path / "tb"), "--patience", "3"]
    for module, argv in (("translation", ["--smoke"]), ("wsj", ["--smoke"]),
                         ("parallel", ["--src", "en", "--tgt", "de", "--train", "a", "--valid", "b", "--test", "c"])):
        # each recipe's main() in this process (the parallel recipe's process would import torch again, ~2 s
        # CPU); their processes are run by the one-line error tests (here, test_devices.py, test_canary.py)
        proc = run_main(importlib.import_module(f"attn_kit.recipes.{module}").main,
                        "--dry-run", *argv, "--workdir", tmp_path / module, "--", *extra)
        assert proc.returncode == 0, (module, proc.stderr)
        train = next(line for line in proc.stdout.splitlines()
                     if line.startswith("  $ ") and ("fairseq-train " in line or "fairseq_cli.train" in line))
        assert shlex.split(train)[-4:] == extra, module


def test_submission_without_sbatch_writes_the_scripts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    scripts = [(slurm.PREP_SCRIPT, "#!/bin/bash\necho prepare\n"), (slurm.SCRIPT, "#!/bin/bash\necho train\n")]
    assert slurm.submit(scripts, tmp_path, dry_run=False) == [None, None]
    assert [(tmp_path / name).read_text() for name, _ in scripts] == [text for _, text in scripts]
    assert not (tmp_path / slurm.RECORD).exists()
    assert (f"sbatch {tmp_path / slurm.PREP_SCRIPT}; then sbatch --dependency=afterok:<job id of prepare.sbatch> "
            f"--kill-on-invalid-dep=yes {tmp_path / slurm.SCRIPT}") in capsys.readouterr().out


def test_a_queued_job_of_either_record_blocks_a_new_submission(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "job_state", lambda job: {"11": None, "12": "PENDING", "7": "RUNNING"}[job])
    (tmp_path / slurm.RECORD).write_text(json.dumps({"jobs": [{"job_id": "11"}, {"job_id": "12", "after": "11"}]}))
    with pytest.raises(slurm.UserError, match=r"^Slurm job 12 of this workdir is still PENDING .*scancel 12"):
        slurm.check_no_job(tmp_path)
    (tmp_path / slurm.RECORD).write_text(json.dumps({"job_id": "7"}))  # written before the data job had its own
    with pytest.raises(slurm.UserError, match=r"^Slurm job 7 of this workdir is still RUNNING"):
        slurm.check_no_job(tmp_path)


HOSTILE = "x\nrm -rf ~"  # a value that would be a shell line of its own


@pytest.mark.parametrize("argv", [
    ["--partition", HOSTILE], ["--prep-partition", HOSTILE], ["--account", HOSTILE], ["--time", HOSTILE],
    ["--workdir-suffix", HOSTILE], ["--", "--tensorboard-logdir", HOSTILE]])
def test_a_value_that_would_add_a_line_to_a_script_is_refused_in_one_line(tmp_path, argv):
    """Issue 36: a newline in --partition (or in the work directory's path) became a shell line of
    prepare.sbatch / train.sbatch, and sbatch stopped reading #SBATCH directives there, losing
    --requeue, --signal and --output. Now every value the scripts hold is checked before either is
    written: one line, nothing written."""
    from attn_kit.recipes import translation

    work = tmp_path / "w"
    if argv[0] == "--workdir-suffix":
        work, argv = tmp_path / f"w{HOSTILE}", []
    proc = run_main(translation.main, "--ngpus", "8", "--launcher", "slurm", "--workdir", work, *argv)
    assert_one_error_line(proc, "a Slurm script cannot hold a control character")
    assert not any(p.suffix == ".sbatch" for p in tmp_path.rglob("*"))


def test_every_script_holds_hostile_but_legal_values_only_quoted(tmp_path):
    """Spaces, quotes, $(...), backticks and ; in every value the scripts hold: each line of both
    scripts is the template's, bash parses them, and a value appears only shell-quoted (or
    double-quoted in an #SBATCH directive)."""
    odd = "a b;$(touch pwned)`x`'q'"
    work = tmp_path / f"work {odd}"
    text = slurm.sbatch_script(["python", "-m", "attn_kit.recipes.translation", "--workdir", work, "--", odd], work,
                               alloc=slurm.Allocation(partition="gpu part", account="acct 1",
                                                      time_limit="1-00:00:00", mem="64G"),
                               signal_seconds=300, env={"ATTN_X": odd}, cwd=work)
    lines = text.splitlines()
    plain = slurm.Allocation(partition="gpu", account="a", time_limit="1", mem="64G")
    assert len(lines) == len(slurm.sbatch_script(["python"], tmp_path / "plain", alloc=plain, signal_seconds=300,
                                                 env={"ATTN_X": "y"}, cwd=tmp_path).splitlines())
    assert '#SBATCH --partition="gpu part"' in lines and '#SBATCH --account="acct 1"' in lines
    for line in lines:
        if odd in line:
            assert shlex.quote(odd) in line or shlex.quote(str(work)) in line or line.startswith("#SBATCH"), line
    script = tmp_path / "s.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", script]).returncode == 0
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("argv,cpus", [([], 16), (["--prep-cpus", "32"], 32), (["--workers", "6"], 6)])
def test_the_data_job_is_sized_for_the_cluster_not_the_login_node(tmp_path, argv, cpus, monkeypatch):
    """The data job took its CPUs and --workers from the machine the command was typed on (a login
    node's 2) and projected 40 minutes of preparation from them: --prep-cpus, else --workers where
    given, else 16; the job's dry run projects the data stages for that many."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as the recipe's process had it
    proc = translation_here("--dry-run", "--launcher", "slurm", "--ngpus", "8", "--workdir", tmp_path / "w",
                            "--data-workdir", tmp_path / "d", *argv)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"  | #SBATCH --cpus-per-task={cpus}" in out
    job = next(line for line in out.splitlines() if "--stop-stage binarize" in line and "--launcher srun" in line)
    assert f"--workers {cpus}" in job
    assert f"projected for WMT14 en-de (~4.5M pairs) on --workers {cpus}," in out


def test_each_jobs_output_folder_is_made_before_sbatch(tmp_path, slurm_path, monkeypatch):
    """sbatch does not create the folder of #SBATCH --output; a job whose output it cannot open
    fails before its first line, writing nothing anywhere (the stand-in does as Slurm does). A
    first submission into a new work directory (WORKDIR/logs not there yet) must still run."""
    monkeypatch.setenv("PATH", slurm_path)
    work = tmp_path / "w"
    script = slurm.sbatch_script(["echo", "job ran"], work / "groups" / "A", cwd=tmp_path)
    slurm.submit([("groups/A/train.sbatch", script)], work, dry_run=False)
    (job,) = submitted(tmp_path)
    assert job["rc"] == 0
    assert (work / "groups" / "A" / "logs" / f"slurm-{job['job']}.out").read_text() == "job ran\n"


def test_a_job_waits_for_every_job_it_names(tmp_path, slurm_path, monkeypatch):
    monkeypatch.setenv("PATH", slurm_path)
    monkeypatch.setenv("FAKE_SBATCH_RUN", "0")
    scripts = [(name, slurm.sbatch_script(["true"], tmp_path / "w", cwd=tmp_path), after)
               for name, after in (("a.sbatch", ()), ("b.sbatch", (0,)), ("c.sbatch", (0,)), ("d.sbatch", (1, 2)))]
    ids = slurm.submit(scripts, tmp_path / "w", dry_run=False)
    assert [j["options"][:1] for j in submitted(tmp_path)] == [
        [], [f"--dependency=afterok:{ids[0]}"], [f"--dependency=afterok:{ids[0]}"],
        [f"--dependency=afterok:{ids[1]}:{ids[2]}"]]
    with pytest.raises(ValueError):  # a job cannot wait for one submitted after it
        slurm.submit([("a.sbatch", "", (1,)), ("b.sbatch", "")], tmp_path / "x", dry_run=True)


def test_table3_job_per_group_trains_each_group_in_its_own_job_then_merges(tmp_path, slurm_path, monkeypatch):
    """Issue 37: Table 3 at paper scale was one job training 21 rows one after the other.
    --job-per-group: the data job, then one training job per group (each a Table 3 run of its
    group's rows in WORKDIR/groups/GROUP on the shared data, all waiting for the data job only),
    then a job that tables them (--merge) once every group's job ended well."""
    from attn_kit.recipes import table3

    monkeypatch.setenv("PATH", slurm_path)
    monkeypatch.setenv("FAKE_SBATCH_RUN", "0")
    work, data = tmp_path / "t3", tmp_path / "data"
    proc = run_main(table3.main, "--smoke", "--rows", "base,A3,C", "--launcher", "slurm", "--job-per-group",
                    "--workdir", work, "--data-workdir", data)
    assert proc.returncode == 0, proc.stderr
    prep, *groups, merge = submitted(tmp_path)
    assert prep["script"] == str(work / slurm.PREP_SCRIPT)
    assert [g["script"] for g in groups] == [str(work / "groups" / g / slurm.SCRIPT) for g in ("base", "A", "C")]
    assert all(g["options"][0] == f"--dependency=afterok:{prep['job']}" for g in groups)
    assert merge["options"][0] == "--dependency=afterok:" + ":".join(g["job"] for g in groups)
    for group, rows in (("base", ["base"]), ("A", ["A3"]), ("C", [f"C{i}" for i in range(1, 8)])):
        job = job_command((work / "groups" / group / slurm.SCRIPT).read_text())
        run = table3.build(job[job.index("-m") + 2:])
        assert [r.name for r in run.rows] == rows
        assert (run.workdir, run.data_workdir, run.mode, run.launcher) == (work / "groups" / group, data, "smoke",
                                                                            "srun")
    job = job_command((work / table3.MERGE_SCRIPT).read_text())
    merged = table3.build(job[job.index("-m") + 2:])
    assert merged.workdir == work and merged.mode == "smoke"
    assert merged.merge == tuple(work / "groups" / g for g in ("base", "A", "C"))


@pytest.mark.parametrize("argv", [["--job-per-group"], ["--launcher", "slurm", "--job-per-group", "--canary"]])
def test_job_per_group_is_for_slurm_training_only(tmp_path, argv):
    from attn_kit.recipes import table3

    proc = run_main(table3.main, "--smoke", "--dry-run", "--workdir", tmp_path / "t3", *argv)
    assert_one_error_line(proc, "--job-per-group submits Slurm jobs: it needs --launcher slurm")
