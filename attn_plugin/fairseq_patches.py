"""Everything loading the plugin changes outside it: in torch, fairseq and Python.

``fairseq-train --user-dir attn_plugin`` (and any ``import attn_plugin``) calls
:func:`install` once, from ``attn_plugin/__init__.py``; calling it again
changes nothing. Nothing else in the plugin patches anything. The patches:

1. **torch's safe-load allow-list** (``torch.serialization.add_safe_globals``)
   gains exactly the types fairseq checkpoints hold:
   ``attn_plugin.checkpoint.FAIRSEQ_CHECKPOINT_GLOBALS``
   (``argparse.Namespace``, numpy dtypes and scalars).
   Why: torch >= 2.6 loads with ``weights_only=True`` and refuses the
   ``argparse.Namespace`` that stock fairseq (<= 0.12.2) checkpoints pickle,
   so plain fairseq-generate cannot read them. The safe loader stays on.
   Test: tests/test_checkpoint.py::test_stock_checkpoint_needs_the_allow_list_and_loads_with_it.

2. **fairseq's checkpoint loader** (``fairseq.checkpoint_utils.load_checkpoint_to_cpu``)
   is wrapped: any failure becomes a one-line :class:`~attn_plugin.errors.CheckpointError`
   (``attn_plugin.checkpoint.describe_load_error``) naming the file and why.
   Why: fairseq lets torch's errors through as long tracebacks; a pickle
   refused for naming, say, ``os.system`` reads like a crash instead of
   "refused, nothing ran", and a truncated or foreign file as a zip error.
   Tests: tests/test_checkpoint.py::test_checkpoint_that_would_run_code_is_refused,
   ::test_damaged_checkpoint_is_one_clear_error.

3. **fairseq's distributed broadcast** (``fairseq.distributed.utils._broadcast_object_slow``)
   runs inside ``torch.serialization.safe_globals(broadcast_state_globals())``.
   Why: on a data-parallel resume rank 0 loads the checkpoint and sends the
   state to the other ranks with ``torch.save``/``torch.load``; fairseq has
   turned the options into an omegaconf ``DictConfig`` by then, which the
   receiving ``torch.load`` (``weights_only=True`` by default) refuses, so
   ranks > 0 fail to resume. Exactly those omegaconf types are allowed, only
   while the broadcast runs.
   Test: tests/test_checkpoint.py::test_resume_broadcast_reaches_the_other_rank.

4. **fairseq's model loader** (``fairseq.checkpoint_utils.load_model_ensemble_and_task``,
   behind fairseq-generate, fairseq-interactive and ``from_pretrained``) is
   wrapped: a ``--path`` that does not exist and weights that do not fit the
   model (a checkpoint trained with another dictionary) become one-line
   :class:`~attn_plugin.errors.CheckpointError` errors
   (``attn_plugin.checkpoint.describe_model_error``); other errors pass unchanged.
   Why: fairseq raises ``OSError: Model file not found`` and a size-mismatch
   ``RuntimeError`` listing every embedding, each after a long traceback.
   Tests: tests/test_faults.py::test_generate_with_a_missing_checkpoint,
   ::test_generate_with_a_checkpoint_for_another_dictionary.

5. **fairseq's Slurm discovery on CPU** (``fairseq.distributed.utils.infer_init_method``)
   runs with ``torch.cuda.set_device`` as a no-op while CUDA is unavailable.
   Why: under ``srun`` fairseq reads the process group from Slurm's variables and
   then calls ``torch.cuda.set_device(SLURM_LOCALID)`` unguarded, which fails on a
   CPU-only machine for every task but the first, so CPU tasks (``--cpu``) could not
   train together under srun. With CUDA available nothing changes.
   Test: tests/test_slurm.py::test_sbatch_script_trains_two_cpu_processes_under_srun.

7. **An interval update that ends an epoch is kept** (``fairseq.checkpoint_utils.save_checkpoint``
   and ``load_checkpoint`` are wrapped). fairseq writes ``checkpoint_E_U.pt`` for every
   multiple U of ``--save-interval-updates`` except one that ends an epoch (its condition
   requires ``not end_of_epoch``), and with ``--no-epoch-checkpoints`` nothing else keeps that
   state, so "the last N interval checkpoints" (Sec. 6.1's average) silently reached further
   back. After fairseq's own save at such an update, the ``checkpoint_last.pt`` it has just
   written (the same state) is copied to ``checkpoint_E_U.pt`` and the interval checkpoints
   are pruned to ``--keep-interval-updates`` as fairseq does mid-epoch; a run resumed from
   such a ``checkpoint_last.pt`` (killed between the two writes) makes the copy first.
   Tests: tests/test_interval_checkpoints.py.

8. **fairseq-train's launch** (``fairseq.distributed.utils.call_main``, for
   ``fairseq_cli.train.main`` only) checks, before anything trains:

   - that the processes a launcher started together form one job
     (:func:`one_job_problem`): under torchrun fairseq joins the processes into
     one world only on CUDA GPUs, one per process, and only when its own world
     size (default: the GPUs visible) is not 1; otherwise every process trains
     alone. Refused in one line: torchrun without a visible GPU (or with ``--cpu``),
     more processes on a node than GPUs visible there, a world size of 1 under
     torchrun or srun;
   - that no other training writes its ``--save-dir``: the process of rank 0 (the
     one that saves checkpoints) holds ``SAVE_DIR/.train.lock`` while it trains
     (:func:`save_dir_lock`, a POSIX record lock, ``fcntl.lockf``: the kernel drops
     it when the process ends, however it ends, and the data-loader processes it
     forks do not inherit it); a second training on the directory is refused in
     one line naming the first, which goes on undisturbed.

   Why: ``torchrun --nproc-per-node 8`` on a machine without GPUs started eight
   independent single-process trainings, all writing one checkpoint directory,
   until one died on another's ``checkpoint_best.pt.tmp``.
   Tests: tests/test_devices.py.

9. **Diverse beam search finds its sentences' rows** (``fairseq.search.DiverseBeamSearch.step``
   is wrapped). fairseq's generator passes the sentences' dataset ids (``sample["id"]``) as
   ``original_batch_idxs``, and the search indexes its per-sentence overlap counts (one row
   per sentence of the batch) with them: any batch whose ids exceed its size ended in an
   ``IndexError`` (``--diverse-beam-groups`` failed for every model). The wrapper passes the
   sentences' positions in the batch the search started with instead.
   Test: tests/test_decoding_options.py::test_every_fairseq_decoding_option_runs_on_the_plugins_model.

10. **fairseq-train's non-finite gradient check waits for no GPU** (``fairseq.trainer``), while
    ``attn_adam`` is the trainer's optimizer itself (not under ``--fp16``/``--bf16``/``--amp``, whose
    wrappers check overflows their own way) and ``--check-finite-every-update`` is not given:

    - ``Trainer._build_optimizer`` is wrapped: it switches attn_adam's deferred check on
      (``AttnAdam.defer_finite_check``: the flag stays on the device, where the step skips a
      non-finite update and all after it; the host reads its copy once it has arrived and then raises
      fairseq's ``FloatingPointError("gradients are Nan/Inf ...")`` naming the update, inside a later
      ``train_step``, so fairseq writes crash.pt and re-runs that update's batch under its NanDetector);
    - the module global ``torch`` of ``fairseq.trainer`` becomes a module that forwards every name to
      torch but ``isfinite``, which answers "finite" from the host for exactly the norm attn_adam's
      ``clip_grad_norm`` has just returned (a mark on that tensor: attn_adam checks it) and is torch's
      for every other tensor (fairseq's two reads of it: before the step, before logging gnorm);
    - before fairseq-train writes a checkpoint (patch 7's wrapper of ``save_checkpoint``) and at the end
      of every epoch (``Trainer.lr_step``, wrapped), every pending flag is waited for and checked, so no
      checkpoint holds parameters after a non-finite gradient without the error.

    What else shows: the updates up to the error are logged, the non-finite one with its nan loss
    and gnorm, where fairseq's own check raises before logging it.
    Why: reading ``torch.isfinite(grad_norm)`` on the host at every update makes the host wait for the
    GPU, so it cannot queue the next kernels meanwhile (the host gaps in the base model's update that the
    GPU check's profiles show, docs/scaling.md). With more than one GPU fairseq's consistency check of the norms across
    workers still reads them at every update (and raises on a non-finite norm itself).
    Tests: tests/test_sync_free_step.py,
    tests/test_optim.py::test_a_false_flag_leaves_parameters_and_moments_as_they_were.

11. **No per-update smoothed values that nobody reads** (``fairseq.trainer.Trainer._reduce_and_log_stats``
    wrapped, under patch 10's conditions): while it runs, ``MetersDict.get_smoothed_values`` returns a
    mapping that knows its keys and computes (rounds) each value when it is first read; fairseq's code
    sets ``sample_size`` in it and deletes ``ppl``, ``wps``, ``wpb``, ``bsz``, which reads none.
    Why: that dict is ``train_step``'s return value, which fairseq-train only tests against None (it
    logs from the meters at ``--log-interval``), and rounding loss, nll_loss and ppl reads each on the
    host: three waits for the GPU per update. The logged lines do not change.
    Tests: tests/test_sync_free_step.py::test_an_update_reads_nothing_back_with_attn_adam,
    ::test_the_same_training_with_the_check_at_every_update, ::test_smoothed_values_are_computed_when_read.

12. **A second copy of the plugin in one process**: ``--user-dir`` naming another folder called
    ``attn_plugin`` than the one loaded (``fairseq.utils.import_user_module`` wrapped), or a copy under
    another name (:func:`refuse_second_copy`, called by the package before it registers anything), is one
    :class:`~attn_plugin.errors.ConfigError` naming both. Why: fairseq raised an ImportError or a
    "Cannot register duplicate model" ValueError, each a traceback.
    Test: tests/test_registration.py::test_a_second_copy_of_the_plugin_is_one_line.

6. **``sys.excepthook``** becomes :func:`attn_plugin.errors.excepthook`: an
   uncaught :class:`~attn_plugin.errors.AttnPluginError` (a refused
   checkpoint, options that do not fit) prints as one ``error: ...`` line, exit
   status 1; other exceptions keep Python's traceback.
   Why: fairseq's command lines have no handler of their own, so the one-line
   errors of patches 2 and 4 and the model's ``ConfigError`` would end in a traceback.
   Tests: tests/test_checkpoint.py (the "error: " lines above),
   tests/test_registration.py::test_plugin_and_library_print_the_same_error_line.
"""
import contextlib
import errno
import fcntl
import functools
import logging
import os
import re
import shlex
import socket
import sys
import time
import types
from collections.abc import MutableMapping
from typing import Mapping, Optional

