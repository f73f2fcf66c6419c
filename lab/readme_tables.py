"""The measured numbers of README.md and docs/*.md, made from the committed results files.

Every table a document shows between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` is
written here from ``recipes/results/`` and ``benchmarks/results/`` (each file with the command,
commit, machine and date that made its numbers), from the paper's numbers (``training_cost``) or
from :data:`lab.faults.CASES`; nothing between the markers is typed by hand.

    python scripts/readme_tables.py           # rewrite the tables of README.md and docs/*.md
    python scripts/readme_tables.py --check   # exit 1 if any document differs from the files (a test runs this)
"""
import argparse
import glob
import json
import re
import shlex
import statistics
import subprocess
from pathlib import Path

from attn_kit.planning import prep_cost
from .bench.data_prep import planning_table
from attn_kit.planning import training_cost as planned_cost
from attn_kit.cli import ArgumentParser, UserError
from attn_kit.planning.cost import GPUS, describe_table2, hours_text, model_shape, paper_updates
from attn_kit.inference.ctranslate2 import PARALLEL_CALL
from attn_kit.metrics.bleu import T2T_2018_NORMALIZES
from attn_kit.recipes import config
from attn_kit.recipes.table3 import markdown
from attn_kit.recipes.wmt14_data import PAIRS, TRAIN_TO_NEWSTEST_BYTES
from attn_kit.checkout import REPO
from .bench.harness import markdown_table as table
from .calibration import fits_of
from .faults import CASES

README = REPO / "README.md"
DOCS = REPO / "docs"
RECIPES = REPO / "recipes" / "results"
BENCH = REPO / "benchmarks" / "results"


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def loaded(folder: Path, pattern: str):
    """(the paths, the results files) of ``pattern`` in ``folder``, by name."""
    paths = sorted(glob.glob(str(folder / pattern)))
    return paths, [load(p) for p in paths]


def source(*paths) -> str:
    names = ", ".join(f"`{Path(p).parent.parent.name}/{Path(p).parent.name}/{Path(p).name}`" for p in paths)
    return f"\n\nFrom {names} (command, commit, machine and date inside)."


def mean_sd(values):
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return f"{values[0]:.2f}" if values else "-"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def minutes(seconds) -> str:
    return f"{int(seconds // 60)}m{int(round(seconds % 60)):02d}s" if seconds is not None else "-"


# ---------------------------------------------------------------------------------------------- the bundled run
def t2t_scores(r: dict):
    """(BLEU by t2t's get_ende_bleu.sh of 2017, the paper's; of 2018) of a results.json, None where not
    scored so. Runs from before both were kept have only ``bleu_t2t``, whose protocol may name the 2018 one."""
    if "bleu_t2t_2018" in r:
        return r.get("bleu_t2t"), r["bleu_t2t_2018"]
    if r.get("bleu_t2t_protocol", "").startswith("tensor2tensor get_ende_bleu.sh: replace-unicode"):
        return None, r.get("bleu_t2t")
    return r.get("bleu_t2t"), None


def t2t_2018_head(results) -> str:
    """The 2018 script's column heading for ``results`` (results.json dicts), saying so when any was
    scored before the kit normalized only the translations, as the script does."""
    old = any(t2t_scores(r)[1] is not None and T2T_2018_NORMALIZES not in r.get("bleu_t2t_protocol", "")
              for r in results)
    return "t2t's 2018 script" + (" (scored with the reference normalized too; the script normalizes only the "
                                  "translations)" if old else "")


def fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def bundled() -> str:
    """The main job, `--bundled`, over seeds: BLEU every way, updates, time per stage."""
    paths, runs = loaded(RECIPES, "bundled_seed*.json")
    if not paths:
        return "(no bundled results filed yet)"
    rescored = sorted(glob.glob(str(RECIPES / "bundled_rescored_seed*.json")))
    for path in rescored:  # the same run made again and scored by both t2t scripts: its 2017 score fills in
        again = load(path)["result"]
        for run in runs:  # only where it is the same translations: the same seed and scores
            r = run["result"]
            if (r["seed"] == again["seed"] and t2t_scores(r)[1] == again["bleu_t2t_2018"]
                    and all(r.get(k) == again.get(k) for k in ("sacrebleu", "bleu_compound_split"))):
                run["result"] = dict(r, bleu_t2t=again["bleu_t2t"], bleu_t2t_2018=again["bleu_t2t_2018"])
    rows = []
    for run in runs:
        r = run["result"]
        quiet = run.get("quiet_machine", True)
        times = ([minutes(r.get("stage_seconds", {}).get("train")), minutes(r.get("total_seconds"))] if quiet
                 else ["(not timed: run side by side)", ""])
        rows.append([r["seed"], f"{r['sacrebleu']:.2f}", *map(fmt, t2t_scores(r)),
                     f"{r.get('bleu_compound_split', float('nan')):.2f}", r["updates"], *times])
    columns = [[run["result"].get("sacrebleu") for run in runs],
               *zip(*(t2t_scores(run["result"]) for run in runs)),
               [run["result"].get("bleu_compound_split") for run in runs]]
    rows.append(["mean ± sd", *(mean_sd(column) for column in columns), "", "", ""])
    head = ["seed", "sacreBLEU", "BLEU, paper's protocol (t2t, 2017 script)",
            t2t_2018_head(run["result"] for run in runs),
            "BLEU, fairseq's compound split", "updates", "train", "all stages"]
    first = runs[0]
    note = (f"\n\nMachine: {first['machine']}; {first['result'].get('threads')} threads; "
            f"date {first['date']}, commit {first['commit'][:12]}.")
    timings, timed = loaded(RECIPES, "bundled_timing_*.json")
    for t in timed:  # the same amount of work timed on another machine class
        r = t["result"]
        size = r.get("model_size") or {}
        note += (f" The same {r['updates']} updates on {t['machine']} ({r.get('threads')} threads, commit "
                 f"{t['commit'][:7]}, P_drop {size.get('p_drop')}): train {minutes(r['stage_seconds']['train'])}, "
                 f"all stages {minutes(r['total_seconds'])}.")
    machines, others = loaded(RECIPES, "bundled_machine_*.json")
    groups = {}  # the same command and seed on another CPU type: what "the same number" covers
    for m in others:  # one sentence per CPU name, seed and thread count, its runs oldest first
        key = (m["machine"].split(", Linux")[0], m["result"]["seed"], m["result"].get("threads"))
        groups.setdefault(key, []).append(m)
    for (machine, seed, threads), group in groups.items():
        group.sort(key=lambda m: (m["date"], commit_time(m["commit"])))
        r = group[-1]["result"]
        same = next((run["result"] for run in runs if run["result"]["seed"] == seed), None)
        year = "2017" if t2t_scores(r)[0] is not None else "2018"
        t2t = lambda run: fmt(t2t_scores(run)[0 if year == "2017" else 1])  # noqa: E731
        scores = sorted({m["result"]["sacrebleu"] for m in group})
        shas = [m["commit"][:7] for m in group]
        commits = " and ".join([", ".join(shas[:-1]), shas[-1]] if len(shas) > 1 else shas)
        bleu = (f"sacreBLEU {scores[0]:.2f} at each commit" if len(group) > 1 and len(scores) == 1
                else "sacreBLEU " + ", ".join(f"{m['result']['sacrebleu']:.2f}" for m in group))
        note += (f" The same command with seed {seed} on {machine} ({threads} threads, commit"
                 f"{'s' if len(group) > 1 else ''} {commits}): {bleu}, t2t ({year} script) {t2t(r)}"
                 + (f" (against {same['sacrebleu']:.2f} and {t2t(same)} above: another CPU type rounds "
                    "differently, within the seeds' spread)" if same else "") + ".")
    return table(head, rows) + note + source(*paths, *rescored, *timings, *machines)


def bundled_sweep() -> str:
    """The sweep that chose the bundled settings: valid BLEU by configuration and update."""
    paths, runs = loaded(RECIPES, "bundled_sweep.*.json")
    if not paths:
        return "(no sweep filed yet)"
    updates = sorted({int(u) for run in runs for u in run["result"]["valid_bleu_avg5_by_update"]})
    rows = []
    for run in runs:
        r = run["result"]
        curve = r["valid_bleu_avg5_by_update"]
        train = r.get("stage_seconds", {}).get("train")
        per_update = f"{train / r['updates']:.2f}" if train and r.get("updates") else "-"
        rows.append([f"`{run['name']}`", f"`{r['flags']}`" if r["flags"] else f"(the defaults of {run['commit'][:7]})", per_update,
                     *(curve.get(str(u), "-") for u in updates)])
    head = ["config", "recipe options", "s/update (1 thread, 2 runs side by side)",
            *(f"valid BLEU @{u}" for u in updates)]
    columns = sorted({k for run in runs for k in run["result"]["valid_bleu_final"]})
    dec = [[f"`{run['name']}`", *(run["result"]["valid_bleu_final"].get(k, "-") for k in columns)] for run in runs]
    return (table(head, rows) + "\n\nAt the last update, by checkpoint (avg5/avg10 = average of the last 5/10, "
            "every 100 updates; last = the final model) and decoding (valid sacreBLEU):\n\n"
            + table(["config", *columns], dec)
            + source(*paths))


