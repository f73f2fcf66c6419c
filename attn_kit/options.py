"""Every option of the kit's command lines that a recipe setting or more than one command has, declared once.

An :class:`Option` is a setting's flag, type, range, help and the stage whose output it shapes; its
YAML key (recipes/configs/*.yaml) is its name, the argparse ``dest``. :func:`add` generates a
command's argument from it, adding what differs between commands (the default and where it comes
from) as a note after the help. A command without YAML settings (scripts/*.py) gets the range in
the type (:class:`attn_kit.cli.Number`, argparse's one error line); a recipe parses the bare type
and checks its settings, the YAML's and the command line's alike, with :func:`check_ranges`, once.
tests/test_options.py fails where a flag is declared twice.
"""
import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Tuple

from .cli import Number, UsageError
from .fairseq_layer.fairseq_commands import LAUNCHERS, PRECISIONS
from .planning.cost import NETWORK_GB_PER_S
from .fairseq_layer.plugin import standalone

AUTO = "auto"  # --max-tokens-per-gpu and --save-interval-updates: sized for the GPU (attn_kit.recipes.scale)


# --launcher slurm's defaults (their help says why). The data job's CPUs: a common share of a cluster's
# CPU node, not those of the machine the command is typed on (a login node's 2 made a 2-CPU job).
TRAIN_MEM, PREP_MEM, PREP_CPUS, GPU_TASK_CPUS, SIGNAL_SECONDS = "0", "32G", 16, 4, 300
CANARY_MINUTES = 10.0