import numpy
import torch

from .checkpoint import (allow_fairseq_checkpoint_types, broadcast_state_globals, describe_load_error,
                         describe_model_error, not_a_checkpoint)
from .errors import AttnPluginError, CheckpointError, ConfigError, excepthook

_MARK = "_attn_plugin"  # set on each wrapper, so a second install() leaves it alone


def install():
    """Apply the patches listed in the module docstring (idempotent)."""
    allow_fairseq_checkpoint_types()
    _patch_checkpoint_loader()
    _patch_broadcast()
    _patch_model_loader()
    _patch_slurm_discovery()
    _patch_interval_checkpoints()
    _patch_training_launch()
    _patch_diverse_beam_search()
    _patch_deferred_finite_check()
    _patch_lazy_smoothed_values()
    _patch_user_dir_copies()
    sys.excepthook = excepthook


def _patched(original) -> bool:
    return original is None or getattr(original, _MARK, False)


def _patch_checkpoint_loader():
    """Patch 2: fairseq's loader reports bad files as one-line CheckpointErrors."""
    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_checkpoint_to_cpu
    if _patched(original):
        return

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        if os.path.isfile(path):  # refuse on the first bytes, before torch reads a raw pickle (with a warning)
            why = not_a_checkpoint(path)
            if why:
                raise CheckpointError(f"{path} {why}")
        try:
            return original(path, *args, **kwargs)
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 -- every failure becomes one clear line
            raise CheckpointError(describe_load_error(path, exc)) from None

    setattr(load_checkpoint_to_cpu, _MARK, True)
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu


