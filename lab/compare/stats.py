"""The comparison's numbers: one run's, the mean and spread over seeds, and whether
the two models' difference is within seed-to-seed noise."""
import math
import statistics
from typing import Optional

from ..pairs import MODELS

METRICS = ["params", "updates", "train_minutes", "tokens_per_s", "peak_memory_bytes", "train_nll_loss",
           "valid_nll_loss", "valid_ppl", "bleu", "sentences_per_s", "gen_tokens_per_s"]


def summarize_run(which: str, seed: int, stats: dict, gen: Optional[dict]) -> dict:
    """One run's numbers from the worker's ``stats`` and the evaluation ``gen`` (None: no BLEU)."""
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


def mean_sd(values):
    """(mean, sample sd) of the values that are there; sd None for one, (None, None) for none."""
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def common_update(runs) -> Optional[int]:
    """The last update at which every run validated."""
    sets = [{v["num_updates"] for v in r["valid_curve"]} for r in runs]
    common = set.intersection(*sets) if sets else set()
    return max(common) if common else None


def at_update(run, update):
    return next((v for v in run["valid_curve"] if v["num_updates"] == update), None)


def summarize(runs, seeds) -> dict:
    """Mean and sd over ``seeds`` of every metric per model, the valid perplexity at the
    last update both validated at, and the noise verdict on it."""
    by = {w: [r for r in runs if r["model"] == w] for w in MODELS}
    update = common_update(runs)
    summary = {"common_update": update, "seeds": seeds}
    for w in MODELS:
        summary[w] = {m: mean_sd([r.get(m) for r in by[w]]) for m in METRICS}
        if update is not None:
            summary[w]["valid_ppl_common"] = mean_sd([at_update(r, update)["ppl"] for r in by[w]])
            summary[w]["valid_nll_common"] = mean_sd([at_update(r, update)["nll_loss"] for r in by[w]])
    if update is not None:
        diffs = [at_update(p, update)["ppl"] - at_update(s, update)["ppl"]
                 for p, s in zip(sorted(by["plugin"], key=lambda r: r["seed"]),
                                 sorted(by["stock"], key=lambda r: r["seed"]))]
        summary["ppl_difference_common"] = mean_sd(diffs)
        summary["verdict"] = verdict(summary, update, len(seeds))
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
