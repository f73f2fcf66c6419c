"""The comparison's outputs: the markdown table (printed and comparison.md), every
number with its provenance (comparison.json) and the validation curves (comparison.png)."""
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path

from attn_kit.cli import UserError, atomic_output, write_json_atomic, write_text_atomic
from ..pairs import LABEL, PAIRS
from attn_kit.results import provenance
from .commands import peak_lr, warmup_init_lr


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


PRECISION_LABEL = {"fp16": "fp16 mixed precision", "bf16": "bf16 autocast (fp32 weights)"}


def device_label(args) -> str:
    """Where and in what precision both models trained: what really ran."""
    if args.ngpus:
        return f"{args.ngpus} GPU(s), " + PRECISION_LABEL.get(args.precision, args.precision)
    return f"CPU, {PRECISION_LABEL.get(args.precision, args.precision)}" + (
        f", {args.threads} thread(s) per process" if args.threads else "")


def markdown(summary, args, runs) -> str:
    P, S = summary["plugin"], summary["stock"]
    plugin_arch, stock_arch = PAIRS[args.arch].plugin_arch, PAIRS[args.arch].stock_arch
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
    budget = (f"{args.max_update} updates each" if args.max_update
              else f"{args.train_minutes:g} min of training each")
    head = [f"attn_plugin `{plugin_arch}` vs stock fairseq `{stock_arch}`: {budget}, {device_label(args)}, "
            f"seed{'s' if n > 1 else ''} {' '.join(map(str, args.seeds))}"
            + (" (mean ± sd over seeds)" if n > 1 else ""), "",
            f"| | attn_plugin ({plugin_arch}) | stock fairseq ({stock_arch}) | plugin / stock |",
            "|---|---|---|---|"]
    lines = head + [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    if summary.get("verdict"):
        lines += ["", summary["verdict"]]
    return "\n".join(lines)


def settings(args) -> dict:
    """The comparison's settings (lab.compare.cli.CompareSettings) as JSON values (paths as
    text, the model size as its fields)."""
    return {f.name: _json(getattr(args, f.name)) for f in fields(args)}


def _json(value):
    return str(value) if isinstance(value, Path) else asdict(value) if is_dataclass(value) else value


def write_comparison(workdir: Path, args, data: Path, langs: str, commands: dict, runs, summary, table: str):
    """comparison.json (provenance, settings, both command lines, every run, the summary and
    the table) and comparison.md (the table)."""
    pair = PAIRS[args.arch]
    result = {**provenance(), "data": str(data), "pair": langs, "arch": args.arch, "plugin_arch": pair.plugin_arch,
              "stock_arch": pair.stock_arch, "precision": args.precision,
              "budget": {"max_update": args.max_update,
                         "minutes_per_model": args.train_minutes},
              "settings": settings(args), "stock_peak_lr": peak_lr(args),
              "stock_warmup_init_lr": warmup_init_lr(args), "commands": commands, "runs": runs, "summary": summary,
              "table": table}
    write_json_atomic(workdir / "comparison.json", result)
    write_text_atomic(workdir / "comparison.md", table + "\n")


def plot(runs, path: Path, title: str):
    """The unsmoothed valid loss of every run against updates and against training time."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("plotting needs matplotlib (pip install matplotlib); the table and JSON are "
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
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
