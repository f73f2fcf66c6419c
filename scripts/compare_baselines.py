#!/usr/bin/env python
"""Train attn_plugin's Transformer and its stock fairseq counterpart the same way, and compare them.

    python scripts/compare_baselines.py --bundled --minutes 5
    python scripts/compare_baselines.py data-bin/wmt14_en_de --arch big --ngpus 8 --max-update 20000
    python scripts/compare_baselines.py --bundled --max-update 300 --seeds 1 2 3   # seed-to-seed noise

The pairs: --arch base trains attn_paper_base and fairseq's transformer_wmt_en_de;
--arch big trains attn_paper_big and transformer_vaswani_wmt_en_de_big. Both get
the same data, batch (--max-tokens, --update-freq, GPUs), Adam (0.9, 0.98,
1e-9), learning-rate values, label smoothing 0.1, seed, model sizes and update
budget; each side uses its own criterion and schedule flags:

  plugin: --user-dir attn_plugin --criterion attn_label_smoothed_cross_entropy
          --lr-scheduler attn_inverse_sqrt --warmup-updates W --lr-scale S
  stock:  --criterion label_smoothed_cross_entropy --share-all-embeddings
          --lr-scheduler inverse_sqrt --warmup-updates W
          --lr P --warmup-init-lr P/W   with P = S * d_model^-0.5 * W^-0.5, the peak of eq. 3

fairseq's inverse_sqrt warms up linearly from --warmup-init-lr to --lr over W
updates, then decays as lr * sqrt(W / updates done). With these values its
first update uses eq. 3's lrate(1) = P/W, and every later update a rate within
1/W of eq. 3's (0.25% at W = 400); with --warmup-init-lr 0 it would run one
update behind eq. 3 (its first update at rate 0, 5% behind at update 20).

The two trainings run one after the other, never together, so their speeds
compare; with several seeds the order alternates. Budget: --max-update N
(each model N updates) or --minutes M (the two trainings share M minutes of
training time: M/2 each, per seed; validation counts, evaluation comes on top).
Validation runs every --validate-every updates at the same updates for both,
so curves compare at equal updates whatever the budget.

Evaluation, the same for both: the unsmoothed valid nll_loss (base 2) and
perplexity 2^nll_loss that fairseq logs (the smoothed losses differ between
the two criteria), the last logged train nll_loss, and BLEU of beam-4 search
(GNMT length penalty 0.6, Sec. 6.1) with the last checkpoint on --gen-subset,
scored by sacreBLEU on the tokenized, BPE-removed output (tokenize=none).

Writes WORKDIR/comparison.md (the table printed at the end), comparison.json
(settings, commands, every run's numbers and validation curves) and
comparison.png (the unsmoothed valid loss against updates and against training
time; needs matplotlib). --bundled prepares the repo's bundled EN-DE data with the
bundled recipe (recipes/wmt14.py, stages extract..binarize, about 80 s once;
it reuses a finished --bundled-workdir).
"""
import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER_DIR = REPO / "attn_plugin"
WORKER = "_fairseq_train"  # hidden first argument: run fairseq-train in-process and record stats

PAIRS = {  # --arch: (plugin arch, stock fairseq arch, their d_model)
    "base": ("attn_paper_base", "transformer_wmt_en_de", 512),
    "big": ("attn_paper_big", "transformer_vaswani_wmt_en_de_big", 1024),
}
ARCH_ALIASES = {"attn_paper_base": "base", "transformer_wmt_en_de": "base",
                "attn_paper_big": "big", "transformer_vaswani_wmt_en_de_big": "big"}
MODELS = ("plugin", "stock")
LABEL = {"plugin": "attn_plugin", "stock": "stock fairseq"}
WARMUP_STEPS = 5  # train steps left out of tokens/s (allocator, caches, kernel selection)


class CompareError(Exception):
    """Reported as one line: ``error: <message>``, exit status 1."""