# ---------------------------------------------------------------------------------------------- your corpus
# recipes/parallel.sh options that name the corpus and the work directory (what every run of a comparison shares)
CORPUS_OPTIONS = ("--src", "--tgt", "--train", "--valid", "--test", "--workdir")


def recipe_options(command: str) -> str:
    """A recipes/parallel.sh command line without the script and the corpus options."""
    words, out = shlex.split(command), []
    words = iter(words[words.index("recipes/parallel.sh") + 1:] if "recipes/parallel.sh" in words else words)
    for word in words:
        if word in CORPUS_OPTIONS:
            next(words, None)  # and its value
        else:
            out.append(word)
    return " ".join(out)


def parallel_presets() -> str:
    """recipes/parallel.sh on a corpus other than the bundled one (Multi30k EN-DE) under a time budget:
    the paper's settings against --preset small (the runs that chose the preset's values)."""
    paths = sorted(glob.glob(str(RECIPES / "parallel_multi30k_*.json")), key=lambda p: (load(p)["date"], p))
    if not paths:
        return "(not filed yet)"
    rows, runs = [], [load(p) for p in paths]
    for run in runs:
        r = run["result"]
        train = r.get("stage_seconds", {}).get("train")
        loads = run.get("load_average", {})
        rows.append([f"`{recipe_options(run['command'])}`", r.get("threads") or "torch's (all cores)", r["updates"],
                     minutes(train),
                     f"{train / r['updates']:.2f}" if train and r.get("updates") else "-", f"{r['sacrebleu']:.2f}",
                     *map(fmt, t2t_scores(r)),
                     " → ".join(f"{loads[k][0]:.2f}" for k in ("before", "after") if k in loads) or "-"])
    first = runs[0]
    machines, dates = sorted({run["machine"] for run in runs}), sorted({run["date"] for run in runs})
    commits = sorted({run["commit"][:7] for run in runs})
    return (table(["recipe options (after the corpus's)", "threads", "updates", "train", "s/update", "sacreBLEU",
                   "BLEU, paper's protocol (t2t, 2017 script)", t2t_2018_head(run["result"] for run in runs),
                   "load average (1 min) before → after"], rows)
            + f"\n\nMulti30k task 1 EN-DE (`--train train --valid val --test test_2016_flickr`: "
              f"{first['result'].get('test_sentences')} test sentences), one run after the other on "
              f"{'; '.join(machines)}, date {', '.join(dates)}, commit {', '.join(commits)}; the load is `uptime`'s "
              "1-minute average (other work on the same 2 cores slows a run down and so shortens a time budget's "
              "reach)." + source(*paths))


# ---------------------------------------------------------------------------------------------- batches
def tokens_per_update() -> str:
    path = RECIPES / "tokens_per_update_newstest_en_de.json"
    if not path.exists():
        return "(not filed yet)"
    r = load(path)["result"]
    rows = [[label.format(s["budget_per_update"]), f"{s['max_tokens']} x {s['batches_per_update']}",
             f"{s['source_per_update']:.0f}", f"{s['target_per_update']:.0f}", f"{s['padded_per_update']:.0f}"]
            for s, label in ((r["at_max_tokens"], "{} (the paper's number taken as fairseq's cap)"),
                             (r["closest_to_target"], "{} (the recipes round it to 28000)"))]
    return table(["padded tokens per update", "--max-tokens x GPUs", "real source tokens", "real target tokens",
                  "padded"], rows) + source(path)


# ---------------------------------------------------------------------------------------------- benchmarks
def cpu_benchmarks() -> str:
    train = [BENCH / "cpu2core_train_fp32.json", BENCH / "cpu2core_train_fp32_run2.json"]
    gen = [BENCH / "cpu2core_generate_fp32.json", BENCH / "cpu2core_generate_fp32_run2.json"]
    t, g = [load(p)["results"] for p in train], [load(p)["results"] for p in gen]
    rows = [[f"{shape} ({t[0][shape]['plugin']['params'] / 1e6:.1f}M)",
             " / ".join(f"{x[shape]['ratio_tokens_per_s']:.3f}" for x in t), f"{t[-1][shape]['ratio_peak_bytes']:.3f}",
             " / ".join(f"{x[shape]['ratio_sentences_per_s']:.3f}" for x in g),
             f"{g[-1][shape]['ratio_peak_bytes']:.3f}"] for shape in ("small", "base", "big")]
    big30 = load(BENCH / "cpu2core_train_fp32_big_1step_x30.json")["results"]["big"]
    trials = big30["trial_ratios"]
    se = statistics.stdev(trials) / len(trials) ** 0.5
    return (table(["shape", "train tokens/s (run 1 / run 2)", "train peak memory", "beam-4 sentences/s (run 1 / run 2)",
                   "generation peak memory"], rows)
            + f"\n\nBig, {len(trials)} trials of one training step each: median ratio "
              f"{big30['ratio_tokens_per_s']:.3f}, mean {statistics.mean(trials):.3f} ± {se:.3f} (standard error)."
            + source(*train, *gen, BENCH / "cpu2core_train_fp32_big_1step_x30.json"))


def gpu_benchmarks() -> str:
    main = load(BENCH / "h100_train_bf16.json")
    big400 = load(BENCH / "h100_train_bf16_big_400x64.json")["results"]["big"]
    auto = load(BENCH / "h100_train_bf16_autocast.json")["results"]
    gen = load(BENCH / "h100_generate_bf16.json")["results"]
    env = main["environment"]
    rows = [[label, r["batch"]["target_tokens"], f"{r['plugin']['tokens_per_s']:.0f}",
             f"{r['stock']['tokens_per_s']:.0f}", f"**{r['ratio_tokens_per_s']:.3f}**", f"{r['ratio_peak_bytes']:.3f}",
             f"{100 * bench_mfu(r, 'plugin'):.1f}%", f"{100 * bench_mfu(r, 'stock'):.1f}%"]
            for label, r in [("base", main["results"]["base"]), ("big", main["results"]["big"]),
                             ("big, 400 sentences", big400)]]
    out = table(["shape", "target tokens/step", "plugin tok/s", "stock tok/s", "ratio", "peak memory ratio",
                 "plugin MFU", "stock MFU"], rows)
    out += (f"\n\n{env['gpu']}, bf16, measured bf16 matmul rate {env['matmul_tflops']:.0f} TFLOP/s; MFU on the "
            "batch's real tokens (its padded positions' utilization times its real share: sources and targets "
            "70-100% of the batch's length). "
            f"Under `--mixed autocast` (fp32 weights): ratio {auto['base']['ratio_tokens_per_s']:.3f} (base), "
            f"{auto['big']['ratio_tokens_per_s']:.3f} (big). Beam-4 generation, 128 sentences: "
            f"base {gen['base']['ratio_sentences_per_s']:.3f}x, big {gen['big']['ratio_sentences_per_s']:.3f}x "
            f"stock's sentences/s at {gen['base']['ratio_peak_bytes']:.2f}x / {gen['big']['ratio_peak_bytes']:.2f}x "
            f"its peak memory; best hypotheses identical for {gen['base']['same_best_hypothesis']} (base) and "
            f"{gen['big']['same_best_hypothesis']} (big) sentences (bf16 rounding differs between the two "
            "implementations, so near-ties can flip).")
    return out + source(BENCH / "h100_train_bf16.json", BENCH / "h100_train_bf16_big_400x64.json",
                        BENCH / "h100_train_bf16_autocast.json", BENCH / "h100_generate_bf16.json")