def _patch_broadcast():
    """Patch 3: ranks > 0 may unpickle the checkpoint state rank 0 sends them."""
    from fairseq.distributed import utils as distributed_utils

    original = getattr(distributed_utils, "_broadcast_object_slow", None)
    if _patched(original):
        return

    @functools.wraps(original)
    def broadcast_object_slow(*args, **kwargs):
        with torch.serialization.safe_globals(broadcast_state_globals()):
            return original(*args, **kwargs)

    setattr(broadcast_object_slow, _MARK, True)
    distributed_utils._broadcast_object_slow = broadcast_object_slow


def _patch_model_loader():
    """Patch 4: a missing --path or a checkpoint that does not fit the model is one line."""
    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_model_ensemble_and_task
    if _patched(original):
        return

    @functools.wraps(original)
    def load_model_ensemble_and_task(filenames, *args, **kwargs):
        try:
            return original(filenames, *args, **kwargs)
        except (OSError, RuntimeError) as exc:
            if isinstance(exc, CheckpointError):
                raise
            message = describe_model_error(filenames, exc)
            if message is None:
                raise
            raise CheckpointError(message) from None

    setattr(load_model_ensemble_and_task, _MARK, True)
    checkpoint_utils.load_model_ensemble_and_task = load_model_ensemble_and_task