def log(msg: str):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="scripts/compare_baselines.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", type=Path, help="binarized data directory (fairseq-preprocess --destdir)")
    p.add_argument("--bundled", action="store_true", help="use the repo's bundled EN-DE data (prepared on first use)")
    p.add_argument("--arch", default="base",
                   help="base (attn_paper_base vs transformer_wmt_en_de) or big (attn_paper_big vs "
                        "transformer_vaswani_wmt_en_de_big); default base")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--max-update", type=int, help="budget: train each model for N updates")
    budget.add_argument("--minutes", type=float,
                        help="budget: M minutes of training for the pair, split equally: each model trains "
                             "M/2 minutes (per seed)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1],
                   help="one training of each model per seed; several seeds give mean +- sd and a noise "
                        "verdict (default: 1)")
    p.add_argument("--workdir", type=Path,
                   help="where runs and results go (default runs/compare_baselines/<data>_<arch>); "
                        "earlier runs there are replaced")
    p.add_argument("--bundled-workdir", type=Path, default=REPO / "runs" / "wmt14_en_de_bundled",
                   help="--bundled: the bundled recipe's workdir holding data-bin (default, shared with "
                        "recipes/wmt14_en_de.sh --bundled: runs/wmt14_en_de_bundled)")
    g = p.add_argument_group("model size (applied to both models; default: the arch's, with --bundled the "
                             "bundled recipe's small configuration: 2+2 layers, d_model 256, d_ff 1024, 4 heads)")
    g.add_argument("--layers", type=int, help="N, encoder and decoder layers")
    g.add_argument("--d-model", type=int, help="d_model")
    g.add_argument("--d-ff", type=int, help="d_ff, FFN inner width")
    g.add_argument("--heads", type=int, help="h, attention heads")
    g.add_argument("--dropout", type=float, help="P_drop (default: the arch's, base 0.1, big 0.3)")
    g = p.add_argument_group("training (identical for both)")
    g.add_argument("--max-tokens", type=int, help="tokens per device per batch (default 4096; --bundled 2048)")
    g.add_argument("--update-freq", type=int, default=1, help="batches per update (default 1)")
    g.add_argument("--warmup-updates", type=int, help="warmup_steps of eq. 3 (default 4000; --bundled 400)")
    g.add_argument("--lr-scale", type=float,
                   help="multiplies eq. 3 (default 1; --bundled 0.8, as the bundled recipe)")
    g.add_argument("--label-smoothing", type=float, default=0.1, help="eps_ls (default 0.1)")
    g.add_argument("--validate-every", type=int,
                   help="validate every N updates (default: max-update/10; with --minutes 50)")
    g.add_argument("--log-every", type=int, default=50, help="log train stats every N updates (default 50)")
    g.add_argument("--ngpus", type=int, default=0,
                   help="GPUs (0: CPU, the default; > 1: torchrun data parallel, --max-tokens per GPU)")
    g.add_argument("--precision", default="auto", choices=["auto", "fp32", "fp16", "bf16"],
                   help="GPU precision (auto: bf16 where supported, else fp16; CPU always fp32)")
    g.add_argument("--threads", type=int,
                   help="CPU threads of each training and generation process (OMP_NUM_THREADS; default: "
                        "torch's choice, all cores). On a machine other jobs share, 1 avoids oversubscription")
    g = p.add_argument_group("evaluation (identical for both)")
    g.add_argument("--gen-subset", default="test", help="split to translate for BLEU (default test; "
                                                        "valid if there is no test split)")
    g.add_argument("--beam", type=int, default=4, help="beam size (default 4)")
    g.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty alpha (default 0.6)")
    g.add_argument("--remove-bpe", default="subword_nmt",
                   help="fairseq-generate --remove-bpe for BLEU (default subword_nmt: '@@ ')")
    g.add_argument("--no-bleu", action="store_true", help="skip generation and BLEU")
    args = p.parse_args(argv)

    arch = ARCH_ALIASES.get(args.arch, args.arch)
    if arch not in PAIRS:
        raise CompareError(f"unknown --arch {args.arch!r}; choose base or big "
                           f"(or {', '.join(ARCH_ALIASES)})")
    args.arch = arch
    if args.bundled == (args.data is not None):
        raise CompareError("give a binarized data directory or --bundled (one of the two)")
    if args.max_update is None and args.minutes is None:
        raise CompareError("give a training budget: --max-update N (updates per model) or --minutes M "
                           "(training minutes for the pair)")
    if args.max_update is not None and args.max_update < 1:
        raise CompareError("--max-update must be >= 1")
    if args.minutes is not None and args.minutes <= 0:
        raise CompareError("--minutes must be > 0")
    if len(set(args.seeds)) != len(args.seeds):
        raise CompareError("--seeds must be different numbers")
    if args.ngpus < 0:
        raise CompareError("--ngpus must be >= 0")
    if args.ngpus > 0:
        try:
            import torch

            have = torch.cuda.device_count()
        except Exception:
            have = 0
        if have < args.ngpus:
            raise CompareError(f"--ngpus {args.ngpus}: torch sees {have} CUDA GPU(s)")
    for name in ("layers", "d_model", "d_ff", "heads", "max_tokens", "update_freq", "warmup_updates",
                 "validate_every", "log_every", "beam", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise CompareError(f"--{name.replace('_', '-')} must be >= 1")
    bundled = args.bundled
    if bundled:
        from recipes.wmt14 import MODES  # the bundled recipe's settings, defined there once

        b = MODES["bundled"]
        defaults = dict(max_tokens=b["max_tokens_per_gpu"], warmup_updates=b["warmup_updates"],
                        lr_scale=b["lr_scale"])
    else:
        defaults = dict(max_tokens=4096, warmup_updates=4000, lr_scale=1.0)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.validate_every is None:
        args.validate_every = max(1, args.max_update // 10) if args.max_update else 50
    return args


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------
def prepare_bundled(workdir: Path) -> Path:
    """The bundled recipe's extract..binarize stages (skipped where already done)."""
    data = workdir / "data-bin"
    log(f"bundled data: recipes/wmt14.py --bundled --stop-stage binarize in {workdir}")
    cmd = [sys.executable, str(REPO / "recipes" / "wmt14.py"), "--pair", "en-de", "--bundled",
           "--workdir", str(workdir), "--stop-stage", "binarize"]

    def on_line(line):
        if "] stage" in line:  # the recipe's progress lines
            print("  " + line.rstrip(), flush=True)

    rc, last = stream(cmd, dict(os.environ, PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1"), on_line)
    if rc != 0:
        raise CompareError(f"preparing the bundled data failed: {last}")
    return data


def stream(cmd, env: dict, on_line) -> tuple:
    """Run ``cmd``, handing each output line (stdout and stderr) to ``on_line``;
    Ctrl-C stops the child too. Returns (exit code, last non-empty line
    without an ``error: `` prefix)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                            errors="replace")
    last = ""
    try:
        for line in proc.stdout:
            if line.strip():
                last = line.strip()
            on_line(line)
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    return rc, last.removeprefix("error: ")


def inspect_data(data: Path, gen_subset: str):
    """(source lang, target lang, joined dictionary?, split to translate) of a binarized directory."""
    if not data.is_dir():
        raise CompareError(f"data directory not found: {data}")
    pairs = sorted({m.group(1, 2) for f in data.glob("train.*-*.*.idx")
                    if (m := re.match(r"train\.([^.-]+)-([^.-]+)\.[^.]+\.idx$", f.name))})
    if not pairs:
        raise CompareError(f"{data} holds no binarized training data (train.SRC-TGT.SRC.idx from "
                           "fairseq-preprocess)")
    if len(pairs) > 1:
        raise CompareError(f"{data} holds several language pairs ({', '.join('-'.join(p) for p in pairs)}); "
                           "give a directory with one")
    src, tgt = pairs[0]
    for lang in (src, tgt):
        if not (data / f"dict.{lang}.txt").exists():
            raise CompareError(f"{data} has no dict.{lang}.txt")
    if not (data / f"valid.{src}-{tgt}.{src}.idx").exists():
        raise CompareError(f"{data} has no valid split (valid.{src}-{tgt}.{src}.idx); validation needs one")
    joined = (data / f"dict.{src}.txt").read_bytes() == (data / f"dict.{tgt}.txt").read_bytes()
    subset = gen_subset
    if not (data / f"{subset}.{src}-{tgt}.{src}.idx").exists():
        if subset == "test" and (data / f"valid.{src}-{tgt}.{src}.idx").exists():
            subset = "valid"
        else:
            raise CompareError(f"{data} has no {subset} split to translate")
    return src, tgt, joined, subset


# ---------------------------------------------------------------------------
# The two command lines
# ---------------------------------------------------------------------------
def d_model(args) -> int:
    """The models' d_model: the size flags' (--d-model, or --bundled's) or the arch's."""
    flags = size_flags(args)
    values = [flags[i + 1] for i, flag in enumerate(flags) if flag == "--encoder-embed-dim"]
    return int(values[-1]) if values else PAIRS[args.arch][2]  # the last one wins, as in fairseq


def peak_lr(args) -> float:
    """The peak of eq. 3 (at step = warmup) for this d_model: what stock fairseq's --lr must be."""
    return args.lr_scale * d_model(args) ** -0.5 * args.warmup_updates ** -0.5


def warmup_init_lr(args) -> float:
    """Stock fairseq's --warmup-init-lr: eq. 3 at step 1, so that stock's first update uses it too."""
    return peak_lr(args) / args.warmup_updates


def size_flags(args):
    """The model-size flags both models get."""
    if args.bundled:
        from recipes.wmt14 import BUNDLED_SIZE, model_flags  # the bundled recipe's configuration

        flags = model_flags(**BUNDLED_SIZE)
    else:
        flags = []
    for side in ("encoder", "decoder"):
        for opt, value in ((f"--{side}-layers", args.layers), (f"--{side}-embed-dim", args.d_model),
                           (f"--{side}-ffn-embed-dim", args.d_ff), (f"--{side}-attention-heads", args.heads)):
            if value is not None:
                flags += [opt, str(value)]
    if args.dropout is not None:
        flags += ["--dropout", str(args.dropout)]
    return flags


def model_flags(which: str, args, joined: bool):
    plugin_arch, stock_arch, _ = PAIRS[args.arch]
    smoothing = ["--label-smoothing", str(args.label_smoothing)]
    if which == "plugin":
        return ["--user-dir", str(USER_DIR), "--arch", plugin_arch, *size_flags(args),
                *([] if joined else ["--no-share-all-embeddings"]),
                "--criterion", "attn_label_smoothed_cross_entropy", *smoothing,
                "--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", str(args.warmup_updates),
                "--lr-scale", str(args.lr_scale), "--lr", "1"]
    return ["--arch", stock_arch, *size_flags(args),
            "--share-all-embeddings" if joined else "--share-decoder-input-output-embed",
            "--criterion", "label_smoothed_cross_entropy", *smoothing,
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(args.warmup_updates),
            "--lr", repr(peak_lr(args)), "--warmup-init-lr", repr(warmup_init_lr(args))]


def precision_flags(args):
    if args.ngpus == 0:
        return ["--cpu"]
    from attn_kit.pipeline.launch import precision_flags as flags

    return flags(args.precision, args.ngpus)


def train_command(which: str, args, data: Path, joined: bool, seed: int, run_dir: Path):
    budget = (["--max-update", str(args.max_update)] if args.max_update
              else ["--stop-time-hours", repr(args.minutes / 2 / 60)])
    fairseq_args = [
        str(data), *model_flags(which, args, joined),
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9",
        "--max-tokens", str(args.max_tokens), "--update-freq", str(args.update_freq),
        "--required-batch-size-multiple", "1", "--seed", str(seed), *budget, *precision_flags(args),
        "--save-dir", str(run_dir / "checkpoints"), "--no-epoch-checkpoints", "--no-save-optimizer-state",
        "--save-interval", "1000000", "--validate-interval", "1000000",  # no per-epoch saves/validations
        "--validate-interval-updates", str(args.validate_every),
        "--log-format", "json", "--log-interval", str(args.log_every), "--no-progress-bar",
    ]
    worker = [str(Path(__file__).resolve()), WORKER, str(run_dir / "stats.json")]
    if args.ngpus > 1:
        torchrun = Path(sys.executable).parent / "torchrun"
        launch = [str(torchrun) if torchrun.exists() else "torchrun", "--standalone",
                  "--nproc-per-node", str(args.ngpus)]
    else:
        launch = [sys.executable]
    return launch + worker + fairseq_args


def generate_command(args, data: Path, checkpoint: Path, subset: str):
    """fairseq-generate as the paper decodes (Sec. 6.1), the same for both checkpoints."""
    local = Path(sys.executable).parent / "fairseq-generate"
    generate = str(local) if local.exists() else shutil.which("fairseq-generate")
    if not generate:
        raise CompareError("fairseq-generate not found next to this Python or on PATH")
    return [generate, str(data), "--user-dir", str(USER_DIR), "--task", "attn_translation",
            "--path", str(checkpoint), "--gen-subset", subset, "--beam", str(args.beam),
            "--gnmt-alpha", str(args.alpha), "--max-len-a", "1", "--max-len-b", "50", "--batch-size", "128",
            "--required-batch-size-multiple", "1", "--remove-bpe", args.remove_bpe, *precision_flags(args)]


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------
def child_env(args) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore", PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    return env


def run_training(which: str, seed: int, cmd, run_dir: Path, tag: str, env: dict) -> dict:
    """Run one training, streaming its log to run_dir/train.log; return its numbers."""
    if run_dir.exists():
        shutil.rmtree(run_dir)  # fairseq-train would resume from an old checkpoint_last.pt
    run_dir.mkdir(parents=True)
    (run_dir / "command.txt").write_text(" ".join(shlex.quote(c) for c in cmd) + "\n")
    train_inner = []
    start = time.time()
    with open(run_dir / "train.log", "w", encoding="utf-8") as logf:
        def on_line(line):
            logf.write(line)
            record = _json_record(line, "train_inner")
            if record:
                train_inner.append(record)
            record = _json_record(line, "valid")
            if record:
                ppl = float(record.get("valid_ppl", "nan"))
                log(f"  {tag}: update {record.get('valid_num_updates')}, valid nll_loss "
                    f"{float(record.get('valid_nll_loss', 'nan')):.3f}, ppl {ppl:.2f} "
                    f"({(time.time() - start) / 60:.1f} min)")

        rc, last = stream(cmd, env, on_line)
    if rc != 0:
        raise CompareError(f"{tag}: fairseq-train failed (exit {rc}): {last[:300]}; log: {run_dir / 'train.log'}")
    stats = _read_stats(run_dir / "stats.json")
    stats["train_inner"] = train_inner
    stats["run_seconds"] = time.time() - start
    return stats


def _json_record(line: str, tag: str):
    """The JSON stats of a fairseq ``--log-format json`` line logged under ``tag``."""
    match = re.search(r"(?:\| |:)" + tag + r"(?: \| |:)(\{.*\})\s*$", line)
    if not match:
        return None
    try:
        return json.loads(match.group(1))
    except ValueError:
        return None


def _read_stats(path: Path) -> dict:
    """The worker's stats; with several GPUs one file per rank (tokens add up)."""
    files = [path] if path.exists() else sorted(path.parent.glob(path.name + ".rank*"))
    if not files:
        raise CompareError(f"the training wrote no statistics ({path})")
    ranks = [json.loads(f.read_text()) for f in files]
    stats = dict(ranks[0])
    stats["tokens"] = sum(r["tokens"] for r in ranks)
    stats["step_seconds"] = max(r["step_seconds"] for r in ranks)
    stats["world_size"] = len(ranks)
    return stats


def run_generation(args, data: Path, run_dir: Path, subset: str, tag: str) -> dict:
    from sacrebleu.metrics import BLEU

    checkpoint = run_dir / "checkpoints" / "checkpoint_last.pt"
    if not checkpoint.exists():
        raise CompareError(f"{tag}: no {checkpoint} (did training stop before its first update?)")
    cmd = generate_command(args, data, checkpoint, subset)
    out = run_dir / f"generate-{subset}.txt"
    start = time.time()
    (run_dir / "generate-command.txt").write_text(" ".join(shlex.quote(c) for c in cmd) + "\n")
    with open(out, "w", encoding="utf-8") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True, env=child_env(args))
    seconds = time.time() - start
    (run_dir / "generate.log").write_text(proc.stderr)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        raise CompareError(f"{tag}: fairseq-generate failed (exit {proc.returncode}): "
                           f"{lines[-1][:300] if lines else ''}; log: {run_dir / 'generate.log'}")
    hyps, refs = {}, {}
    for line in out.read_text(encoding="utf-8").splitlines():
        if line.startswith("D-"):
            idx, _score, text = (line.split("\t", 2) + ["", ""])[:3]
            hyps[int(idx[2:])] = text
        elif line.startswith("T-"):
            idx, text = (line.split("\t", 1) + [""])[:2]
            refs[int(idx[2:])] = text
    ids = sorted(refs)
    if not ids or sorted(hyps) != ids:
        raise CompareError(f"{tag}: {out} has {len(hyps)} hypotheses for {len(refs)} references")
    # tokenized BLEU: the output and references are tokenized text (force: sacreBLEU would warn about it)
    bleu = BLEU(tokenize="none", force=True).corpus_score([hyps[i] for i in ids], [[refs[i] for i in ids]])
    # fairseq's own timing of the generation alone (its log goes to the output file)
    speed = re.findall(r"Translated [\d,]+ sentences .* in [\d.]+s \(([\d.]+) sentences/s, ([\d.]+) tokens/s",
                       out.read_text(encoding="utf-8") + proc.stderr)
    result = {"bleu": round(bleu.score, 2), "sentences": len(ids), "generate_seconds": round(seconds, 1),
              "subset": subset, "output": str(out)}
    if speed:
        result["sentences_per_s"], result["gen_tokens_per_s"] = map(float, speed[-1])
    log(f"  {tag}: BLEU {bleu.score:.2f} on {len(ids)} {subset} sentences ({seconds:.0f} s)")
    return result


def summarize_run(which: str, seed: int, stats: dict, gen: dict) -> dict:
    valid = stats.get("valid", [])
    run = {
        "model": which, "seed": seed, "params": stats.get("params"), "updates": stats.get("updates"),
        "train_step_seconds": round(stats["step_seconds"], 2), "train_tokens": stats["tokens"],
        "tokens_per_s": stats["tokens"] / stats["step_seconds"] if stats["step_seconds"] > 0 else None,
        "tokens_per_s_note": stats.get("tokens_note"),
        "peak_memory_bytes": stats.get("peak_memory_bytes"), "peak_memory_kind": stats.get("peak_memory_kind"),
        "train_minutes": round(stats.get("train_seconds", 0) / 60, 2),
        "train_nll_loss": float(stats["train_inner"][-1]["nll_loss"]) if stats.get("train_inner") else None,
        "valid_curve": valid,
    }
    if valid:
        run["valid_nll_loss"] = valid[-1]["nll_loss"]
        run["valid_ppl"] = valid[-1]["ppl"]
        run["valid_at_update"] = valid[-1]["num_updates"]
    run.update({k: v for k, v in (gen or {}).items()
                if k in ("bleu", "sentences_per_s", "gen_tokens_per_s", "subset")})
    return run


# ---------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------
def mean_sd(values):
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def common_update(runs) -> int:
    """The last update at which every run validated."""
    sets = [{v["num_updates"] for v in r["valid_curve"]} for r in runs]
    common = set.intersection(*sets) if sets else set()
    return max(common) if common else None


def at_update(run, update):
    for v in run["valid_curve"]:
        if v["num_updates"] == update:
            return v
    return None


def summarize(runs, args) -> dict:
    by = {w: [r for r in runs if r["model"] == w] for w in MODELS}
    update = common_update(runs)
    summary = {"common_update": update, "seeds": args.seeds}
    metrics = ["params", "updates", "train_minutes", "tokens_per_s", "peak_memory_bytes", "train_nll_loss",
               "valid_nll_loss", "valid_ppl", "bleu", "sentences_per_s", "gen_tokens_per_s"]
    for w in MODELS:
        summary[w] = {m: mean_sd([r.get(m) for r in by[w]]) for m in metrics}
        if update is not None:
            summary[w]["valid_ppl_common"] = mean_sd([at_update(r, update)["ppl"] for r in by[w]])
            summary[w]["valid_nll_common"] = mean_sd([at_update(r, update)["nll_loss"] for r in by[w]])
    if update is not None:
        diffs = [at_update(p, update)["ppl"] - at_update(s, update)["ppl"]
                 for p, s in zip(sorted(by["plugin"], key=lambda r: r["seed"]),
                                 sorted(by["stock"], key=lambda r: r["seed"]))]
        summary["ppl_difference_common"] = mean_sd(diffs)
        summary["verdict"] = verdict(summary, update, len(args.seeds))
    return summary


def verdict(summary, update, n_seeds) -> str:
    """Is the plugin's valid perplexity at the last common update within seed-to-seed noise of stock's?

    The runs of one seed see the same batches in the same order, so the test is
    paired: the mean over seeds of (plugin - stock) against two standard errors
    of that mean (the spread of the per-seed differences / sqrt(seeds))."""
    (p, sp), (s, ss) = summary["plugin"]["valid_ppl_common"], summary["stock"]["valid_ppl_common"]
    if n_seeds < 2:
        return (f"valid ppl at update {update}: plugin {p:.2f}, stock {s:.2f} (one seed: no noise estimate; "
                "run with --seeds 1 2 3 to judge whether the difference is noise)")
    diff, sd_diff = summary["ppl_difference_common"]
    noise = 2 * sd_diff / math.sqrt(n_seeds)
    if abs(diff) <= noise:
        word = "within noise"
    else:
        word = "plugin lower (better)" if diff < 0 else "plugin higher (worse)"
    return (f"valid ppl at update {update} over {n_seeds} seeds: plugin {p:.2f} ± {sp:.2f}, stock {s:.2f} ± "
            f"{ss:.2f} (mean ± sd); paired difference plugin - stock {diff:+.2f} ± {sd_diff:.2f}, noise "
            f"(2 standard errors of its mean) {noise:.2f}: {word}")


def fmt(value, sd=None, spec=".2f", suffix=""):
    if value is None:
        return "-"
    text = format(value, spec) + suffix
    if sd is not None:
        text += f" ± {format(sd, spec)}"
    return text


def fmt_mem(value, sd=None):
    if value is None:
        return "-"
    return fmt(value / 2 ** 20, None if sd is None else sd / 2 ** 20, ".0f", " MiB")


def ratio(summary, metric, spec=".3f"):
    p, s = summary["plugin"][metric][0], summary["stock"][metric][0]
    return format(p / s, spec) if p and s else ""


def markdown(summary, args, runs) -> str:
    P, S = summary["plugin"], summary["stock"]
    plugin_arch, stock_arch, _ = PAIRS[args.arch]
    n = len(args.seeds)
    mem_kind = runs[0].get("peak_memory_kind") or "peak memory"
    rows = [
        ("parameters", fmt(P["params"][0] / 1e6, None, ".2f", "M"), fmt(S["params"][0] / 1e6, None, ".2f", "M"),
         ratio(summary, "params")),
        ("updates", fmt(*P["updates"], ".0f"), fmt(*S["updates"], ".0f"), ratio(summary, "updates")),
        ("training time", fmt(*P["train_minutes"], ".1f", " min"), fmt(*S["train_minutes"], ".1f", " min"), ""),
        ("train tokens/s", fmt(*P["tokens_per_s"], ".0f"), fmt(*S["tokens_per_s"], ".0f"),
         ratio(summary, "tokens_per_s")),
        (mem_kind, fmt_mem(*P["peak_memory_bytes"]), fmt_mem(*S["peak_memory_bytes"]),
         ratio(summary, "peak_memory_bytes")),
        ("train nll_loss (last log interval)", fmt(*P["train_nll_loss"], ".3f"), fmt(*S["train_nll_loss"], ".3f"),
         ""),
        ("valid nll_loss at the end", fmt(*P["valid_nll_loss"], ".3f"), fmt(*S["valid_nll_loss"], ".3f"), ""),
        ("valid perplexity at the end", fmt(*P["valid_ppl"]), fmt(*S["valid_ppl"]), ratio(summary, "valid_ppl")),
    ]
    if summary["common_update"] is not None:
        rows.append((f"valid perplexity at update {summary['common_update']} (both)", fmt(*P["valid_ppl_common"]),
                     fmt(*S["valid_ppl_common"]), ratio(summary, "valid_ppl_common")))
    if not args.no_bleu:
        subset = runs[0].get("subset", args.gen_subset)
        rows.append((f"BLEU ({subset}, beam {args.beam}, tokenized)", fmt(*P["bleu"]), fmt(*S["bleu"]), ""))
        rows.append(("generation output tokens/s (fairseq-generate)", fmt(*P["gen_tokens_per_s"], ".0f"),
                     fmt(*S["gen_tokens_per_s"], ".0f"), ratio(summary, "gen_tokens_per_s")))
    budget = f"{args.max_update} updates each" if args.max_update else f"{args.minutes / 2:g} min of training each"
    device = (f"{args.ngpus} GPU(s), {args.precision}" if args.ngpus
              else f"CPU, {args.threads} thread(s) per process" if args.threads else "CPU")
    head = [f"attn_plugin `{plugin_arch}` vs stock fairseq `{stock_arch}`: {budget}, {device}, "
            f"seed{'s' if n > 1 else ''} {' '.join(map(str, args.seeds))}"
            + (" (mean ± sd over seeds)" if n > 1 else ""), "",
            f"| | attn_plugin ({plugin_arch}) | stock fairseq ({stock_arch}) | plugin / stock |",
            "|---|---|---|---|"]
    lines = head + [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    if summary.get("verdict"):
        lines += ["", summary["verdict"]]
    return "\n".join(lines)


def plot(runs, path: Path, title: str):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CompareError("plotting needs matplotlib (pip install matplotlib); the table and JSON are "
                           "written") from None
    colors = {"plugin": "tab:blue", "stock": "tab:orange"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in runs:
        curve = run["valid_curve"]
        if not curve:
            continue
        label = f"{LABEL[run['model']]} seed {run['seed']}"
        style = dict(color=colors[run["model"]], marker="o", markersize=3, linewidth=1.4, label=label,
                     linestyle="-" if run["seed"] == runs[0]["seed"] else "--")
        axes[0].plot([v["num_updates"] for v in curve], [v["nll_loss"] for v in curve], **style)
        axes[1].plot([v["train_seconds"] / 60 for v in curve], [v["nll_loss"] for v in curve], **style)
    for ax, xlabel in zip(axes, ("updates", "training time (min, validation included)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("valid nll_loss (base 2; perplexity = 2^loss)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title.replace("`", ""), fontsize=10)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".partial.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def write_atomic(path: Path, text: str):
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    data = prepare_bundled(args.bundled_workdir.resolve()) if args.bundled else args.data.resolve()
    src, tgt, joined, subset = inspect_data(data, args.gen_subset)
    name = "bundled" if args.bundled else data.name
    workdir = (args.workdir or REPO / "runs" / "compare_baselines" / f"{name}_{args.arch}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    plugin_arch, stock_arch, _ = PAIRS[args.arch]
    budget = f"{args.max_update} updates" if args.max_update else f"{args.minutes / 2:g} min"
    log(f"comparing {plugin_arch} (attn_plugin) with {stock_arch} (stock fairseq) on {data} ({src}-{tgt}); "
        f"{budget} of training each, seeds {' '.join(map(str, args.seeds))}; workdir {workdir}")
    log(f"same schedule: plugin eq. 3 with --lr-scale {args.lr_scale:g}, warmup {args.warmup_updates}; "
        f"stock inverse_sqrt --lr {peak_lr(args):.6g} --warmup-init-lr {warmup_init_lr(args):.6g}")
    runs, commands = [], {}
    for i, seed in enumerate(args.seeds):
        order = MODELS if i % 2 == 0 else MODELS[::-1]
        for which in order:
            tag = f"{which} seed {seed}"
            run_dir = workdir / f"{which}-seed{seed}"
            cmd = train_command(which, args, data, joined, seed, run_dir)
            commands[f"{which}-seed{seed}"] = cmd
            log(f"training {tag} ({plugin_arch if which == 'plugin' else stock_arch}); log: {run_dir / 'train.log'}")
            stats = run_training(which, seed, cmd, run_dir, tag, child_env(args))
            log(f"  {tag}: {stats.get('updates')} updates in {stats.get('train_seconds', 0) / 60:.1f} min, "
                f"{stats['tokens'] / max(stats['step_seconds'], 1e-9):.0f} train tokens/s")
            gen = None if args.no_bleu else run_generation(args, data, run_dir, subset, tag)
            runs.append(summarize_run(which, seed, stats, gen))
    summary = summarize(runs, args)
    table = markdown(summary, args, runs)
    result = {"data": str(data), "pair": f"{src}-{tgt}", "arch": args.arch, "plugin_arch": plugin_arch,
              "stock_arch": stock_arch, "budget": {"max_update": args.max_update, "minutes_per_model":
                                                   args.minutes / 2 if args.minutes else None},
              "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "stock_peak_lr": peak_lr(args), "stock_warmup_init_lr": warmup_init_lr(args), "commands": commands, "runs": runs, "summary": summary,
              "table": table}
    write_atomic(workdir / "comparison.json", json.dumps(result, indent=2) + "\n")
    write_atomic(workdir / "comparison.md", table + "\n")
    print()
    print(table, flush=True)
    print()
    log(f"wrote {workdir / 'comparison.md'} and {workdir / 'comparison.json'}")
    plot(runs, workdir / "comparison.png", table.splitlines()[0])
    log(f"wrote {workdir / 'comparison.png'}")


# ---------------------------------------------------------------------------
# The training worker: fairseq-train in this process, with timing and memory
# ---------------------------------------------------------------------------
def fairseq_train_worker(stats_path: str, fairseq_argv):
    """Run fairseq-train with ``fairseq_argv``; write to ``stats_path`` the time
    spent in train steps (forward, backward, optimizer) and their target tokens,
    the parameter count, peak memory and every validation's unsmoothed losses
    with the training time at which it ran."""
    import logging
    import resource

    import torch
    from fairseq.trainer import Trainer

    import fairseq_cli.train as fairseq_train

    stats = {"tokens": 0, "step_seconds": 0.0, "all_tokens": 0, "all_step_seconds": 0.0, "steps": 0,
             "valid": [], "params": None, "updates": 0}
    clock = {"start": None}

    init, train_step, get_valid_stats = Trainer.__init__, Trainer.train_step, fairseq_train.get_valid_stats

    def patched_init(self, cfg, task, model, criterion, *a, **kw):
        init(self, cfg, task, model, criterion, *a, **kw)
        stats["params"] = sum(p.numel() for p in model.parameters())

    def patched_train_step(self, samples, *a, **kw):
        if clock["start"] is None:
            clock["start"] = time.perf_counter()
        start = time.perf_counter()
        out = train_step(self, samples, *a, **kw)
        if self.cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        tokens = sum(int(s.get("ntokens", 0)) for s in samples if isinstance(s, dict))
        stats["steps"] += 1
        stats["all_tokens"] += tokens
        stats["all_step_seconds"] += seconds
        if stats["steps"] > WARMUP_STEPS:
            stats["tokens"] += tokens
            stats["step_seconds"] += seconds
        stats["updates"] = self.get_num_updates()
        return out

    def patched_get_valid_stats(cfg, trainer, valid_stats, *a, **kw):
        out = get_valid_stats(cfg, trainer, valid_stats, *a, **kw)
        stats["valid"].append({
            "num_updates": trainer.get_num_updates(),
            "loss": float(out.get("loss", float("nan"))),
            "nll_loss": float(out.get("nll_loss", float("nan"))),
            "ppl": float(out.get("ppl", float("nan"))),
            "train_seconds": time.perf_counter() - clock["start"] if clock["start"] else 0.0,
        })
        return out

    Trainer.__init__, Trainer.train_step = patched_init, patched_train_step
    # fairseq-train's log format (an import above may have configured logging already)
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        level=os.environ.get("LOGLEVEL", "INFO").upper(), stream=sys.stdout, force=True)
    fairseq_train.get_valid_stats = patched_get_valid_stats
    sys.argv = ["fairseq-train", *fairseq_argv]
    try:
        fairseq_train.cli_main()
    finally:
        if stats["steps"] <= 2 * WARMUP_STEPS:  # too short to leave warm-up out
            stats["tokens"], stats["step_seconds"] = stats["all_tokens"], stats["all_step_seconds"]
            stats["tokens_note"] = "all train steps"
        else:
            stats["tokens_note"] = f"train steps after the first {WARMUP_STEPS}"
        stats["train_seconds"] = time.perf_counter() - clock["start"] if clock["start"] else 0.0
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            stats["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
            stats["peak_memory_kind"] = "peak CUDA memory allocated (per GPU)"
        else:
            stats["peak_memory_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            stats["peak_memory_kind"] = "peak memory (process RSS)"
        rank = os.environ.get("RANK")
        path = Path(stats_path if rank is None or os.environ.get("WORLD_SIZE", "1") == "1"
                    else f"{stats_path}.rank{rank}")
        path.write_text(json.dumps(stats))


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # stops the running training or generation too (see run_training)


def entry():
    if len(sys.argv) > 2 and sys.argv[1] == WORKER:
        sys.path.insert(0, str(REPO))
        fairseq_train_worker(sys.argv[2], sys.argv[3:])
        # Training is over and its stats are written. Skip the interpreter's
        # teardown: in this patched worker it intermittently aborted
        # ("terminate called without an active exception", about 1 run in 8 on CPU)
        # after all the work was done, which failed a finished run.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    sys.path.insert(0, str(REPO))
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        main()
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr, flush=True)
        sys.exit(130)


if __name__ == "__main__":
    entry()