def gpu_recipe_path() -> str:
    """The recipes' own GPU path (fairseq-train under the plugin's bf16 autocast) on one GPU: what ran,
    and the attention-backend comparison that found cuDNN attention's per-shape cost."""
    path = BENCH / "h200_recipe_train_path.json"
    r = load(path)
    runs, cmp = r["recipe_runs"], r["attention_backends_15_updates_base"]
    rows = [[f"{name}: recipe, cuDNN attention on, 1-minute budget", f"{run['train']['num_updates']:.0f}", f"{run['train']['wps']:.0f}",
             f"{run['train']['ups']:.2f}", f"{run['gpu_utilization_during_train']['median_percent']:.0f}%",
             f"{run['train']['loss']:.3f}"] for name, run in runs.items()]
    gpu = cmp["gpu_utilization"]
    for key, label, util in [("bf16_autocast_cudnn_attention_on", "base: bf16 autocast, cuDNN attention on (torch's default)",
                              f"{gpu['bf16_cudnn_on']['median_percent']:.0f}%"),
                             ("fp32", "base: fp32", f"{gpu['fp32']['median_percent']:.0f}%"),
                             ("bf16_autocast_cudnn_attention_off", "base: bf16 autocast, cuDNN attention off", "-")]:
        t = cmp[key]
        rows.append([label, f"{t['num_updates']:.0f}", f"{t['wps']:.0f}", f"{t['ups']:.2f}", util, f"{t['loss']:.3f}"])
    bench = r["benchmark_loop_same_machine"]
    return (table(["run (--max-tokens 4000 --update-freq 7)", "updates", "target tokens/s", "updates/s",
                   "median GPU utilization", "train loss"], rows)
            + f"\n\n{r['machine'].split(' (')[0]}, torch {r['environment']['torch']}, the bundled corpus (short sentences). "
              f"The benchmark loop's one fixed batch shape trained base at {bench['base_plugin_tokens_per_s']:.0f} and big at "
              f"{bench['big_plugin_tokens_per_s']:.0f} target tokens/s on the same machine."
            + source(path, BENCH / "h200_train_bf16_autocast_64x64.json"))


GPU_CHECK = BENCH / "h200_gpu_check.json"
GPU_CHECK_THIRD = BENCH / "h200_gpu_check_3.json"  # a third session's two calls: what the first two missed
GPU_CHECK_THIRD_B = BENCH / "h200_gpu_check_4.json"


def real_share(run: dict) -> float:
    """The real (non-padding) share of the positions a GPU check run computed on: 1 - its ``padding_share``; in
    older files its real target tokens over the mean of its padded source and target positions, per second, at
    most 1 (a German target a little longer than its source can put it above)."""
    if "padding_share" in run:
        return 1 - run["padding_share"]
    return min(1.0, run["target_tokens_per_second"] / run["padded_tokens_per_second"])


def real_mfu(run: dict) -> float:
    """A GPU check run's model FLOP utilization on real tokens: its ``mfu``, or the older files' padded figure
    times :func:`real_share`."""
    return run["mfu"] if "mfu" in run else run["mfu_vs_measured_matmul"] * real_share(run)


def bench_mfu(r: dict, engine: str) -> float:
    """benchmarks/train_throughput.py's utilization of ``engine`` (plugin, stock) on real tokens: its ``mfu``,
    or the older files' padded figure times the batch's real share of target positions (sources alike)."""
    if "mfu" in r[engine]:
        return r[engine]["mfu"]
    b = r["batch"]
    return r[engine]["utilization"] * b["target_tokens"] / (b["sentences"] * b["max_length"])


def _gpu_run_row(r: dict, label: str) -> list:
    return [label, f"{r['max_tokens']} x {r['update_freq']}", r["optimizer"], f"{r['seconds_per_update']:.3f}",
            f"{r['target_tokens_per_second']:.0f}", f"{100 * real_mfu(r):.1f}%", f"{100 * (1 - real_share(r)):.1f}%",
            f"{r['peak_reserved_gib']:.1f}", f"{r['gpu_utilization_percent_median']:.0f}%"]


GPU_RUN_HEADER = ["run", "tokens per forward x forwards per update", "Adam", "s per update", "target tokens/s",
                  "model FLOP utilization (real tokens)", "padding", "peak reserved GiB", "GPU busy (nvidia-smi)"]
MFU_NOTE = ("model FLOP utilization: the model FLOPs of the real (non-padding) source and target tokens trained "
            "per second over the bf16 matmul rate measured in the same run; padding: the padded positions' share "
            "of those computed on (files from before the real tokens were counted apart: recomputed from their "
            "own target and padded tokens/s, the source taken as padded as the target, a share at most 1)")


def _gpu_canaries(r: dict) -> str:
    canaries = {model: entry["canary"] for model, entry in r["canary"].items()}
    return "; ".join(f"{model}: {c['seconds_per_update']:.3f} s per update over {c['updates']} updates, training "
                     f"{c['plan']['max_update']} updates predicted {c['predicted_seconds']['training'] / 3600:.1f} h "
                     f"(the whole run {c['predicted_seconds']['total'] / 3600:.1f} h)" for model, c in canaries.items())


def gpu_check_summary() -> str:
    """README: the recipe's training on one GPU as it was and as it is (benchmarks/gpu_check.sh)."""
    r = load(GPU_CHECK)
    runs = {x["name"]: x for x in r["sweep"]}
    rows = [_gpu_run_row(runs[name], label) for name, label in [
        ("base_4k_fairseq_adam", "base, before"), ("base_28k", "base, now"),
        ("big_4k_fairseq_adam", "big, before"), ("big_28k", "big, now")]]
    third = load(GPU_CHECK_THIRD)
    rows += [_gpu_run_row(x, f"big, now, --compile-layers (at {third['commit']})") for x in third["sweep"]
             if x["name"] == "big_28k_compile"]
    env = r["environment"]
    return (table(GPU_RUN_HEADER, rows)
            + f"\n\nOne {env['gpu']}, bf16 autocast, the paper's 28000 tokens per update on WMT-shaped synthetic "
              f"text; the bf16 matmul rate measured in the same run {env['measured_bf16_matmul_tflops']:.0f} TFLOP/s "
              f"(the compiled row: {third['environment']['measured_bf16_matmul_tflops']:.0f} TFLOP/s, another H200); "
              f"{MFU_NOTE}. The canaries: {_gpu_canaries(r)}." + source(GPU_CHECK, GPU_CHECK_THIRD))


def gpu_check() -> str:
    """docs/scaling.md: every run of the GPU check, the profile's top entries and what did not run."""
    r = load(GPU_CHECK)
    rows = [_gpu_run_row(x, x["name"]) for x in r["sweep"] if x.get("seconds_per_update")
            and not x["name"].endswith("_profile")]
    env, prof = r["environment"], r["profile"]
    cpu = ", ".join(f"{e['name']} {e['ms_per_update']:.1f} ms" for e in prof["top_cpu_total"][:8])
    gpu = ", ".join(f"{e['name'][:60]} {e['ms_per_update']:.1f} ms" for e in prof["top_gpu"][:6])
    failed = [x["name"] for x in r["sweep"] if not x.get("seconds_per_update")]
    runs = {x["name"]: x for x in r["sweep"]}

    def speedup(a, b):  # in target tokens per second (updates differ a little in their tokens)
        return f"{runs[b]['target_tokens_per_second'] / runs[a]['target_tokens_per_second']:.1f}x"

    fits = {f.model: f for f in fits_of(GPU_CHECK)}
    findings = (
        f"\n\nBefore (4K-token forwards, 7 per update, fairseq's Adam) to now (one 28K-token forward, attn_adam): "
        f"base {speedup('base_4k_fairseq_adam', 'base_28k')}, big {speedup('big_4k_fairseq_adam', 'big_28k')} "
        f"faster; of that the forward size (fairseq's Adam both ways) {speedup('base_4k_fairseq_adam', 'base_28k_fairseq_adam')}"
        f" and {speedup('big_4k_fairseq_adam', 'big_28k_fairseq_adam')}, attn_adam at 28K "
        f"{speedup('base_28k_fairseq_adam', 'base_28k')} and {speedup('big_28k_fairseq_adam', 'big_28k')}. "
        f"The fits of these runs (`attn_kit.planning.step_model`): a fixed {fits['base'].forward_seconds * 1e3:.0f} ms (base) "
        f"and {fits['big'].forward_seconds * 1e3:.0f} ms (big) per forward, then the arithmetic at "
        f"{fits['base'].efficiency:.0%} and {fits['big'].efficiency:.0%} of the matmul rate; memory "
        f"{fits['base'].bytes_per_token / 1e6:.2f} and {fits['big'].bytes_per_token / 1e6:.2f} MB per token of a forward.")
    return (table(GPU_RUN_HEADER, rows) + findings
            + f"\n\nOne {env['gpu']} ({env['gpu_memory_gib']:.0f} GiB), torch {env['torch']}, fairseq "
              f"{env['fairseq']}, measured bf16 matmul {env['measured_bf16_matmul_tflops']:.0f} TFLOP/s; "
              f"{r['notes']['what_ran']}"
            + f"\n\nCanaries (the recipe's `--canary`, 0.3 minutes each): {_gpu_canaries(r)}. "
              f"{r['notes']['canaries']}"
            + f"\n\nProfile of {prof['updates']} updates of `{prof['run']}` (torch.profiler, "
              f"{prof['wall_ms_per_update']:.0f} ms per update under it, {prof['kernel_launches_per_update']} kernel "
              f"launches per update), per update: host side {cpu}; GPU side {gpu}."
            + (f"\n\nNot measured: {', '.join(failed)} ({r['notes']['compile']}); skipped for time: "
               f"{', '.join(r['skipped'])}." if failed or r["skipped"] else "")
            + source(GPU_CHECK))