def _patch_slurm_discovery():
    """Patch 5: fairseq's Slurm discovery selects no CUDA device where there is none."""
    from fairseq.distributed import utils as distributed_utils

    original = getattr(distributed_utils, "infer_init_method", None)
    if _patched(original):
        return

    @functools.wraps(original)
    def infer_init_method(*args, **kwargs):
        if torch.cuda.is_available():
            return original(*args, **kwargs)
        set_device = torch.cuda.set_device
        torch.cuda.set_device = lambda device: None
        try:
            return original(*args, **kwargs)
        finally:
            torch.cuda.set_device = set_device

    setattr(infer_init_method, _MARK, True)
    distributed_utils.infer_init_method = infer_init_method


def _keep_interval_checkpoint(cfg, trainer, epoch: int):
    """Patch 7: at an epoch's end, save the interval checkpoint fairseq skips (``cfg``: its
    CheckpointConfig), as a copy of the ``checkpoint_last.pt`` that holds the same state."""
    updates = trainer.get_num_updates()
    if (cfg.no_save or cfg.save_interval_updates <= 0 or updates <= 0 or updates % cfg.save_interval_updates
            or not trainer.should_save_checkpoint_on_current_rank):
        return
    suffix = trainer.checkpoint_suffix
    target = os.path.join(cfg.save_dir, f"checkpoint_{epoch}_{updates}{suffix}.pt")
    last = os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
    if os.path.exists(target):
        return
    log = logging.getLogger("attn_plugin")
    if cfg.no_last_checkpoints or cfg.write_checkpoints_asynchronously or not os.path.exists(last):
        log.warning(f"update {updates} ends epoch {epoch} and is a multiple of --save-interval-updates, but "
                    f"fairseq keeps no interval checkpoint there and no checkpoint_last.pt to copy it from "
                    f"(--no-last-checkpoints or asynchronous writes): the last interval checkpoints skip it")
        return
    import shutil

    partial = target + ".partial"
    shutil.copyfile(last, partial)
    os.replace(partial, target)  # a kill leaves no half-written checkpoint_E_U.pt
    log.info(f"Saved checkpoint {target} (epoch {epoch} @ {updates} updates: an interval update that ends the "
             "epoch, which fairseq does not keep; attn_plugin patch 7)")
    if cfg.keep_interval_updates > 0:
        pattern = re.compile(rf"checkpoint_\d+_(\d+){re.escape(suffix)}\.pt")
        kept = sorted(((int(m.group(1)), name) for name in os.listdir(cfg.save_dir)
                       for m in [pattern.fullmatch(name)] if m), reverse=True)
        if cfg.keep_interval_updates_pattern != -1:  # as fairseq: multiples of the pattern are never removed
            kept = [(u, name) for u, name in kept if u % cfg.keep_interval_updates_pattern != 0]
        for _, name in kept[cfg.keep_interval_updates:]:
            os.remove(os.path.join(cfg.save_dir, name))


