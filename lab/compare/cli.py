"""The comparison's command line (``python scripts/compare_baselines.py``) and its run."""
import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from attn_kit import options
from attn_kit.cli import ArgumentParser, Number, UsageError, log, main_guard
from attn_kit.planning.paper import PAPER_ALPHA, PAPER_BEAM
from ..pairs import ARCH_ALIASES, MODELS, PAIRS, arch_size
from attn_kit.fairseq_layer.fairseq_commands import PRECISIONS, batch_plan, used_precision
from attn_kit.pipeline.lock import workdir_lock
from attn_kit.checkout import REPO
from attn_kit.planning.sizes import SIZES, ModelSize
from . import __doc__ as DESCRIPTION
from .commands import BUNDLED_TRAINING, DEFAULT_TRAINING, child_env, peak_lr, train_command, warmup_init_lr
from .report import markdown, plot, write_comparison
from .run import inspect_data, prepare_bundled, run_generation, run_training
from .stats import summarize, summarize_run


HERE = dict(checked="here")  # no YAML: each range checked as the command line is parsed


def parser() -> argparse.ArgumentParser:
    """The comparison's options: data and budget, model size, training, evaluation."""
    p = ArgumentParser(prog="scripts/compare_baselines.py", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", type=Path, help="binarized data directory (fairseq-preprocess --destdir)")
    options.add(p, "bundled", "its data prepared on first use")
    options.add(p, "arch", "the pair compared: base (attn_paper_base vs transformer_wmt_en_de) or big "
                           "(attn_paper_big vs transformer_vaswani_wmt_en_de_big), or either arch's name; default base",
                default="base")
    budget = p.add_mutually_exclusive_group()
    options.add(budget, "max_update", "the budget of each model", **HERE)
    options.add(budget, "train_minutes", "the budget of each model, per seed; the two one after the other", **HERE)
    p.add_argument("--seeds", type=Number(int, minimum=0), nargs="+", default=[1],
                   help="one training of each model per seed; several seeds give mean +- sd and a noise "
                        "verdict (default: 1)")
    options.add(p, "workdir", "default runs/compare_baselines/<data>_<arch>; earlier runs there are replaced")
    p.add_argument("--bundled-workdir", type=Path, default=REPO / "runs" / "wmt14_en_de_bundled",
                   help="--bundled: the bundled recipe's workdir holding data-bin (default, shared with "
                        "recipes/wmt14_en_de.sh --bundled: runs/wmt14_en_de_bundled)")
    g = p.add_argument_group("model size (applied to both models; default: the arch's, with --bundled the "
                             f"bundled recipe's small configuration: {SIZES['bundled'].describe()})")
    for name in ("layers", "d_model", "d_ff", "h"):
        options.add(g, name, **HERE)
    options.add(g, "p_drop", "default: the arch's, base 0.1, big 0.3", **HERE)
    g = p.add_argument_group("training (identical for both)")
    options.add(g, "max_tokens", f"default {DEFAULT_TRAINING['max_tokens']}; --bundled "
                                 f"{BUNDLED_TRAINING['max_tokens']}", **HERE)
    options.add(g, "update_freq", "default 1", **HERE)
    options.add(g, "tokens_per_update", "sets --update-freq (and evens out --max-tokens) for the devices used, as "
                                        "the recipes do (attn_kit.fairseq_layer.fairseq_commands.batch_plan)", **HERE)
    options.add(g, "warmup_updates", f"default {DEFAULT_TRAINING['warmup_updates']}; --bundled "
                                     f"{BUNDLED_TRAINING['warmup_updates']}", **HERE)
    options.add(g, "lr_scale", f"default {DEFAULT_TRAINING['lr_scale']:g}; --bundled "
                               f"{BUNDLED_TRAINING['lr_scale']:g}, as the bundled recipe", **HERE)
    g.add_argument("--label-smoothing", type=Number(float, minimum=0, below=1), default=0.1,
                   help="eps_ls (default 0.1)")
    g.add_argument("--validate-every", type=Number(int, minimum=1),
                   help="validate every N updates (default: max-update/10; with --train-minutes 50)")
    g.add_argument("--log-every", type=Number(int, minimum=1), default=50,
                   help="log train stats every N updates (default 50)")
    options.add(g, "ngpus", "default 0; > 1: torchrun data parallel, --max-tokens per GPU", default=0, **HERE)
    options.add(g, "precision", "default auto; bf16 and fp16 apply to both models", default="auto",
                metavar="{" + ",".join(PRECISIONS) + "}", choices=None)
    options.add(g, "threads", "default: torch's choice, all cores; on a machine other jobs share, 1 avoids "
                              "oversubscription", **HERE)
    g = p.add_argument_group("evaluation (identical for both)")
    g.add_argument("--gen-subset", default="test", help="split to translate for BLEU (default test; "
                                                        "valid if there is no test split)")
    options.add(g, "beam", f"default {PAPER_BEAM}", default=PAPER_BEAM, **HERE)
    options.add(g, "alpha", f"default {PAPER_ALPHA}", default=PAPER_ALPHA, **HERE)
    g.add_argument("--remove-bpe", default="subword_nmt",
                   help="fairseq-generate --remove-bpe for BLEU (default subword_nmt: '@@ ')")
    g.add_argument("--no-bleu", action="store_true", help="skip generation and BLEU")
    return p


@dataclass(frozen=True, kw_only=True)
class CompareSettings:
    """The comparison's settings, built once by :func:`parse_args`: the command line, the
    preset of --bundled or the paper filling what it leaves unset (BUNDLED_TRAINING,
    DEFAULT_TRAINING), and the derived model size and the precision that runs."""
    data: Optional[Path]
    bundled: bool
    arch: str  # a key of lab.pairs.PAIRS
    max_update: Optional[int]
    train_minutes: Optional[float]  # per model
    seeds: List[int]
    workdir: Optional[Path]
    bundled_workdir: Path
    layers: Optional[int]
    d_model: Optional[int]
    d_ff: Optional[int]
    h: Optional[int]
    p_drop: Optional[float]
    max_tokens: int
    update_freq: int
    warmup_updates: int
    lr_scale: float
    label_smoothing: float
    validate_every: int
    log_every: int
    ngpus: int
    precision: str  # what runs: bf16, fp16 or fp32
    threads: Optional[int]
    gen_subset: str
    beam: int
    alpha: float
    remove_bpe: str
    no_bleu: bool
    size: Optional[ModelSize]  # both models' size; None: the archs' own


def parse_args(argv=None) -> CompareSettings:
    """The checked command line, with the defaults of --bundled or the paper filled in."""
    given = parser().parse_args(argv)
    precision = check(given)
    arch = ARCH_ALIASES.get(given.arch, given.arch)
    preset = BUNDLED_TRAINING if given.bundled else DEFAULT_TRAINING
    values = {**vars(given), **{k: v for k, v in preset.items() if getattr(given, k) is None}}
    values.pop("tokens_per_update", None)
    if given.tokens_per_update is not None:  # the recipes' batch: devices x --max-tokens x --update-freq
        p = batch_plan(given.tokens_per_update, max(1, given.ngpus), values["max_tokens"])
        values.update(max_tokens=p.max_tokens, update_freq=p.update_freq)
    values["update_freq"] = values["update_freq"] or 1
    max_update = given.max_update
    return CompareSettings(**{
        **values, "arch": arch, "precision": precision,
        "size": model_size(given.bundled, arch, given),
        "validate_every": given.validate_every or (max(1, max_update // 10) if max_update else 50)})


def check(given: argparse.Namespace) -> str:
    """One usage-error line for a contradictory or out-of-range command line; else the precision
    that runs (bf16, fp16 or fp32: attn_kit.fairseq_layer.fairseq_commands.used_precision)."""
    if ARCH_ALIASES.get(given.arch, given.arch) not in PAIRS:
        raise UsageError(f"unknown --arch {given.arch!r}; choose base or big (or {', '.join(ARCH_ALIASES)})")
    if given.bundled == (given.data is not None):
        raise UsageError("give a binarized data directory or --bundled (one of the two)")
    if given.tokens_per_update is not None and given.update_freq is not None:
        raise UsageError("give --tokens-per-update or --update-freq, not both (the first sets the second)")
    if given.max_update is None and given.train_minutes is None:
        raise UsageError("give a training budget: --max-update N (updates per model) or --train-minutes M "
                         "(training minutes for each model)")
    if len(set(given.seeds)) != len(given.seeds):
        raise UsageError("--seeds must be different numbers")
    precision = used_precision(given.precision, given.ngpus)  # an unknown --precision is its usage error
    if given.ngpus > 0:
        try:
            import torch

            have = torch.cuda.device_count()
        except Exception:
            have = 0
        if have < given.ngpus:
            raise UsageError(f"--ngpus {given.ngpus}: torch sees {have} CUDA GPU(s)")
    return precision


def model_size(bundled: bool, arch: str, given: argparse.Namespace) -> Optional[ModelSize]:
    """The size both models get: --bundled's (attn_kit.planning.sizes.SIZES["bundled"]) or, when
    --layers/--d-model/--d-ff/--h/--p-drop resize them, ``arch``'s with those
    changes; None: the archs' own."""
    changes = {k: v for k in ("layers", "d_model", "d_ff", "h", "p_drop") if (v := getattr(given, k)) is not None}
    if bundled:
        return SIZES["bundled"].replace(**changes)
    return arch_size(arch).replace(**changes) if changes else None


def main(argv=None):
    args = parse_args(argv)
    data = prepare_bundled(args.bundled_workdir.resolve()) if args.bundled else args.data.resolve()
    src, tgt, joined, subset = inspect_data(data, args.gen_subset)
    name = "bundled" if args.bundled else data.name
    workdir = (args.workdir or REPO / "runs" / "compare_baselines" / f"{name}_{args.arch}").resolve()
    with workdir_lock(workdir):  # one comparison per work directory (the bundled data: the recipe's own lock)
        compare(args, data, src, tgt, joined, subset, workdir)


def compare(args, data: Path, src: str, tgt: str, joined: bool, subset: str, workdir: Path):
    """Train and evaluate both models for every seed in ``workdir``; write and print the comparison."""
    pair, env = PAIRS[args.arch], child_env(args)
    budget = f"{args.max_update} updates" if args.max_update else f"{args.train_minutes:g} min"
    log(f"comparing {pair.plugin_arch} (attn_plugin) with {pair.stock_arch} (stock fairseq) on {data} "
        f"({src}-{tgt}); {budget} of training each, seeds {' '.join(map(str, args.seeds))}; workdir {workdir}")
    log(f"same schedule: plugin eq. 3 with --lr-scale {args.lr_scale:g}, warmup {args.warmup_updates}; "
        f"stock inverse_sqrt --lr {peak_lr(args):.6g} --warmup-init-lr {warmup_init_lr(args):.6g}")
    runs, commands = [], {}
    for i, seed in enumerate(args.seeds):
        for which in MODELS if i % 2 == 0 else MODELS[::-1]:
            tag = f"{which} seed {seed}"
            run_dir = workdir / f"{which}-seed{seed}"
            cmd = train_command(which, args, data, joined, seed, run_dir)
            commands[f"{which}-seed{seed}"] = cmd
            arch = pair.plugin_arch if which == "plugin" else pair.stock_arch
            log(f"training {tag} ({arch}); log: {run_dir / 'train.log'}")
            stats = run_training(cmd, run_dir, tag, env)
            log(f"  {tag}: {stats.get('updates')} updates in {stats.get('train_seconds', 0) / 60:.1f} min, "
                f"{stats['tokens'] / max(stats['step_seconds'], 1e-9):.0f} train tokens/s")
            gen = None if args.no_bleu else run_generation(args, data, run_dir, subset, tag, env)
            runs.append(summarize_run(which, seed, stats, gen))
    summary = summarize(runs, args.seeds)
    table = markdown(summary, args, runs)
    write_comparison(workdir, args, data, f"{src}-{tgt}", commands, runs, summary, table)
    print()
    print(table, flush=True)
    print()
    log(f"wrote {workdir / 'comparison.md'} and {workdir / 'comparison.json'}")
    plot(runs, workdir / "comparison.png", table.splitlines()[0])
    log(f"wrote {workdir / 'comparison.png'}")


def entry():
    """``python scripts/compare_baselines.py``: one-line errors, Ctrl-C and SIGTERM stop the runs
    (:func:`attn_kit.cli.main_guard`; attn_kit.pipeline.process.stream stops the running command)."""
    main_guard(main)