GPU_CHECK_REPEAT = BENCH / "h200_gpu_check_2.json"
GPU_CHECK_COMPILE = BENCH / "h200_gpu_check_compile.json"


def gpu_check_repeat() -> str:
    """docs/scaling.md: the GPU check run again (another H200, later commits): its runs beside the
    same-named runs of the first, and --compile-layers after its fix."""
    first = {x["name"]: x for x in load(GPU_CHECK)["sweep"]}
    again, compiled = load(GPU_CHECK_REPEAT), load(GPU_CHECK_COMPILE)
    runs = [x for x in again["sweep"] if x.get("seconds_per_update") and not x["name"].endswith("_profile")
            and not x["compile_layers"]]
    runs += [x for x in compiled["sweep"] if x.get("seconds_per_update")]
    rows = []
    for x in runs:
        label = f"{x['name']} (at {compiled['commit']})" if x["compile_layers"] else x["name"]
        before = first.get(x["name"], {}).get("seconds_per_update")
        rows.append(_gpu_run_row(x, label) + [f"{before:.3f}" if before and not x["compile_layers"] else "-"])
    plain = {x["name"]: x for x in runs if not x["compile_layers"]}

    def ratio(a, b):
        return f"{plain[a]['seconds_per_update'] / plain[b]['seconds_per_update']:.1f}x"

    notes, cnotes = again["notes"], compiled["notes"]
    return (table(GPU_RUN_HEADER + ["s per update in the first run"], rows)
            + f"\n\nOne {again['environment']['gpu']}, torch {again['environment']['torch']}, measured bf16 matmul "
              f"{again['environment']['measured_bf16_matmul_tflops']:.0f} and "
              f"{compiled['environment']['measured_bf16_matmul_tflops']:.0f} TFLOP/s; at commit {again['commit']}: "
              f"{notes['what_ran']} {notes['host_variance']} Within this run, before to now: base "
              f"{ratio('base_4k_fairseq_adam', 'base_28k')}, big {ratio('big_4k_fairseq_adam', 'big_28k')} faster. "
              f"--compile-layers at {again['commit']}: {notes['compile']} At {compiled['commit']}: "
              f"{cnotes['what_ran']} {cnotes['compile']} Skipped for time: {', '.join(again['skipped'])}."
            + source(GPU_CHECK_REPEAT, GPU_CHECK_COMPILE))


def gpu_check_third() -> str:
    """docs/scaling.md: the third GPU session (two calls on one H200): big with --compile-layers beside
    the earlier plain big runs, the model's own step beside stock fairseq's, both canaries at that commit."""
    first, third, third_b = load(GPU_CHECK), load(GPU_CHECK_THIRD), load(GPU_CHECK_THIRD_B)
    repeat = {x["name"]: x for x in load(GPU_CHECK_REPEAT)["sweep"]}
    earlier = {x["name"]: x for x in first["sweep"]}
    rows = [_gpu_run_row(x, f"{x['name']} (at {third['commit']})") for x in third["sweep"] if x.get("seconds_per_update")]
    rows += [_gpu_run_row(earlier["big_28k"], f"big_28k (at {first['commit'][:7]})"),
             _gpu_run_row(repeat["big_28k"], f"big_28k (at {load(GPU_CHECK_REPEAT)['commit']})")]
    bench = third["bench"]["base"]["result"]["results"]["base"]
    canaries = {**third["canary"], **third_b["canary"]}
    matmul = third["environment"]["measured_bf16_matmul_tflops"]
    parts = []
    for model in ("base", "big"):
        c = canaries[model]["canary"]
        p = c["predicted_seconds"]
        share = real_share(earlier[f"{model}_28k"])  # the same corpus and batching as the canary's
        mfu = c["mfu"] if "mfu" in c else c["model_tflops_per_second"] / matmul * share
        parts.append(f"{model} {c['seconds_per_update']:.3f} s per update, {c['tokens_per_second']['total']:.0f} target "
                     f"tokens/s, {mfu:.1%} of the measured matmul rate on real tokens (the padding of "
                     f"{model}_28k's batches, {1 - share:.1%}, taken out), "
                     f"{c['plan']['max_update']} updates of training predicted {p['training'] / 3600:.1f} h")
    notes = third["notes"]
    compiled = next(x for x in third["sweep"] if x["name"] == "big_28k_compile")
    plain = [earlier["big_28k"]["seconds_per_update"], repeat["big_28k"]["seconds_per_update"]]
    gain = sorted(t / compiled["seconds_per_update"] for t in plain)
    # time per padded position (both compute on the padding): the loop's fixed batch against the canary's
    # update, whose padded positions are its target tokens over the real share of base_28k's (the same batches)
    b = bench["batch"]
    loop_us = b["target_tokens"] / bench["plugin"]["tokens_per_s"] / (b["sentences"] * b["max_length"]) * 1e6
    base = canaries["base"]["canary"]
    padded_per_update = base["tokens_per_second"]["total"] * base["seconds_per_update"] / real_share(earlier["base_28k"])
    recipe_us = base["seconds_per_update"] / padded_per_update * 1e6
    trainer = 1 - loop_us / recipe_us
    return (table(GPU_RUN_HEADER, rows)
            + f"\n\nOne {third['environment']['gpu']}, torch {third['environment']['torch']}, measured bf16 matmul "
              f"{matmul:.0f} TFLOP/s. {notes['what_ran']}"
            + f"\n\nInstall: {notes['install']}"
            + f"\n\n`--compile-layers` makes big {gain[0]:.2f}x to {gain[1]:.2f}x faster than the plain layers; "
              f"{notes['compile']}"
            + f"\n\nThe model's own step (`benchmarks/train_throughput.py`): the plugin "
              f"{bench['plugin']['tokens_per_s']:.0f} target tokens/s at {bench_mfu(bench, 'plugin'):.1%} of the "
              f"matmul rate on real tokens, stock fairseq {bench['stock']['tokens_per_s']:.0f} (the plugin {bench['ratio_tokens_per_s']:.2f}x "
              f"as fast, at {bench['ratio_peak_bytes']:.2f}x the peak memory); {notes['bench']} Per padded position "
              f"(both compute on their padding) the loop spends {loop_us:.2f} us and the recipe's base canary below "
              f"{recipe_us:.2f} us, with a larger vocabulary in the loop: fairseq's trainer and the recipe's changing "
              f"batch shapes take about {trainer:.0%} of a base update ({trainer * base['seconds_per_update'] * 1e3:.0f} "
              f"ms of {base['seconds_per_update'] * 1e3:.0f}), the model's own step the rest."
            + f"\n\nCanaries at {third['commit']} (no --compile-layers): {'; '.join(parts)}. {notes['canaries']}"
            + f"\n\nNot measured: {notes['profile']}"
            + source(GPU_CHECK_THIRD, GPU_CHECK_THIRD_B))


def gpu_planning() -> str:
    """docs/scaling.md: base and big on one GPU and on eight, from attn_kit.planning.training_cost (the step
    model's fits of the GPU check; the all-reduce of eight estimated): a projection, not a measurement."""
    rows = []
    for arch in ("attn_paper_base", "attn_paper_big"):
        shape, updates = model_shape(arch), paper_updates(arch)
        for name, n, precision in [("H100", 1, "bf16"), ("H100", 8, "bf16"), ("A100", 1, "bf16"), ("A100", 8, "bf16"),
                                   ("P100", 8, "fp32")]:
            forward = planned_cost.forward_for(shape, 28000, n, name, precision)
            t = planned_cost.UpdateTime.of(shape, forward, name, precision, planned_cost.link_of(name, n, 1))
            rows.append([arch.replace("attn_paper_", ""), f"{n} x {name} ({precision})", f"{forward[0]} x {forward[1]}",
                         hours_text(updates * t.estimate), f"{updates * t.estimate * n / 3600:,.0f}",
                         f"{hours_text(updates * t.low)} - {hours_text(updates * t.high)}",
                         f"{t.allreduce / t.estimate:.0%}" if n > 1 else "-",
                         {"paper": "the paper's P100 rate + the measured per-forward cost", "measured": "the H200 fit",
                          "scaled": "the H200 fit, scaled to this GPU"}[t.prediction.estimate.calibration]])
    return (table(["model", "GPUs", "tokens per forward x forwards", "training, estimate", "GPU-hours", "range",
                   "all-reduce", "the estimate from"], rows)
            + "\n\nProjected by `attn_kit.planning.training_cost` (`python scripts/training_cost.py --gpu NAME --ngpus N` "
              "prints the same with each end's source, the layouts compared and the checkpoint interval) for the "
              "paper's 28000 tokens per update and updates (base 100K, big 300K); training only. The all-reduce of "
              "eight GPUs is the gradients' ring transfer over the GPU's own link (NVLink) at 50-80% of its datasheet "
              "bandwidth, added whole to the estimate: no multi-GPU run has been measured. On the P100s the paper's "
              "split, one forward of 3500 tokens each. The paper: base 12 hours, big 3.5 days on 8 P100s."
            + source(GPU_CHECK))