def _patch_interval_checkpoints():
    """Patch 7: an interval update that ends an epoch gets its checkpoint_E_U.pt."""
    from fairseq import checkpoint_utils

    save, load = checkpoint_utils.save_checkpoint, checkpoint_utils.load_checkpoint
    if not _patched(save):
        # fairseq keeps its best score as an attribute of the module's save_checkpoint and reads
        # it back through the module, so the wrapper (the module's function now) carries it.
        @functools.wraps(save)
        def save_checkpoint(cfg, trainer, epoch_itr, val_loss):
            check_deferred_gradients(trainer)  # patch 10: no checkpoint after a non-finite gradient
            saved = save(cfg, trainer, epoch_itr, val_loss)
            if epoch_itr.end_of_epoch():
                _keep_interval_checkpoint(cfg, trainer, epoch_itr.epoch)
            return saved

        setattr(save_checkpoint, _MARK, True)
        checkpoint_utils.save_checkpoint = save_checkpoint
    if not _patched(load):
        @functools.wraps(load)
        def load_checkpoint(cfg, trainer, **kwargs):
            extra_state, epoch_itr = load(cfg, trainer, **kwargs)
            # Resumed from checkpoint_last.pt saved at an epoch's end (fairseq records that as the next
            # epoch, 0 batches in): a kill may have come between fairseq's write and the copy.
            itr = (extra_state or {}).get("train_iterator") or {}
            if cfg.restore_file == "checkpoint_last.pt" and itr.get("iterations_in_epoch") == 0 and itr.get("epoch", 1) > 1:
                _keep_interval_checkpoint(cfg, trainer, itr["epoch"] - 1)
            return extra_state, epoch_itr

        setattr(load_checkpoint, _MARK, True)
        checkpoint_utils.load_checkpoint = load_checkpoint


# ------------------------------------------------------------------------------------- patch 8
TORCHRUN_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")  # fairseq's test for torchrun
SAVE_DIR_LOCK = ".train.lock"


class SaveDirInUse(AttnPluginError):
    """Another training holds the ``--save-dir`` (patch 8)."""


