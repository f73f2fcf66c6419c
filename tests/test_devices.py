"""Devices checked before any work (issue 25, item 6). On a machine without GPUs, recipes/parallel.sh's
default --ngpus 8 ran the data stages, then torchrun started eight single-process trainings on the CPU, all
writing one checkpoints/ folder, until one died on another's checkpoint_best.pt.tmp. Now:

- a recipe refuses a --ngpus this machine cannot provide in one line before its first stage, where a
  training stage would start here (attn_kit.recipes.scale.check_devices); --dry-run and a Slurm
  submission from a login node still plan the 8 GPUs, and the job checks on its own node;
- the training processes refuse a launch that would not be one job, before training
  (attn_plugin.fairseq_patches.one_job_problem), and the one that saves holds its --save-dir, so that
  a second training on it is refused in one line and the first goes on (save_dir_lock).

No GPU is needed: the machine's GPUs are hidden (CUDA_VISIBLE_DEVICES="") or their count replaced."""
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import USER_DIR, assert_one_error_line, run_main, train_cmd
from test_slurm import corpus, parallel

from attn_kit.fairseq_layer.checkpoints import load_checkpoint
from attn_kit.cli import UsageError
from attn_kit.pipeline import slurm
from attn_kit.recipes import parallel as parallel_recipe
from attn_kit.recipes import scale, translation
from attn_plugin.fairseq_patches import SAVE_DIR_LOCK, one_job_problem

NO_GPUS = {"CUDA_VISIBLE_DEVICES": ""}  # this machine without its GPUs, if it has any


def test_the_default_8_gpus_on_a_machine_without_gpus_is_one_line_before_the_first_stage(tmp_path, monkeypatch):
    data = corpus(tmp_path / "corpus", sizes=(("train", 60), ("valid", 10), ("test", 10)))
    work = tmp_path / "w"
    argv = ["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
            data / "test", "--workdir", work]
    proc = parallel(argv, env=NO_GPUS, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2  # a usage error: the command line asks for what the machine has not
    assert_one_error_line(proc, "--ngpus 8 (the default): no CUDA GPU is visible on this machine "
                                "(CUDA_VISIBLE_DEVICES='')", "pass --ngpus 0 to train on its CPU", "--cpu-procs N")
    assert "stage 1/9" not in proc.stdout and not work.exists()  # no stage ran, nothing was written
    # the stages that do not train run on it whatever --ngpus says (the recipe's main() in this process: its
    # process is the one above, and one more would import torch again, ~2 s CPU)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(scale, "visible_gpus", lambda: 0)  # this process's torch may have seen the GPUs already
    monkeypatch.chdir(tmp_path)
    proc = run_main(parallel_recipe.main, *argv, "--stop-stage", "copy")
    assert proc.returncode == 0 and "stage 2/9 copy: finished" in proc.stdout, proc.stderr


def test_fewer_gpus_than_asked_are_refused_where_training_starts_and_planned_where_it_does_not(
        tmp_path, monkeypatch, capsys):
    work = tmp_path / "w"
    monkeypatch.setattr(scale, "visible_gpus", lambda: 2)
    # here, with torchrun: what this machine has and what to pass, before the first stage
    with pytest.raises(UsageError, match=r"^--ngpus 8 \(the default\): 2 CUDA GPUs visible on this machine.*; "
                                         r"pass --ngpus 2 \(an update keeps its 28000 tokens"):
        translation.main(["--workdir", str(work)])
    # two nodes: each node's recipe checks its own GPUs
    with pytest.raises(UsageError, match=r"^--ngpus 4: 2 CUDA GPUs visible on this node"):
        translation.main(["--workdir", str(work), "--ngpus", "4", "--nnodes", "2", "--master-addr", "10.0.0.1"])
    # inside a Slurm job (--launcher srun): the node the job runs on
    monkeypatch.setattr(scale, "visible_gpus", lambda: 0)
    with pytest.raises(UsageError, match=r"^--ngpus 8 \(the default\): no CUDA GPU is visible"):
        translation.main(["--workdir", str(work), "--launcher", "srun", "--stage", "train"])
    assert not work.exists()
    capsys.readouterr()

    # a --dry-run runs nothing: the 8-GPU plan, with the line as a note
    translation.main(["--workdir", str(work), "--dry-run"])
    out = capsys.readouterr().out
    assert "torchrun --nproc-per-node 8 " in out and "--max-tokens auto --update-freq auto " in out  # sized at its start
    assert "note: a run on this machine would stop before its first stage: --ngpus 8 (the default)" in out
    # --launcher slurm submits from a login node without GPUs: the job gets 8 per node
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)  # no sbatch here: the script is written
    translation.main(["--workdir", str(work), "--launcher", "slurm", "--stage", "train"])
    script = (work / slurm.SCRIPT).read_text()
    assert "#SBATCH --gpus-per-node=8\n" in script and "#SBATCH --ntasks-per-node=8\n" in script