def hf_export() -> str:
    """docs/using-a-model.md: the bundled run exported to transformers (scripts/export_hf.py
    --compare-test-set), against the run itself on its whole test set."""
    path = RECIPES / "bundled_hf_export_amd_epyc.json"
    if not path.exists():
        return "(not measured yet)"
    r = load(path)["result"]
    n, g, b = r["sentences"], r["greedy_differing"], r["sacrebleu"]
    ids_off = n - r["token_ids_identical"]
    goal = r["greedy_identical_to_translate_beam1"] / n
    return (f"- *Token ids.* The exported tokenizer gives the run's token ids on {r['token_ids_identical']} of {n} "
            f"lines; the other {ids_off} are the vocabulary filter (below).\n"
            f"- *Greedy search from raw text.* `generate(..., num_beams=1)` gives `translate.py --beam 1`'s "
            f"translation on {r['greedy_identical_to_translate_beam1']} of {n} lines: {g['other_token_ids']} of the "
            f"other {n - r['greedy_identical_to_translate_beam1']} have other token ids, "
            f"{g['same_token_ids_translate_batches_or_stop_rule']} run to the length limit, which `translate.py` "
            "takes from the longest sentence of its batch and this comparison from each sentence. "
            + (f"**The goal of 99% of the lines from raw text is not reached ({goal:.1%})**, and all of the "
               "shortfall is the tokenizer's." if goal < 0.99 else "") + "\n"
            f"- *From the run's own token ids* (the exact pre-processing below), greedy `generate` gives fairseq's "
            f"greedy output on {r['greedy_from_run_ids_identical_to_fairseq_greedy']} of {n} lines (one sentence at "
            f"a time) and `translate.py --beam 1`'s on {r['greedy_from_run_ids_identical_to_translate_beam1']}.\n"
            f"- *Beam search.* With the run's own settings ({r['beam_run']['transformers']}, what the exported "
            f"generation config holds) {r['beam_run']['identical']} of {n} lines equal `translate.py`'s; the "
            f"paper's settings have no equivalent: {r['beam_paper']['transformers']} gives "
            f"`translate.py --beam 4 --gnmt-alpha 0.6`'s translation on {r['beam_paper']['identical']} lines.\n"
            f"- sacreBLEU: greedy {b['hf_greedy']:.2f} from raw text, {b['hf_greedy_run_ids']:.2f} from the run's ids "
            f"(`translate.py --beam 1`: {b['translate_beam1']:.2f}); the exported beam search {b['hf_beam_run']:.2f} "
            f"(`translate.py`: {b['translate_run']:.2f})." + source(path))


def decode_rules() -> str:
    """The paper's and fairseq's beam-search stopping rules on the bundled model (benchmarks/decode_rules.py)."""
    path = BENCH / "cpu2core_decode_rules_bundled_seed1.json"
    if not path.exists():
        return "(not measured yet)"
    run = load(path)
    r = run["result"]
    rows, notes = [], []
    for name, t in r["test_sets"].items():
        rows += [[name, decoding, f"{d['sacrebleu']:.2f}", f"{d['bleu_t2t']:.2f}", f"{d['bleu_t2t_2018']:.2f}",
                  f"{d['bleu_compound_split']:.2f}", f"{d['sentences_per_s']:.0f}"]
                 for decoding, d in t["decodings"].items() if "sacrebleu" in d]
        d = t["decodings"]
        speed = d["paper, t2t stop"]["sentences_per_s"] / d["paper, fairseq stop"]["sentences_per_s"]
        min0 = d.get("paper, t2t stop, --min-len 0")
        notes.append(f"{name[0].upper()}{name[1:]} ({t['sentences']} sentences): the two rules give the same "
                     f"translation for {t['same_output_t2t_vs_fairseq_stop']}; the paper's rule decodes at "
                     f"{speed:.2f}x the speed of fairseq's; `--print-alignment` takes "
                     f"{t['print_alignment_time_ratio']:.2f}x the time of the same decoding without it"
                     + (f"; `--min-len 0` (an empty translation allowed, as the paper's code) gives "
                        f"{min0['empty_outputs']} empty translation{'' if min0['empty_outputs'] == 1 else 's'} "
                        f"and changes {t['sentences'] - t['same_output_min_len_1_vs_0']} of {t['sentences']}, "
                        f"sacreBLEU {min0['sacrebleu'] - d['paper, t2t stop']['sacrebleu']:+.2f}" if min0 else ""))
    own = r["run_decoding"]
    own_text = (f"GNMT alpha {own['gnmt_alpha']:g}" if own.get("gnmt_alpha") is not None
                else f"fairseq lenpen {own.get('lenpen', 1):g}")
    return (table(["test set", "decoding", "sacreBLEU", "BLEU, t2t 2017 script",
                   t2t_2018_head({"bleu_t2t_2018": d["bleu_t2t_2018"]} for t in r["test_sets"].values()
                                 for d in t["decodings"].values() if "bleu_t2t_2018" in d),
                   "fairseq's compound split", "sentences/s"], rows)
            + f"\n\nThe run's own decoding: beam {own['beam']}, {own_text}, fairseq's rule; the paper's: beam 4, "
              f"GNMT alpha 0.6, input + 50. " + ". ".join(notes) + f". {run['machine']}, {r['threads']} threads, "
              f"median of {r['trials']} alternating trials (fairseq's own timer), date {run['date']}."
            + parsing_rules() + source(path, RECIPES / "wsj_smoke_beam_stop.json"))


def parsing_rules() -> str:
    """The WSJ smoke run decoded with each stopping rule (recipes/results/wsj_smoke_beam_stop.json)."""
    path = RECIPES / "wsj_smoke_beam_stop.json"
    if not path.exists():
        return ""
    r = load(path)["result"]
    return (f" The WSJ parsing smoke run (beam {r['t2t']['decoding']['beam']}, GNMT alpha 0.3): dev/test F1 "
            f"{r['t2t']['dev_f1']:.2f}/{r['t2t']['test_f1']:.2f} with the paper's rule, "
            f"{r['fairseq']['dev_f1']:.2f}/{r['fairseq']['test_f1']:.2f} with fairseq's, the same parses of the "
            f"test sentences ({r['same_test_outputs']}).")


def training_cost() -> str:
    """Table 2's cost recomputed from its footnote, beside the analytic count (attn_kit.planning.cost): computed
    from the paper's numbers, not measured, and kept here so that the docs say what the code computes."""
    gpus = table(["GPU", "bf16", "fp16", "fp32 (dense TFLOPS)"],
                 [(name, g.bf16 or "-", g.fp16, g.fp32) for name, g in GPUS.items()])
    return ("\n".join(describe_table2()) + "\n\nComputed by `python scripts/training_cost.py --table2` from the paper's "
            "numbers (Sec. 5.1-5.2, Table 2's footnote); the analytic count assumes 25000 real source and 25000 "
            "real target tokens per update (Sec. 5.1), the shared 37000-token vocabulary and 30-token sentences. The GPUs a "
            "wall-time estimate knows (`--gpu NAME`; vendor datasheets, dense):\n\n" + gpus)


# ---------------------------------------------------------------------------------------------- using a run
def translate_consistency() -> str:
    """scripts/translate.py --check-test-set on the bundled run: the recipe's test output reproduced."""
    path = RECIPES / "translate_consistency_bundled_seed1.json"
    if not path.exists():
        return "(not filed yet)"
    r = load(path)["result"]
    return (f"On the bundled model (seed 1), `python scripts/translate.py runs/wmt14_en_de_bundled --check-test-set` "
            f"gave {r['identical_lines']} of {r['sentences']} lines identical to the recipe's, sacreBLEU "
            f"{r['sacrebleu_translate']:.2f} against the recipe's {r['sacrebleu_recipe']:.2f}." + source(path))