def one_job_problem(world_size: int, init_method: Optional[str], cpu: bool, gpus: int,
                    environ: Mapping[str, str]) -> Optional[str]:
    """Why the processes started together with this one would not train as one job, or None.

    ``world_size``, ``init_method``, ``cpu``: fairseq-train's ``--distributed-world-size``,
    ``--distributed-init-method``, ``--cpu`` as given (before fairseq infers anything);
    ``gpus``: the CUDA GPUs visible here; ``environ``: the launcher's variables (torchrun's
    WORLD_SIZE, LOCAL_WORLD_SIZE; srun's SLURM_STEP_NUM_TASKS)."""
    if init_method is not None:  # the launcher gave every process the rendezvous, world size and rank
        return None
    if all(name in environ for name in TORCHRUN_VARIABLES):
        world = int(environ["WORLD_SIZE"])
        local = int(environ.get("LOCAL_WORLD_SIZE", world))
        if world <= 1:
            return None
        if cpu or not gpus:
            why = "no CUDA GPU is visible here" if not gpus else "--cpu was given"
            return (f"torchrun started {world} training processes, but {why}: "
                    "fairseq joins torchrun's processes into one job only on GPUs, so each would train alone, all "
                    "on one --save-dir; on CPU start them with python -m attn_kit.fairseq_layer.fairseq_cpu_ddp --nprocs N -- "
                    "fairseq-train ... (the recipes: --ngpus 0 --cpu-procs N)")
        if local > gpus:
            return (f"torchrun started {local} training processes on this node, but {gpus} CUDA GPU"
                    f"{'s are' if gpus > 1 else ' is'} visible here: start one per GPU (torchrun --nproc-per-node "
                    f"{gpus}; the recipes: --ngpus {gpus})")
        if world_size == 1:
            return (f"torchrun started {world} training processes, but --distributed-world-size is 1 (its "
                    "default: the GPUs visible on this node), so each would train alone: give "
                    f"--distributed-world-size {world}")
        return None
    tasks = int(environ.get("SLURM_STEP_NUM_TASKS") or 1)
    if tasks > 1 and world_size == 1:
        return (f"srun started {tasks} training tasks, but --distributed-world-size is 1 (its default: the GPUs "
                f"visible to a task), so each would train alone: give --distributed-world-size {tasks}")
    return None


def _owner() -> str:
    """``pid N on HOST, started TIME: COMMAND``: who holds a lock, as its file records it."""
    command = shlex.join([os.path.basename(sys.executable), *sys.argv])
    command = command if len(command) <= 160 else command[:157] + "..."
    return f"pid {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}: {command}"