def torchrun_env(world: int, local: int) -> dict:
    """What torchrun gives each process it starts (rank 1 of ``world``, ``local`` on its node)."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": str(world), "RANK": "1",
            "LOCAL_WORLD_SIZE": str(local), "LOCAL_RANK": "1"}


@pytest.mark.parametrize("world_size,init_method,cpu,gpus,environ,fragments", [
    # torchrun --nproc-per-node 8 without a GPU: fairseq's world size is 1 (its default: the GPUs visible)
    (1, None, False, 0, torchrun_env(8, 8), ["torchrun started 8 training processes, but no CUDA GPU is visible "
                                             "here", "each would train alone", "--ngpus 0 --cpu-procs N"]),
    (8, None, True, 8, torchrun_env(8, 8), ["--cpu was given"]),
    # 8 processes on a node with 2 GPUs
    (2, None, False, 2, torchrun_env(8, 8), ["torchrun started 8 training processes on this node, but 2 CUDA GPUs "
                                             "are visible here", "--nproc-per-node 2", "--ngpus 2"]),
    # two nodes of one GPU each, world size left at its default (1)
    (1, None, False, 1, torchrun_env(2, 1), ["--distributed-world-size is 1", "give --distributed-world-size 2"]),
    # four srun tasks that would each train alone
    (1, None, True, 0, {"SLURM_STEP_NUM_TASKS": "4"}, ["srun started 4 training tasks",
                                                       "give --distributed-world-size 4"]),
])
def test_processes_that_would_not_train_as_one_job_are_refused(world_size, init_method, cpu, gpus, environ,
                                                               fragments):
    problem = one_job_problem(world_size, init_method, cpu, gpus, environ)
    for fragment in fragments:
        assert fragment in problem, (fragment, problem)


@pytest.mark.parametrize("world_size,init_method,cpu,gpus,environ", [
    (8, None, False, 8, torchrun_env(8, 8)),  # one process per GPU
    (16, None, False, 8, torchrun_env(16, 8)),  # node 2 of 2, 8 GPUs each
    (2, None, False, 1, torchrun_env(2, 1)),  # one GPU on each of two nodes, world size given (the recipes)
    (2, "tcp://127.0.0.1:29500", True, 0, {}),  # attn_kit's CPU launcher: rendezvous, world size and rank given
    (2, None, True, 0, {"SLURM_STEP_NUM_TASKS": "2"}),  # srun tasks, world size given (the recipes)
    (1, None, True, 0, {"SLURM_NTASKS": "8", "SLURM_PROCID": "0"}),  # a Slurm batch script's one process
    (1, None, True, 0, {}),  # one process
])
def test_processes_that_form_one_job_train(world_size, init_method, cpu, gpus, environ):
    assert one_job_problem(world_size, init_method, cpu, gpus, environ) is None


TINY_TRAINING = ["--user-dir", USER_DIR, "--arch", "attn_paper_base", "--lr", "0.001"]


def fairseq_train(cmd, env=None) -> subprocess.Popen:
    return subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", **(env or {})))


def finished(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_torchrun_process_without_gpus_refuses_to_train_alone(data_bin, tmp_path):
    """What each of the issue's eight processes gets: torchrun's variables on a machine without GPUs."""
    save = tmp_path / "checkpoints"
    result = finished(fairseq_train(train_cmd(data_bin, save, TINY_TRAINING, ["--max-update", "3"]),
                                    env={**NO_GPUS, **torchrun_env(8, 8)}))
    assert_one_error_line(result, "torchrun started 8 training processes, but no CUDA GPU is visible here")
    assert result.returncode == 1 and not save.exists()


# Seven fairseq-train processes for the price of one import of fairseq (seconds on 2 cores each): this
# interpreter (python -c SEVEN_TRAININGS FOLDER FAIRSEQ_TRAIN_ARGS...) imports fairseq-train's module, then
# forks; each child, its stderr in FOLDER/N.err, runs fairseq-train's own cli_main on the arguments and
# ends as an uncaught exception would end it (sys.excepthook, exit 1).
SEVEN_TRAININGS = r"""
import os, sys
import fairseq_cli.train
folder, argv, pids = sys.argv[1], sys.argv[2:], []
for n in range(7):
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.path.join(folder, f"{n}.err"), os.O_WRONLY | os.O_CREAT, 0o644), 2)
        sys.argv = ["fairseq-train", *argv]
        try:
            fairseq_cli.train.cli_main()
            status = 0
        except BaseException:
            sys.excepthook(*sys.exc_info())
            status = 1
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(status)
    pids.append(pid)
print("exit statuses:", [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids])
"""


@pytest.mark.slow
def test_eight_trainings_on_one_checkpoint_directory_one_trains_the_others_are_refused(data_bin, tmp_path):
    save = tmp_path / "checkpoints"
    cmd = train_cmd(data_bin, save, TINY_TRAINING, ["--max-update", "12", "--no-epoch-checkpoints"])
    first = fairseq_train(cmd)
    lock, start = save / SAVE_DIR_LOCK, time.time()
    while not (lock.exists() and lock.read_text()) and first.poll() is None and time.time() - start < 300:
        time.sleep(0.1)
    assert lock.exists() and lock.read_text().startswith(f"pid {first.pid} "), finished(first)
    os.kill(first.pid, signal.SIGSTOP)  # hold the first training where it is while the seven others start
    try:
        seven = finished(fairseq_train([sys.executable, "-c", SEVEN_TRAININGS, tmp_path, *cmd[1:]]))
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert seven.returncode == 0 and "exit statuses: [1, 1, 1, 1, 1, 1, 1]" in seven.stdout, seven.stderr
    for n in range(7):
        err = (tmp_path / f"{n}.err").read_text()
        assert_one_error_line(subprocess.CompletedProcess([], 1, "", err),
                              f"--save-dir {save} is in use by another training (pid {first.pid} ",
                              "give another --save-dir")
    done = finished(first)  # the first went on undisturbed
    assert done.returncode == 0, done.stderr[-2000:]
    assert "num_updates 12 " in done.stdout and "done training" in done.stdout
    assert load_checkpoint(save / "checkpoint_last.pt")["optimizer_history"][-1]["num_updates"] == 12
    assert lock.read_text() == ""  # released: a finished training leaves the file empty