# ---------------------------------------------------------------------------------------------- Table 3
def table3() -> str:
    """Table 3 at bundled scale (recipes/table3.sh --bundled), beside the paper's rows."""
    path = RECIPES / "table3_bundled.json"
    if not path.exists():
        return "(not filed yet)"
    run = load(path)
    r = run["result"]
    base = r["base"]
    scripts = {row.get("bleu_script", "2018") for row in r["rows"]}  # rows scored before 2017's was kept
    return (markdown(r) + f"\n\nBase of this scale: N={base['N']}, d_model={base['d_model']}, d_ff={base['d_ff']}, "
            f"h={base['h']}; {r['max_update']} updates per row (big {3 * r['max_update']}); BLEU by tensor2tensor's "
            f"get_ende_bleu.sh of {' and '.join(sorted(scripts))}; machine {run['machine']}, "
            f"date {run['date']}, commit {run['commit'][:7]}." + source(path))


# ---------------------------------------------------------------------------------------------- CTranslate2
def commit_time(sha: str) -> int:
    """When commit ``sha`` was made (seconds; 0 where git does not know it): orders runs filed the same day."""
    proc = subprocess.run(["git", "log", "-1", "--format=%ct", sha], cwd=REPO, capture_output=True, text=True)
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0


def cpu_name(run: dict) -> str:
    """The CPU model of a results file's machine ("AMD EPYC", "Intel Xeon")."""
    return run["machine"].split(",")[0].replace("(R)", "").replace(" Processor", "").strip()


def ctranslate2() -> str:
    """Beam-search throughput of CTranslate2 exports against the plugin under fairseq's generator, synthetic batch,
    one column pair per CPU filed (benchmarks/generate_throughput.py --ctranslate2, lab.bench.ctranslate2)."""
    paths, runs = loaded(BENCH, "cpu2core*_ctranslate2_fp32_int8.json")
    if not paths:
        return "(not filed yet)"
    first = runs[0]
    header = ["shape", "engine", *(f"{what}, {cpu_name(run)}" for run in runs for what in ("sent/s", "x plugin")),
              "same best hypothesis", "CTranslate2 model.bin"]
    rows = []
    for shape, r in first["results"].items():
        for name, e in r["engines"].items():
            row = [f"{shape} ({r['params'] / 1e6:.1f}M)" if name == "plugin" else "", name]
            for run in runs:
                o = run["results"][shape]["engines"][name]
                row += [f"{o['sentences_per_s']:.1f}",
                        f"**{o['ratio_sentences_per_s']:.2f}**" if "ratio_sentences_per_s" in o else "1"]
            same = sorted({run["results"][shape]["engines"][name].get("same_best_hypothesis", "") for run in runs})
            row += [", ".join(same), f"{e['model_bytes'] / 2 ** 20:.0f} MiB" if "model_bytes" in e else ""]
            rows.append(row)
    shape = next(iter(first["results"].values()))
    b, threads = shape["batch"], shape["threads"]
    machines = "; ".join(f"{cpu_name(run)}: {run['machine']}, date {run['date']}, commit {run['commit'][:7]}, "
                         f"CTranslate2 {run['environment'].get('ctranslate2')}, torch {run['environment']['torch']}"
                         for run in runs)
    return (table(header, rows)
            + f"\n\nBeam {b['beam']}, {b['sentences']} synthetic sentences of up to {b['max_length']} tokens, random "
              f"weights (seed {first['settings']['seed']}), every hypothesis exactly {b['output_tokens_per_sentence']} "
              f"tokens in every engine (so each runs the same decoder steps); median of {first['settings']['repeats']} "
              f"trials, engines in rotating order. `plugin`: fairseq's SequenceGenerator, {threads} torch threads; "
              f"`plugin, {threads} procs`: {threads} one-thread processes, each on 1/{threads} of the batch; "
              f"`ct2 TYPE`: one batch on {threads} threads (how `scripts/translate.py --engine ctranslate2` decodes "
              f"up to {PARALLEL_CALL} sentences); `ct2 TYPE, {threads} x 1 thread`: {threads} parts of the batch at "
              f"once, one thread each (how it decodes more). {machines}." + source(*paths))


def ctranslate2_run() -> str:
    """A trained run's test set: the recipe's fairseq-generate against CTranslate2 exports of its model,
    one block of rows per batch size filed (benchmarks/generate_throughput.py --ctranslate2 --run)."""
    paths = glob.glob(str(BENCH / "cpu2core*_ctranslate2_bundled_run_b*.json"))
    if not paths:
        return "(not filed yet)"
    paths, runs = zip(*sorted(((p, load(p)) for p in paths), key=lambda pr: pr[1]["results"]["batch_size"]))
    rows = [[str(r["batch_size"]) if name == "fairseq-generate" else "", name, f"{e['sentences_per_s']:.1f}",
             f"**{e['ratio_sentences_per_s']:.2f}**" if "ratio_sentences_per_s" in e else "1",
             e.get("same_output", ""), f"{e['sacrebleu']:.2f}" if "sacrebleu" in e else ""]
            for r in (run["results"] for run in runs) for name, e in r["engines"].items()]
    first, r = runs[0], runs[0]["results"]
    return (table(["batch", "engine", "sentences/s", "x fairseq-generate (median of trials)",
                   "same output as fairseq-generate", "sacreBLEU"], rows)
            + f"\n\nThe bundled run (`bash recipes/wmt14_en_de.sh --bundled`; its own sacreBLEU "
              f"{r.get('run_sacrebleu')}), its {r['sentences']} test sentences, beam {r['beam']}, {r['threads']} "
              f"threads; median of {first['settings']['repeats']} trials, engines in rotating order. "
              f"`fairseq-generate`: the recipe's generate command with that `--batch-size`, its rate from its own "
              f"\"Translated ... sentences/s\" line (beam search only, no start-up or loading); `ct2 TYPE`: the "
              f"run's model exported to CTranslate2 with that weight type, decoded by `scripts/translate.py --engine "
              f"ctranslate2`'s engine from the same source tokens in the same batches, rescoring included, batch "
              f"after batch on {r['threads']} threads; `ct2 TYPE, {r['threads']} x 1 thread`: {r['threads']} calls at "
              f"once, one thread each, every batch cut into calls of at most {PARALLEL_CALL} sentences that keep its "
              f"length limit (how the engine decodes more than {PARALLEL_CALL} sentences). "
              f"Machine {first['machine']}, date {first['date']}, commit {first['commit'][:7]}, CTranslate2 "
              f"{first['environment'].get('ctranslate2')}." + source(*paths))