@contextlib.contextmanager
def save_dir_lock(save_dir: str):
    """Hold ``SAVE_DIR/.train.lock`` while the block runs (the directory is created if needed).

    Raises :class:`SaveDirInUse` (one line naming the holder) when another training holds it,
    :class:`ConfigError` when the directory cannot be created or written. A POSIX record lock
    (``fcntl.lockf``) belongs to this process alone: the kernel drops it when the process ends,
    and the processes it forks (data loaders) do not inherit it. On a file system without
    record locks the training goes on unlocked. The file is emptied when the block ends, so
    a finished run leaves an empty file."""
    path = os.path.join(save_dir, SAVE_DIR_LOCK)
    try:
        os.makedirs(save_dir, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"--save-dir {save_dir}: cannot create it or write in it ({exc.strerror or exc})") from None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise  # no record locks here (ENOLCK, ...): handled below
            holder = " ".join(os.read(fd, 4096).decode("utf-8", "replace").split()) or "its process is not recorded"
            raise SaveDirInUse(f"--save-dir {save_dir} is in use by another training ({holder}); two trainings "
                               "on one checkpoint directory overwrite each other's checkpoints: wait for it to end or "
                               "stop it, or give another --save-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_owner() + "\n").encode(), 0)
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            os.close(fd)
            raise
    except BaseException:
        os.close(fd)
        raise
    try:
        yield
    finally:
        os.ftruncate(fd, 0)
        os.close(fd)  # closing drops the lock


def _is_fairseq_train(main) -> bool:
    """Whether ``main`` is fairseq-train's (also when run as ``python -m fairseq_cli.train``, under torchrun)."""
    code = getattr(main, "__code__", None)
    return bool(code) and main.__name__ == "main" and \
        os.path.normpath(code.co_filename).endswith(os.path.join("fairseq_cli", "train.py"))


def _patch_training_launch():
    """Patch 8: fairseq-train's processes form one job, and one training at a time writes a --save-dir."""
    from fairseq.distributed import utils as distributed_utils

    original = distributed_utils.call_main
    if _patched(original):
        return

    @functools.wraps(original)
    def call_main(cfg, main, **kwargs):
        if not _is_fairseq_train(main):
            return original(cfg, main, **kwargs)
        dist = cfg.distributed_training
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        problem = one_job_problem(dist.distributed_world_size, dist.distributed_init_method, cfg.common.cpu, gpus,
                                  os.environ)
        if problem:
            raise ConfigError(problem)
        if dist.distributed_init_method is None:
            distributed_utils.infer_init_method(dist)  # what call_main does first: it then finds it done
        if dist.distributed_rank != 0 or cfg.checkpoint.no_save:  # rank 0 alone saves checkpoints
            return original(cfg, main, **kwargs)
        with save_dir_lock(cfg.checkpoint.save_dir):
            return original(cfg, main, **kwargs)

    setattr(call_main, _MARK, True)
    distributed_utils.call_main = call_main


# ------------------------------------------------------------------------------------- patch 9
def _patch_diverse_beam_search():
    """Patch 9: DiverseBeamSearch indexes its per-sentence state by batch position, not dataset id."""
    from fairseq import search

    original = search.DiverseBeamSearch.step
    if _patched(original):
        return

    @functools.wraps(original)
    def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
        if original_batch_idxs is not None:
            if step == 0:
                self._attn_plugin_ids = original_batch_idxs.clone()  # the batch's sentences, in order
            # each remaining sentence's position in that batch (ids are unique within a batch)
            original_batch_idxs = (original_batch_idxs.unsqueeze(1) == self._attn_plugin_ids.unsqueeze(0)).int().argmax(1)
        return original(self, step, lprobs, scores, prev_output_tokens, original_batch_idxs)

    setattr(step, _MARK, True)
    search.DiverseBeamSearch.step = step


# ------------------------------------------------------------------------------------ patch 10
def _deferring_optimizer(trainer):
    """The trainer's attn_adam when it checks gradients without waiting for the device, else None."""
    from .optim.attn_adam import AttnAdam

    optimizer = getattr(trainer, "_optimizer", None)
    return optimizer if isinstance(optimizer, AttnAdam) and optimizer.defers_finite_check else None


def check_deferred_gradients(trainer):
    """Patch 10: wait for the flags of the updates so far and raise if one was not finite."""
    optimizer = _deferring_optimizer(trainer)
    if optimizer is not None:
        optimizer.check_deferred(wait=True)


class _TrainerTorch(types.ModuleType):
    """fairseq.trainer's ``torch``: torch, but ``isfinite`` of a norm attn_adam checks itself."""

    FINITE = numpy.True_  # truthy, with .all(): what fairseq reads of isfinite's 0-dim tensor

    def __init__(self):
        super().__init__("torch", torch.__doc__)

    def __getattr__(self, name):
        return getattr(torch, name)

    def isfinite(self, input):
        if getattr(input, "_attn_adam_checks_finite", False):
            return self.FINITE
        return torch.isfinite(input)


def _patch_deferred_finite_check():
    """Patch 10: attn_adam checks the gradients for NaN/Inf in fairseq-train without a host wait."""
    from fairseq import trainer as trainer_module
    from fairseq.trainer import Trainer

    from .optim.attn_adam import AttnAdam, MultiTensorAdam

    if not isinstance(trainer_module.torch, _TrainerTorch):
        trainer_module.torch = _TrainerTorch()
    build, lr_step = Trainer._build_optimizer, Trainer.lr_step
    if not _patched(build):
        @functools.wraps(build)
        def _build_optimizer(self):
            build(self)
            optimizer = self._optimizer
            if (isinstance(optimizer, AttnAdam) and isinstance(optimizer.optimizer, MultiTensorAdam)
                    and not optimizer.cfg.check_finite_every_update):
                optimizer.defer_finite_check(lambda: self.get_num_updates() + 1)

        setattr(_build_optimizer, _MARK, True)
        Trainer._build_optimizer = _build_optimizer
    if not _patched(lr_step):
        @functools.wraps(lr_step)
        def lr_step_after_checking(self, epoch, val_loss=None):  # fairseq-train: at the end of every epoch
            check_deferred_gradients(self)
            return lr_step(self, epoch, val_loss)

        setattr(lr_step_after_checking, _MARK, True)
        Trainer.lr_step = lr_step_after_checking


# ------------------------------------------------------------------------------------ patch 11
class LazySmoothedValues(MutableMapping):
    """``MetersDict.get_smoothed_values()``, each value computed when first read (patch 11)."""

    def __init__(self, meters):
        self._meters = meters
        self._keys = dict.fromkeys(key for key in meters.keys() if not key.startswith("_"))
        self._values = {}

    def __getitem__(self, key):
        if key not in self._values:
            if key not in self._keys:
                raise KeyError(key)
            self._values[key] = self._meters.get_smoothed_value(key)
        return self._values[key]

    def __setitem__(self, key, value):
        self._keys[key] = None
        self._values[key] = value

    def __delitem__(self, key):
        del self._keys[key]
        self._values.pop(key, None)

    def __contains__(self, key):  # without reading the value (Mapping's would)
        return key in self._keys

    def __iter__(self):
        return iter(list(self._keys))

    def __len__(self):
        return len(self._keys)

    def __repr__(self):
        return f"{type(self).__name__}({dict(self)!r})"


def _lazy_smoothed_values(meters):  # a function: a class attribute that binds as a method
    return LazySmoothedValues(meters)


def _patch_lazy_smoothed_values():
    """Patch 11: the per-update smoothed values fairseq-train never reads are not computed."""
    from fairseq.logging.meters import MetersDict
    from fairseq.trainer import Trainer

    original = Trainer._reduce_and_log_stats
    if _patched(original):
        return

    @functools.wraps(original)
    def _reduce_and_log_stats(self, *args, **kwargs):
        if _deferring_optimizer(self) is None:
            return original(self, *args, **kwargs)
        eager = MetersDict.get_smoothed_values
        MetersDict.get_smoothed_values = _lazy_smoothed_values
        try:
            return original(self, *args, **kwargs)
        finally:
            MetersDict.get_smoothed_values = eager

    setattr(_reduce_and_log_stats, _MARK, True)
    Trainer._reduce_and_log_stats = _reduce_and_log_stats


# ------------------------------------------------------------------------------------ patch 12
def refuse_second_copy(package: str):
    """Patch 12, a copy under another name: called by ``package``'s ``__init__`` before it registers
    anything; one ConfigError (the loaded copy's class, which its sys.excepthook prints as one line)
    where another copy registered the model already (fairseq's ValueError traceback otherwise)."""
    from fairseq.models import MODEL_REGISTRY

    first = MODEL_REGISTRY.get("attn_transformer")
    if first is None or first.__module__.startswith(package + "."):
        return
    loaded = first.__module__.split(".")[0]
    error = getattr(sys.modules.get(f"{loaded}.errors"), "ConfigError", ConfigError)
    there = os.path.dirname(sys.modules[loaded].__file__)
    raise error(f"a second copy of the plugin ({os.path.dirname(os.path.abspath(__file__))}) in a process that has "
                f"one already ({there}): fairseq registers each model once; use one copy (its folder as --user-dir), "
                "or load the other in a fresh process")


def _patch_user_dir_copies():
    """Patch 12: --user-dir naming a second folder called attn_plugin is one line."""
    from fairseq import utils

    original = utils.import_user_module
    if _patched(original):
        return

    @functools.wraps(original)
    def import_user_module(args):
        try:
            return original(args)
        except ImportError as exc:
            if "is not globally unique" not in str(exc) or "(attn_plugin)" not in str(exc):
                raise
            here = os.path.dirname(os.path.abspath(__file__))
            raise ConfigError(f"--user-dir {getattr(args, 'user_dir', None)} is a second copy of the plugin in a "
                              f"process that has one already ({here}): give that folder, or load the other in a "
                              "fresh process") from None

    setattr(import_user_module, _MARK, True)
    utils.import_user_module = import_user_module