def count_or_auto(text: str):
    """A whole number, or auto."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a number or auto, not {text!r}") from None


@dataclass(frozen=True)
class Option:
    """One setting: ``flag``; ``kind`` (int, float, str, Path, bool for a switch, count_or_auto, or
    "bool?" for --x/--no-x); its range (``minimum`` <= v, ``above`` < v, v <= ``maximum``, v < ``below``;
    ``why``: said after a value out of it); ``makes``: the stage kind whose output it shapes (data, bpe,
    train, average, decode; a change makes that stage start again), "" for none: how an update's tokens
    are split into forwards (--max-tokens-per-gpu, --ngpus) is not, so that a run resumes on other GPUs."""
    flag: str
    help: str
    kind: object = str
    minimum: Optional[float] = None
    above: Optional[float] = None
    maximum: Optional[float] = None
    below: Optional[float] = None
    why: str = ""
    choices: Optional[Tuple] = None
    metavar: Optional[str] = None
    dest: Optional[str] = None
    makes: str = ""

    @property
    def name(self) -> str:
        return self.dest or self.flag[2:].replace("-", "_")

    def in_range(self, value) -> bool:
        return ((self.minimum is None or value >= self.minimum) and (self.above is None or value > self.above)
                and (self.maximum is None or value <= self.maximum) and (self.below is None or value < self.below))

    def range_text(self) -> str:
        """">= 1", "> 0", "in 0..65535", "in [0, 1)", "in (0, 1]"."""
        low, high = self.minimum if self.minimum is not None else self.above, \
            self.maximum if self.maximum is not None else self.below
        if low is None or high is None:
            return f">= {low}" if self.minimum is not None else f"> {low}" if low is not None else \
                f"<= {high}" if self.maximum is not None else f"< {high}"
        if self.kind is int:
            return f"in {low}..{high}"
        opening, closing = "[" if self.minimum is not None else "(", "]" if self.maximum is not None else ")"
        return f"in {opening}{low:g}, {high:g}{closing}"

    def type_here(self):
        """The argparse type of a command that checks the range as it parses."""
        if self.kind in (int, float) and (self.minimum, self.above, self.maximum, self.below) != (None,) * 4:
            return Number(self.kind, minimum=self.minimum, maximum=self.maximum, above=self.above, below=self.below)
        if self.kind is count_or_auto:
            return Number(int, minimum=self.minimum)
        return self.kind


_SLURM = "--launcher slurm: "
_DROP = dict(kind=float, minimum=0, below=1, why=" (a dropout rate)", makes="train")
CATALOGUE = (
    # where a run goes and what it runs on
    Option("--workdir", "where everything goes; use a fresh one when you change options", Path),
    Option("--data-workdir", "where the data stages (download..binarize) prepare the data, for several runs to "
                             "share; the training stages stay in --workdir. A folder prepared with other data "
                             "options is refused", Path),
    Option("--bundled", "train and evaluate on the bundled Tatoeba EN-DE data, on a CPU", bool),
    Option("--smoke", "every stage on a CPU in minutes on tiny data and a tiny model: checks the plumbing, not "
                      "the model", bool),
    Option("--ngpus", "GPUs per node (0: the CPU)", int, minimum=0),
    Option("--nnodes", "nodes, each with --ngpus GPUs (torchrun)", int, minimum=1),
    Option("--node-rank", "this node's rank, 0..nnodes-1 (torchrun)", int, minimum=0),
    Option("--master-addr", "address of node 0, needed with --nnodes > 1 (torchrun)"),
    Option("--master-port", "port on node 0 (torchrun: default 29500; --launcher slurm: default 20000 + the job "
                            "id modulo 20000)", int, minimum=1, maximum=65535),
    Option("--cpu-procs", "with --ngpus 0: data-parallel CPU processes (gloo)", int, minimum=1),
    Option("--precision", "training precision: auto = bf16 on GPUs that support it (A100, H100, ...), fp16 on "
                          "older GPUs, fp32 on CPU; bf16 = bf16 autocast with fp32 weights and no loss scaling "
                          "(the plugin task's --bf16-autocast; also on CPU); fp16 = fairseq's fp16 mixed precision "
                          "with loss scaling (fp32 on CPU); fp32. results.json records the precision that ran",
           choices=PRECISIONS, makes="train"),
    Option("--seed", "random seed", int, minimum=0, makes="train"),
    Option("--clip-norm", "clip the gradients' norm at this value (fairseq-train's --clip-norm; 0: no clipping, "
                          "as the paper, which names none, and tensor2tensor's transformer_base)", float, minimum=0,
           why=" (0: no clipping)", makes="train"),
    Option("--threads", "CPU threads per process (OMP_NUM_THREADS) for training and decoding; results are "
                        "bitwise reproducible for the same thread count", int, minimum=1),
    Option("--train-minutes", "opt-in wall-clock training budget in minutes (fairseq's --stop-time-hours); "
                              "training then stops at --max-update or the budget, whichever comes first, so the "
                              "result depends on the machine's speed", float, above=0, makes="train"),
    Option("--workers", "processes of the data stages (tokenization, BPE, binarization)", int, minimum=1),
    # --launcher and Slurm (attn_kit.recipes.scale, attn_kit.pipeline.slurm)
    Option("--launcher", "torchrun (default: fairseq-train, torchrun for several GPUs or nodes, our gloo launcher "
                         "for --cpu-procs); slurm: write WORKDIR/prepare.sbatch (the data stages, a CPU job) and "
                         "WORKDIR/train.sbatch (the rest: trains --nnodes x --ngpus with srun and evaluates) and "
                         "submit them with sbatch, the second after the first ended well (--dry-run prints them); "
                         "srun: train with srun inside a Slurm allocation you hold (the jobs use it)",
           choices=LAUNCHERS),
    Option("--partition", _SLURM + "the Slurm partition (sbatch --partition)"),
    Option("--time", _SLURM + "the jobs' time limit, e.g. 3-12:00:00 (sbatch --time); near it the training job "
                     "stops and requeues itself (--signal-seconds)", dest="time_limit", metavar="TIME"),
    Option("--account", _SLURM + "the account charged (sbatch --account)"),
    Option("--mem", _SLURM + f"memory per node of the training job, as sbatch takes it (64G, 64000M; default "
                    f"{TRAIN_MEM}: all of each node's memory, the usual request for GPU nodes given whole: what "
                    "fairseq-train's processes and data-loader workers need grows with the data set and is not "
                    "known ahead, and running out kills the job; give a size where nodes are shared)",
           metavar="SIZE"),
    Option("--cpus-per-task", _SLURM + f"CPUs of each training task, one task per GPU (sbatch --cpus-per-task; "
                              f"default {GPU_TASK_CPUS} on GPUs: the training process, fairseq's data-loader worker "
                              "(--num-workers 1) and torch's helper threads; with --ngpus 0, --threads + 1; at "
                              "least --threads + 1 either way). --threads still sets each process's OMP threads",
           int, minimum=1, metavar="N"),
    Option("--signal-seconds", _SLURM + f"N seconds before --time runs out (default {SIGNAL_SECONDS}: Slurm may "
                               "signal up to a minute early, and stopping takes seconds), Slurm signals the job, "
                               "which stops the recipe and requeues itself; run again, it resumes from "
                               "checkpoint_last.pt. fairseq-train does not save on the signal: the updates since "
                               "the last --save-interval-updates checkpoint are lost, at a time limit and a "
                               "preemption alike. Not requeued when the job saved nothing (a --time too short for "
                               "one checkpoint). 0: no signal, no requeue (run the same command again after the "
                               "limit)", int, minimum=0, maximum=65535, why=" (Slurm's limit)", metavar="N"),
    Option("--prepare-here", _SLURM + "run the data stages here, where the command is typed, then submit the "
                             "training job alone (for clusters without a CPU partition; default: a job of their "
                             "own)", bool),
    Option("--prep-partition", _SLURM + "the partition of the data job (CPUs only; default: --partition)",
           metavar="PARTITION"),
    Option("--prep-time", _SLURM + "the data job's time limit (default: --time)", metavar="TIME"),
    Option("--prep-mem", _SLURM + f"the data job's memory (default {PREP_MEM}: an estimate with room for learning "
                         "BPE on the WMT14 EN-FR corpus, which holds the corpus's word counts in memory; not "
                         "measured)", metavar="SIZE"),
    Option("--prep-cpus", _SLURM + f"the data job's CPUs (sbatch --cpus-per-task) and its --workers (default: "
                          f"--workers where given, else {PREP_CPUS}, a common share of a CPU node; not the CPUs of "
                          "the machine you type on); --dry-run projects the data stages for them", int, minimum=1,
           metavar="N"),
    # the plan's GPU (attn_kit.planning)
    Option("--gpu", "the GPU of the plan's wall-time estimate and of auto sizes, by name (its dense "
                    "bf16/fp16/fp32 peak: python scripts/training_cost.py --gpus lists them)", metavar="NAME"),
    Option("--gpu-tflops", "the GPU's dense peak in TFLOPS at the run's precision, for a GPU not in the list",
           float, above=0, metavar="X"),
    Option("--interconnect-gb-per-s", "the bandwidth per GPU and direction, GB/s, of the slowest link the "
                                      "gradients' all-reduce crosses (default: the GPU's own, NVLink or PCIe, "
                                      f"within a node; {NETWORK_GB_PER_S:g} GB/s per node between nodes, 200 Gb/s "
                                      "InfiniBand)", float, above=0, metavar="X"),
    Option("--utilization", "the share of that peak the run reaches, for the arithmetic alone (default: the step "
                            "time model attn_kit.planning.step_model fitted to the GPU check's measurements, with "
                            "its range)", float, above=0, maximum=1),
    # --canary (attn_kit.recipes.canary)
    Option("--canary", "run the data stages, then train as the real run would for --canary-minutes and write "
                       "WORKDIR/canary/canary.json: tokens/s, model FLOP utilization, memory headroom, loss, the "
                       "cost of a validation and a checkpoint, and the predicted wall time of the whole run, part "
                       "by part; exits non-zero with one line when the run would fail or waste the machine", bool),
    Option("--canary-minutes", f"how long the canary trains (default {CANARY_MINUTES:g})", float, above=0),
    Option("--canary-min-utilization", "the canary fails when the model FLOPs of its real (non-padding) tokens "
                                       "fall below this share of the GPU's datasheet dense peak (default: half the "
                                       "share attn_kit.planning.step_model predicts for the GPU and the run's "
                                       "forwards; not checked on CPUs or GPUs it does not list)", float, above=0,
           maximum=1, metavar="X"),
    Option("--canary-min-tokens-per-second", "the canary fails below N target tokens/s over all devices "
                                             "(default: no floor)", float, minimum=0, metavar="N"),
    Option("--canary-epoch-pairs", "predict the whole run's epoch-end validations and checkpoints for epochs of N "
                                   "training pairs, as long on average as the canary's own (default: the corpus "
                                   "the canary trains on, the run's own; for a canary on a stand-in corpus)", int,
           minimum=1, metavar="N"),
    # the model (Table 3's names)
    Option("--arch", "model architecture", makes="train"),
    Option("--layers", "N, layers of encoder and decoder", int, minimum=1, makes="train"),
    Option("--d-model", "d_model", int, minimum=1, makes="train"),
    Option("--d-ff", "d_ff, the feed-forward inner width", int, minimum=1, makes="train"),
    Option("--h", "h, attention heads", int, minimum=1, makes="train"),
    Option("--p-drop", "P_drop, residual dropout", **_DROP),
    Option("--attention-dropout", "dropout on the attention weights, fairseq's --attention-dropout", **_DROP),
    # training (Sec. 5)
    Option("--tokens-per-update", "padded tokens per update over all devices, fairseq's --max-tokens x devices x "
                                  "--update-freq", int, minimum=1, metavar="N", makes="train"),
    Option("--max-tokens-per-gpu", "most tokens one device holds per forward; --update-freq makes up the rest of "
                                   "--tokens-per-update. auto: the largest forward a GPU's memory holds (--gpu "
                                   "NAME's, else the GPU here; a Slurm job decides on its own), at most its share "
                                   "of an update (attn_kit.planning.step_model, sized from the GPU check's "
                                   "measured memory)", count_or_auto, minimum=1, metavar="N"),
    Option("--max-tokens", "fairseq's --max-tokens: padded tokens per device per batch", int, minimum=1),
    Option("--update-freq", "fairseq's --update-freq: batches per update", int, minimum=1),
    Option("--max-update", "updates", int, minimum=1, makes="train"),
    Option("--warmup-updates", "eq. 3's warmup_steps", int, minimum=1, makes="train"),
    Option("--lr-scale", "multiplies eq. 3's learning rate", float, above=0, makes="train"),
    Option("--save-interval-updates", "a checkpoint every N updates. auto: the paper's 10 minutes (Sec. 6.1) of "
                                      "the run's updates, at the seconds per update a canary measured in WORKDIR, "
                                      "else estimated for the GPU (--gpu NAME, the GPU here), else the job's at "
                                      "its start; a resumed run keeps the interval it started with",
           count_or_auto, minimum=1, metavar="N", makes="train"),
    Option("--validate-interval-updates", "also validate every N updates (default: at each epoch's end); fairseq "
                                          "validates at every checkpoint it saves as well, so the validations come "
                                          "every --save-interval-updates at least", int, minimum=1, metavar="N"),
    Option("--log-interval", "a training log line (loss, learning rate, tokens) every N updates", int, minimum=1,
           metavar="N"),
    Option("--average", "average the last N checkpoints (Sec. 6.1)", int, minimum=1, metavar="N", makes="average"),
    # data
    Option("--src", "source language code", makes="data"),
    Option("--tgt", "target language code", makes="data"),
    Option("--bpe-merges", "joint BPE merges", int, minimum=1, makes="bpe"),
    Option("--bpe-learn-pairs", "learn BPE on a random sample of N training pairs when there are more "
                                "(docs/scaling.md, 'Preparing WMT-sized data', says what it saves and costs); BPE "
                                "is applied to every pair all the same. 0: learn on every pair", int, minimum=0,
           why=" (0: learn on every pair)", metavar="N", makes="bpe"),
    Option("--clean", "--no-clean keeps every training pair; --clean applies clean-corpus-n after BPE, as "
                      "fairseq's scripts: pairs of 1-250 tokens with a length ratio <= 1.5", "bool?", makes="bpe"),
    Option("--vocab", "vocabulary size (BPE symbols)", int, minimum=1, makes="bpe"),
    # decoding (Sec. 6.1)
    Option("--beam", "beam size", int, minimum=1, makes="decode"),
    Option("--length-penalty", "gnmt: the paper's ((5+|Y|)/6)^alpha; fairseq: |Y|^lenpen",
           choices=("gnmt", "fairseq"), makes="decode"),
    Option("--gnmt-alpha", "GNMT length penalty alpha (0: none)", float, minimum=0, why=" (0: no length penalty)",
           dest="alpha", makes="decode"),
    Option("--lenpen", "fairseq's length penalty |Y|^lenpen, with --length-penalty fairseq", float, minimum=0,
           why=" (fairseq's exponent of the length; 1: none)", makes="decode"),
    Option("--beam-stop", "when beam search stops: t2t = as the paper's code did (tensor2tensor's stop_early, "
                          "attn_plugin/beam_search.py; the default with the GNMT penalty); fairseq = fairseq's rule "
                          "(the one rule with fairseq's length penalty)", choices=standalone("beam_stop").RULES,
           makes="decode"),
    Option("--max-len-b", "longest output = input length + this", int, minimum=0,
           why=" (the longest output is the input's length + this)", makes="decode"),
    Option("--evalb", "score with the official EVALB binary at PATH", Path, metavar="PATH"),
    Option("--checkpoint", "another checkpoint of the run (default: the one the recipe evaluated, "
                           "checkpoint_avg.pt)", Path),
    Option("--note", "a sentence saying what the numbers are, stored with them"),
)
OPTIONS = {o.name: o for o in CATALOGUE}
SBATCH_ONLY = tuple(o.name for o in CATALOGUE if o.help.startswith(_SLURM))  # refused with --launcher torchrun


def add(group, name: str, note: str = "", checked: str = "settings", **kwargs) -> argparse.Action:
    """``OPTIONS[name]`` as an argument of ``group`` (a parser or a group): its help, then ``note`` (what
    differs between commands: the default and where it comes from) in brackets. ``checked="settings"``
    (a recipe): the bare type, the range checked on the merged settings (:func:`check_ranges`);
    ``checked="here"``: the range in the type. ``kwargs`` go to argparse (``default``, ``help``
    replaced by argparse.SUPPRESS, ``metavar``)."""
    o = OPTIONS[name]
    spec = dict(dest=o.name, help=o.help + (f" ({note})" if note else ""))
    if o.kind is bool:
        spec["action"] = "store_true"
    elif o.kind == "bool?":
        spec["action"] = argparse.BooleanOptionalAction
    else:
        spec.update(type=o.type_here() if checked == "here" else o.kind, choices=o.choices, metavar=o.metavar)
        if spec["type"] is str:
            del spec["type"]
    spec.update(kwargs)
    return group.add_argument(o.flag, **{k: v for k, v in spec.items() if v is not None or k == "default"})


def check_ranges(values, named: Callable[[str], str] = lambda name: OPTIONS[name].flag):
    """Every value of ``values`` (name -> value) that a catalogue option's range refuses: one UsageError
    ``<named(name)> must be <range>`` (``named``: the option, or the YAML key and its file)."""
    for name, value in values.items():
        o = OPTIONS.get(name)
        if o is None or value is None or value == AUTO or isinstance(value, bool) \
                or not isinstance(value, (int, float)):
            continue
        if not o.in_range(value):
            raise UsageError(f"{named(name)} must be {o.range_text()}{o.why}")


def shaping(s, makes: str) -> dict:
    """The values of ``s`` (settings) of the options that shape a ``makes`` stage's output: the stage's
    recorded options, whose change starts it again."""
    return {o.name: getattr(s, o.name) for o in CATALOGUE if o.makes == makes and hasattr(s, o.name)}