# ---------------------------------------------------------------------------------------------- data preparation
def data_prep() -> str:
    """The WMT14 data stages measured at growing sizes (benchmarks/data_prep.py) and projected for
    WMT14 EN-DE and EN-FR on 2 and 16 cores, before and after the recipe's speed-ups, by the same
    function as the recipes' --dry-run (attn_kit.planning.prep_cost.project): each pair from the file
    measured on its own corpus where one is filed, else from EN-DE's."""
    path = BENCH / prep_cost.RESULTS.name
    if not path.exists():
        return "(not filed yet: benchmarks/results/cpu2core_data_prep.json)"
    run = load(path)
    fits = run["result"]["fits"]
    runs = {name: load(BENCH / prep_cost.results_path(name).name) for name in PAIRS
            if (BENCH / prep_cost.results_path(name).name).exists()}
    own = {name: (r["result"]["fits"], prep_cost.fitted_words_per_pair(r)) for name, r in runs.items()}

    def form(fit):  # a fitted CPU-seconds curve as the docs say it
        return f"{fit['c']:.0f} s + {fit['k'] * 1e6:.0f} s per million pairs" if "k" in fit else f"pairs^{fit['b']:.2f}"

    def growth(fits):
        return "; ".join(f"{part.replace('_', ' ')} " + ", ".join(
            f"{kind} {form(fits[f'cpu_{kind}'][part])}" for kind in ("serial", "parallel") if part in fits[f"cpu_{kind}"])
            for part in prep_cost.PARTS if part in fits["cpu_serial"] or part in fits["cpu_parallel"])

    def corpus_text(name, r):
        corpus, fitted = r["result"]["corpus"], prep_cost.fitted_words_per_pair(r)
        shape = "newstest's lengths" + (f", {corpus['long_share']:.0%} of its pairs joined as crawled long lines "
                                        f"with {corpus['noise']:.0%} of their words noise"
                                        if corpus.get("long_share") else "")
        news = "; ".join(f"{k.split(' / ')[1].rsplit(' ', 1)[1]}: {v['synthetic_types']} types after {v['tokens']} "
                         f"tokens, the news text {v['real_types']}"
                         for k, v in corpus["check"]["compared_at_real_size"].items() if "newstest" in k)
        pair = PAIRS[name]
        return (f"**{name.upper()}** ({prep_cost.results_path(name).name}): the corpus has "
                + (f"{fitted:.1f} words per pair ({shape}; WMT14 {name.upper()}'s training text: "
                   f"{pair.words_per_pair:.1f}, newstest2014's words per pair times its training split's bytes per "
                   f"pair over newstest2014's, {TRAIN_TO_NEWSTEST_BYTES[pair.tgt]:.2f}x)" if fitted else shape)
                + f"; its types where newstest2013+2014 ends: {news}. Fitted from "
                  f"{r['result']['fits']['fitted_from_pairs']:,} pairs on: {growth(r['result']['fits'])}. "
                  f"Measured with `--workers {r['result']['settings']['workers']}` and "
                  f"{r['result']['settings']['bpe_merges']} merges, BPE learned on every pair (wall seconds, CPU "
                  "seconds of the main process + the workers, peak memory of all the stage's processes, PSS), on "
                  f"{prep_cost.machine_of(r)}, date {r['date']}, commit {r['commit'][:7]}"
                + (f", `{r['command']}`" if r.get("command") else "") + ":\n\n" + r["table"]
                + "\n\n" + shared_machine(r))

    def shared_machine(r):
        ratios = [m["ratio"] for m in r["result"]["projections"]["measured_against_projected"]
                  if m.get("workers", r["result"]["settings"]["workers"]) == r["result"]["settings"]["workers"]]
        return (f"Measured wall times are {min(ratios):.1f}-{max(ratios):.1f}x what the CPU seconds project for "
                f"{r['result']['settings']['workers']} cores of their own ({r['result']['uptime']['start'].strip()} "
                f"at the start, {r['result']['uptime']['end'].strip()} at the end).")

    fallback = [name.upper() for name in PAIRS if name not in own]
    return (planning_table(fits, PAIRS, config.settings("wmt14", "paper")["bpe_learn_pairs"],
                                     fitted_words=prep_cost.fitted_words_per_pair(run), own=own)
            + "\n\nWhere a cell is a range, it runs from the benchmark corpus's words per pair to the pair's "
              "training text's: the parts work per word, so the projection scales by words, not pairs (the "
              "recipe's dry run uses the extracted text's size once it is there). Projected by "
              "`attn_kit.planning.prep_cost` (the recipes' `--dry-run` prints the same for its pair, `--workers` "
              "and `--bpe-learn-pairs`) for cores of their own, from CPU seconds: per part, the main process's "
              "(serial) and the workers' (parallel) CPU seconds, fitted as c + k x pairs (c >= 0) for the parts "
              "whose work is per token and as a x pairs^b for learning BPE, whose work follows the sample's word "
              "types, and serial + parallel / workers; peak memory as a x pairs^b, the workers' grown by the factor "
              "their 2- and 4-worker runs measured per doubling of the workers (one doubling measured, "
              "extrapolated; in proportion to the workers it would be 2x). Download and extraction are projected "
              "apart: the dry run adds them (the archives' sizes at a stated download rate; the extraction rates "
              "of `benchmarks/results/cpu2core_amd_data_extract.json`). Each pair is projected from a synthetic corpus of its own (`lab/bench/corpus.py`: "
              "newstest sentence shapes of the pair, words drawn from wordfreq's Zipfian lists, compounds below "
              "the lists' cut-off, words repeated within 16-sentence documents, crawled long lines and noise)"
              + (f"; {' and '.join(fallback)} from EN-DE's until its own is filed "
                 f"(`python benchmarks/data_prep.py --pair {fallback[0].lower()}`)" if fallback else "") + ":\n\n"
            + "\n\n".join(corpus_text(name, r) for name, r in runs.items())
            + source(*[BENCH / prep_cost.results_path(name).name for name in runs]) + bpe_sample_effect() + bpe_sample_en_fr())


def bpe_sample_effect() -> str:
    """BLEU of the bundled run with BPE learned on a sample (the share --bpe-learn-pairs is of WMT14 EN-DE)
    beside the committed seeds learned on every pair (recipes/results/bundled_bpe_learn_*.json)."""
    paths, runs = loaded(RECIPES, "bundled_bpe_learn_*.json")
    if not paths:
        return ""
    seeds = loaded(RECIPES, "bundled_seed*.json")[1]
    first = runs[0]["bpe_learn"]
    rows = [[f"every pair (the {len(seeds)} committed seeds, mean ± sd)", "50", mean_sd(
        [s["result"]["sacrebleu"] for s in seeds]), mean_sd([s["result"].get("bleu_compound_split") for s in seeds]),
        seeds[0]["result"].get("vocabulary"), seeds[0]["machine"].split(",")[0]]]
    now = [run for run in runs if run["bpe_learn"].get("label") == "the recipe now"]  # the sample as the recipe runs it
    if len(now) > 1:
        rows.append([f"{now[0]['bpe_learn']['pairs']} sampled pairs (the recipe now), the {len(now)} seeds, mean ± sd",
                     str(now[0]["bpe_learn"]["vocabulary_threshold"]),
                     mean_sd([run["result"]["sacrebleu"] for run in now]),
                     mean_sd([run["result"].get("bleu_compound_split") for run in now]),
                     now[0]["result"].get("vocabulary"), now[0]["machine"].split(",")[0]])
    for seed in seeds:
        r = seed["result"]
        rows.append([f"every pair, seed {r['seed']}", "50", f"{r['sacrebleu']:.2f}", fmt(r.get("bleu_compound_split")),
                     r.get("vocabulary"), seed["machine"].split(",")[0]])
    for run in runs:
        r, learn = run["result"], run["bpe_learn"]
        rows.append([f"{learn['pairs']} sampled pairs, seed {r['seed']}, {learn.get('label', '')} "
                     f"(`{run['command'].split('--bundled ')[-1]}`, commit {run['commit'][:7]})",
                     str(learn["vocabulary_threshold"]), f"**{r['sacrebleu']:.2f}**",
                     fmt(r.get("bleu_compound_split")), r.get("vocabulary"), run["machine"].split(",")[0]])
    return (f"\n\n**What the sample costs in BLEU.** The bundled run (`bash recipes/wmt14_en_de.sh --bundled`) with "
            f"BPE learned on {first['pairs']} of its {first['of']} training pairs, {first['pairs'] / first['of']:.0%}, "
            f"the share {first['default'] / 1e6:g}M is of WMT14 EN-DE's {first['wmt14_pairs'] / 1e6:g}M (above that "
            "size the default changes nothing here):\n\n"
            + table(["BPE learned on", "apply-bpe --vocabulary-threshold", "sacreBLEU", "BLEU, compound split",
                     "dictionary", "CPU"], rows)
            + (f"\n\nOver {len(now)} training seeds the sample costs "
               f"{statistics.mean(r['result']['sacrebleu'] for r in now) - statistics.mean(s['result']['sacrebleu'] for s in seeds):+.2f} "
               f"sacreBLEU on average, against a seed-to-seed standard deviation of "
               f"{statistics.stdev(r['result']['sacrebleu'] for r in now):.2f} (sample) and "
               f"{statistics.stdev(s['result']['sacrebleu'] for s in seeds):.2f} (every pair)."
               if len(now) > 1 and len(seeds) > 1 else "")
            + "\n\nlearn-joint-bpe-and-vocab counts the vocabulary on the text it learns from; the threshold on a "
              "sample's counts is the full threshold times the sample's share (the recipe records it in "
              "`bpe/learn.json` and the run card)." + source(*paths))


BPE_SAMPLE_EN_FR = RECIPES / "bpe_sample_en_fr.json"


def bpe_sample_summary() -> str:
    """README: what learning BPE on the recipes' sample costs, EN-DE's share and EN-FR's, over three seeds."""
    paths = [p for p in sorted(glob.glob(str(RECIPES / "bundled_bpe_learn_*.json")))
             if load(p)["bpe_learn"].get("label") == "the recipe now"]  # the sample as the recipe runs it
    now = [load(p) for p in paths]
    seed_paths, seeds = loaded(RECIPES, "bundled_seed*.json")
    learn, _, _, diffs = en_fr_pairs()
    de = statistics.mean(r["result"]["sacrebleu"] for r in now) - statistics.mean(r["result"]["sacrebleu"] for r in seeds)
    de_sd, fr_mean, fr_sd = statistics.stdev(r["result"]["sacrebleu"] for r in seeds), statistics.mean(diffs), \
        statistics.stdev(diffs)
    within = [abs(de) < de_sd, abs(fr_mean) < fr_sd]
    verdict = ("both within the seeds' spread" if all(within) else "beyond the seeds' spread for " +
               " and ".join(p for p, w in zip(("EN-DE", "EN-FR"), within) if not w))
    return (f"The WMT14 recipes learn BPE on {learn['default'] / 1e6:g}M sampled pairs (`--bpe-learn-pairs`), which "
            f"cuts data preparation ([scaling.md](docs/scaling.md#preparing-wmt-sized-data)). Measured on Tatoeba with "
            f"the same share of the pairs, {len(now)} training seeds each way: EN-DE's share "
            f"({now[0]['bpe_learn']['pairs'] / now[0]['bpe_learn']['of']:.0%}) costs {de:+.2f} sacreBLEU (the seeds' sd "
            f"{de_sd:.2f}), EN-FR's ({learn['default'] / learn['wmt14_pairs']:.1%}) {fr_mean:+.2f} (the paired "
            f"differences' sd {fr_sd:.2f}): {verdict}." + source(*seed_paths, *paths, BPE_SAMPLE_EN_FR))


def en_fr_pairs():
    """benchmarks/bpe_sample.py's EN-FR runs: (the sample's share, {way: {seed: run}}, the seeds run both
    ways, the sample's sacreBLEU minus every pair's for each of them)."""
    r = load(BPE_SAMPLE_EN_FR)
    ways = {way: {run["seed"]: run for run in r["runs"] if run["way"] == way} for way in ("all", "sample")}
    seeds = sorted(set(ways["all"]) & set(ways["sample"]))
    return r["bpe_learn"], ways, seeds, [ways["sample"][k]["sacrebleu"] - ways["all"][k]["sacrebleu"] for k in seeds]


def bpe_sample_en_fr() -> str:
    """EN-FR's share: the bundled settings on Tatoeba EN-FR, BPE learned on every pair and on the share
    the recipe samples of WMT14 EN-FR, the same seeds (benchmarks/bpe_sample.py)."""
    if not BPE_SAMPLE_EN_FR.exists():
        return ""
    learn, ways, seeds, diffs = en_fr_pairs()
    sample = [run for run in ways["sample"].values() if run.get("bpe_learn_json")]
    threshold = sample[0]["bpe_learn_json"]["vocabulary_threshold"] if sample else None
    rows = [[f"seed {seed}", f"{ways['all'][seed]['sacrebleu']:.2f}", f"{ways['sample'][seed]['sacrebleu']:.2f}",
             f"{diff:+.2f}", f"{ways['all'][seed]['vocabulary']} / {ways['sample'][seed]['vocabulary']}"]
            for seed, diff in zip(seeds, diffs)]
    summary = ""
    if len(seeds) > 1:
        rows.append(["mean ± sd", mean_sd([ways["all"][seed]["sacrebleu"] for seed in seeds]),
                     mean_sd([ways["sample"][seed]["sacrebleu"] for seed in seeds]), mean_sd(diffs), ""])
        mean, spread = statistics.mean(diffs), statistics.stdev(diffs)
        summary = (f"\n\nOver {len(seeds)} training seeds BPE learned on EN-FR's share costs "
                   f"{mean:+.2f} sacreBLEU (the paired differences' sd {spread:.2f}, "
                   f"the seeds' sd {statistics.stdev(ways['all'][seed]['sacrebleu'] for seed in seeds):.2f} on every "
                   "pair)" + (f": within the seeds' spread, so the recipe keeps its default ({learn['default'] / 1e6:g}M "
                              "sampled pairs, the threshold scaled and rounded, at least 1)." if abs(mean) < spread else
                              ": more than the seeds' spread."))
    return (f"\n\n**EN-FR's share.** WMT14 EN-FR samples {learn['default'] / 1e6:g}M of its {learn['wmt14_pairs'] / 1e6:g}M "
            f"pairs, {learn['default'] / learn['wmt14_pairs']:.1%}, where the scaled vocabulary threshold rounds to "
            f"{threshold}. The same share of Tatoeba EN-FR's {learn['of']} training pairs ({learn['pairs']}) with the "
            f"bundled run's settings (`python benchmarks/bpe_sample.py --source .../fra-eng.txt --lang fr`; "
            f"sacreBLEU on its {ways['all'][seeds[0]]['test_sentences']} held-out pairs):\n\n"
            + table(["training seed", "BPE on every pair", f"BPE on {learn['pairs']} pairs", "difference",
                     "dictionary (every pair / sample)"], rows)
            + summary + source(BPE_SAMPLE_EN_FR))


# ---------------------------------------------------------------------------------------------- faults
def canary_check() -> str:
    """The canary's prediction of a whole run beside that run's measured stage times on one machine
    (the canary first, then the run in the same work directory): attn_kit.recipes.canary; one
    column pair per results file recipes/results/canary_check_*.json (the bundled run, the smoke run)."""
    paths, checks = loaded(RECIPES, "canary_check_*.json")
    if not paths:
        return "(not filed yet: recipes/results/canary_check_*.json)"
    parts = ("data preparation", "training, validations, checkpoint writes", "averaging", "generation and scoring",
             "total")
    columns, notes = [], []  # columns: per results file, (predicted, measured, error) of each part
    for r in checks:
        c, seconds = r["result"]["canary"], r["result"]["full_run"]["stage_seconds"]
        data = sum(seconds.get(s, 0.0) for s in ("download", "extract", "tokenize", "bpe", "binarize"))
        measured = [data, seconds["train"], seconds["average"], seconds["generate"] + seconds["score"]]
        measured.append(sum(measured))
        p = c["predicted_seconds"]
        predicted = [p["data_preparation"], p["training"] + p["validations"] + p["checkpoint_writes"], p["averaging"],
                     p["generation"], p["total"]]
        columns.append([(minutes(x), minutes(y), f"{x / y - 1:+.1%}" if y else "-")
                        for x, y in zip(predicted, measured)])
        threads = re.search(r"--threads (\d+)", r["command"])
        notes.append(f"`--{r['result']['mode']}`{f' --threads {threads.group(1)}' if threads else ''}: the canary "
                     f"trained {c['canary_minutes']:g} minutes ({c['updates']} of the run's {c['plan']['max_update']} "
                     f"updates); {r['machine']}, {r['date']}, {r['result']['load_average']}")
    header = ["part of the run"] + [f"`--{r['result']['mode']}`: {what}" for r in checks
                                     for what in ("predicted", "measured", "error")]
    rows = [[part, *(cell for column in columns for cell in column[i])] for i, part in enumerate(parts)]
    return table(header, rows) + "\n\n" + "; ".join(notes) + "." + source(*paths)


def faults() -> str:
    """What happens when things go wrong: the cases of lab.faults, each with its test."""
    rows = [(c.fault, c.outcome, f"`{c.test}`") for c in CASES]
    return table(["what goes wrong", "what happens", "test (tests/test_faults.py unless named)"], rows)


TABLES = {f.__name__: f for f in (  # each document names its tables by these names
    bundled, bundled_sweep, parallel_presets, tokens_per_update, cpu_benchmarks, gpu_benchmarks, training_cost, faults,
    gpu_recipe_path, decode_rules, table3, translate_consistency, ctranslate2, ctranslate2_run, canary_check, data_prep,
    gpu_check, gpu_check_summary, gpu_check_repeat, gpu_check_third, bpe_sample_summary, gpu_planning, hf_export)}


def documents() -> list:
    """The documents whose tables are generated: README.md, then docs/*.md."""
    return [README, *sorted(DOCS.glob("*.md"))]


def render(text: str, name: str = "README.md") -> str:
    """``text`` (the document ``name``) with every marked table regenerated."""
    def replace(m):
        table_name = m.group(1)
        if table_name not in TABLES:
            raise UserError(f"{name} names an unknown table {table_name!r}; known: {', '.join(TABLES)}")
        return f"<!-- table:{table_name} -->\n{TABLES[table_name]()}\n<!-- /table:{table_name} -->"

    return re.sub(r"<!-- table:(\w+) -->\n.*?<!-- /table:\1 -->", replace, text, flags=re.S)


def stale() -> dict:
    """{document: its text with fresh tables} for every document whose tables differ from the files."""
    texts = {path: path.read_text(encoding="utf-8") for path in documents()}
    fresh = {path: render(text, str(path.relative_to(REPO))) for path, text in texts.items()}
    return {path: new for path, new in fresh.items() if new != texts[path]}


def main(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true",
                   help="only check that the tables of README.md and docs/*.md are up to date")
    args = p.parse_args(argv)
    changed = stale()
    names = ", ".join(str(path.relative_to(REPO)) for path in changed)
    if args.check:
        if changed:
            raise UserError(f"the tables of {names} differ from the results files; run python scripts/readme_tables.py")
        print(f"the tables of {len(documents())} documents (README.md, docs/*.md) match the results files")
        return 0
    for path, new in changed.items():
        path.write_text(new, encoding="utf-8")
    print(f"tables rewritten: {names}" if changed else "tables already up to date")
    return 0
