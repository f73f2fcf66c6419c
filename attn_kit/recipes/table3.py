"""Table 3 as one command (recipes/table3.sh): every variation of the base model trained on the EN-DE
recipe's data, evaluated as Sec. 6.2 says, tabled beside the paper's numbers. Each row is a resumable stage
(WORKDIR/rows/ROW/, settings :func:`row_settings`); the last writes table3.md, .json and .png."""
import argparse
import contextlib
import dataclasses
import json
import re
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

from ..cli import (ArgumentParser, UsageError, UserError, atomic_output, log, main_guard, write_json_atomic,
                   write_text_atomic)
from ..planning.paper import BASE, EN_DE_VOCAB, PAPER_ALPHA, PAPER_BEAM, PAPER_MAX_LEN_B, TABLE3, Table3Row
from ..results import provenance
from ..pipeline import slurm
from ..pipeline.download import read_json_or
from ..pipeline.lock import workdir_lock
from ..pipeline.process import stream
from ..pipeline.stages import Pipeline, Stage
from .. import options
from . import canary, common, config, scale, settings, translation
from ..checkout import REPO
from ..fairseq_layer.fairseq_commands import DecodePlan, validate_command
from ..fairseq_layer.fairseq_log import progress_line
from ..planning import cost, training_cost
from ..fairseq_layer.checkpoints import load_checkpoint
from ..metrics.bleu import read_lines
from ..metrics.scores import dev_scores

GROUPS = ("base", "A", "B", "C", "D", "E", "big")


# ---------------------------------------------------------------------------------------------- rows
def select_rows(spec: str) -> List[Table3Row]:
    """The rows ``--rows`` names: groups (A) and rows (A2), comma-separated; "all"."""
    if spec.strip() == "all":
        return list(TABLE3)
    names = [x.strip() for x in spec.split(",") if x.strip()]
    known = {r.name for r in TABLE3} | set(GROUPS)
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise UsageError(f"--rows {spec!r}: unknown {bad[0] if bad else 'empty list'}; give groups "
                         f"({', '.join(GROUPS)}) or rows ({', '.join(r.name for r in TABLE3)}), or all")
    return [r for r in TABLE3 if r.group in names or r.name in names]


def scaled_settings(row: Table3Row, base: Optional[dict]) -> dict:
    """The row's N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls, positional encoding at the scale of ``base``
    (None: the paper's): a size scales by the row's value over the paper's base value (rounded, at least 1);
    d_k = d_v = d_model/h where the row changes h or d_model, as Table 3's rows A and C do."""
    s = dict(row.settings)
    s.setdefault("positional_encoding", "sinusoidal")
    if base is None:
        return s
    for key in ("N", "d_model", "d_ff", "h"):
        s[key] = max(1, round(s[key] * base[key] / BASE[key]))
    base_d_k = base["d_model"] // base["h"]
    for key in ("d_k", "d_v"):
        if key in row.change and not {"h", "d_model"} & row.change.keys():  # row B: d_k alone, by its ratio
            s[key] = max(1, round(row.change[key] * base_d_k / BASE[key]))
        else:
            s[key] = s["d_model"] // s["h"]
    return s


def model_flags(s: dict) -> List[str]:
    """fairseq-train flags on ``--arch attn_paper_base`` for settings ``s`` (eps_ls is the
    criterion's, see :func:`attn_kit.recipes.common.train_command`)."""
    flags = []
    for side in ("encoder", "decoder"):
        flags += [f"--{side}-layers", s["N"], f"--{side}-embed-dim", s["d_model"],
                  f"--{side}-ffn-embed-dim", s["d_ff"], f"--{side}-attention-heads", s["h"]]
    for key, flag in (("d_k", "--attention-key-dim"), ("d_v", "--attention-value-dim")):
        if s[key] != s["d_model"] // s["h"]:
            flags += [flag, s[key]]
    flags += ["--dropout", f"{s['P_drop']:g}"]
    if s["positional_encoding"] != "sinusoidal":
        flags += ["--positional-encoding", s["positional_encoding"]]
    return [str(f) for f in flags]


def row_updates(row: Table3Row, max_update: int) -> int:
    """Table 3's train steps: the big row trains 3x as long as the others (300K vs 100K)."""
    return max_update * row.settings["steps"] // BASE["steps"]


# ---------------------------------------------------------------------------------------------- settings
DESCRIPTION = """\
Table 3 as one command: every variation of the base model trained, evaluated as
the paper did, and tabled beside the paper's numbers.

    bash recipes/table3.sh --bundled                      # all 20 rows, small, on the bundled data (CPU)
    bash recipes/table3.sh --bundled --rows base,A,C5     # some groups and rows
    bash recipes/table3.sh --ngpus 8 --dry-run            # the paper-scale commands of every row

Rows: base, A1-A4 (heads), B1-B2 (d_k), C1-C7 (N, d_model, d_ff), D1-D4 (P_drop,
eps_ls), E (learned positions), big; ``--rows`` takes groups and rows. Each row
trains on the EN-DE recipe's prepared data (its work directory, whose data stages
run first if needed: nothing is prepared twice) with that recipe's batch,
optimizer and schedule, for Table 3's steps (base 100K, big 300K; scaled with
``--max-update``). Sec. 6.2's evaluation: the development set (newstest2013;
``--bundled``: the bundled valid split), beam search as in Sec. 6.1 (beam 4,
GNMT alpha 0.6, input + 50) from the final checkpoint, no checkpoint averaging;
perplexity per word piece = 2^(unsmoothed loss in bits per target token);
parameters counted from the checkpoint. ``--bundled`` and ``--smoke`` shrink the
base model and apply each row's change to it the way Table 3 applies it to the
paper's base (``recipes/configs/table3.yaml``).

Each row is its own resumable stage (``WORKDIR/rows/ROW/``): a finished row is
not trained again. The last stage writes ``WORKDIR/table3.md`` (the table in the
paper's layout, the paper's values beside ours), ``table3.json`` (every row's
settings, commands and numbers) and ``table3.png`` (dev BLEU and PPL per row
against the paper's), with the Spearman rank correlation of our rows' dev
BLEU (and PPL) with the paper's.
"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Table3Settings(settings.TrainSettings):
    """A Table 3 run (recipes/configs/table3.yaml over the EN-DE recipe's training settings for the
    mode), or one row's (:func:`row_settings`). ``train_minutes``: the base rows' budget."""
    mode: str  # paper, bundled or smoke
    rows: Tuple[Table3Row, ...]
    base: Optional[Mapping[str, int]]  # the size the rows change; None: the paper's base
    data_workdir: Path  # the EN-DE recipe's prepared data
    vocab_estimate: Tuple[int, str]  # (size, note) for --dry-run's cost
    reused: Mapping[str, Path]  # row name -> the finished EN-DE run whose final model it evaluates (--reuse)
    merge: Tuple[Path, ...]  # --merge: finished Table 3 runs of some rows each, tabled together here
    job_per_group: bool  # --launcher slurm: a training job per group, then a job that merges them


def parser() -> argparse.ArgumentParser:
    P = config.settings("table3", "paper")
    p = ArgumentParser(prog="recipes/table3.sh", usage=scale.USAGE, description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    options.add(mode, "bundled", "every row on a small base, recipes/configs/table3.yaml")
    options.add(mode, "smoke", "tiny rows on the --smoke data")
    settings.add_run_options(p, "runs/table3_<mode>")
    p.add_argument("--rows", default="all", help="groups (base, A, B, C, D, E, big) and rows (A2, C5, ...), "
                                                "comma-separated (default all)")
    options.add(p, "data_workdir", "the EN-DE recipe's --data-workdir, whose data stages run there first, skipping "
                                   "what is done; default: the folder that recipe prepares for the mode: "
                                   "wmt14_en_de_data beside the work directory, shared with the base and big runs; "
                                   "--bundled, --smoke: runs/wmt14_en_de_bundled, _smoke")
    g = p.add_argument_group("training")
    settings.add_device_options(g, minutes="per row, the big row 3x; on top of --max-update; default: none, a "
                                           "fixed number of updates per row")
    options.add(g, "max_update", f"of every row but big, which trains 3x as many; default {P['max_update']}, Table "
                                 f"3's 100K; --bundled {config.settings('table3', 'bundled')['max_update']}")
    options.add(g, "save_interval_updates", f"default {P['save_interval_updates']}")
    g.add_argument("--reuse", action="append", metavar="ROW=RUN_DIR",
                   help="evaluate row ROW (base or big) with the final model of a finished EN-DE recipe run in "
                        "RUN_DIR (recipes/wmt14_en_de.sh --arch attn_paper_base or attn_paper_big: the Table 2 "
                        "runs) instead of training it again; checked: the paper's model, Table 3's updates for the "
                        "row, the same EN-DE data; repeatable")
    p.add_argument("--merge", nargs="+", type=Path, metavar="RUN_DIR",
                   help="table the rows of several finished Table 3 runs (each its own --workdir and --rows: "
                        "groups run as separate jobs, on separate machines) into --workdir's table3.md/json/png; "
                        "trains nothing. The runs must share the mode, base, updates and data; each row once")
    p.add_argument("--job-per-group", action="store_true",
                   help="--launcher slurm: one training job per group of --rows (each a Table 3 run of its own in "
                        "WORKDIR/groups/GROUP on --nnodes x --ngpus, all starting once the data is prepared) and a "
                        "last job that tables them in WORKDIR (--merge) when all ended well; default: one job "
                        "trains the rows one after the other")
    return p


def build(argv=None) -> Table3Settings:
    """The run's settings: the EN-DE recipe's training set-up for the mode, then Table 3's own
    (recipes/configs/table3.yaml), the command line over both."""
    given = scale.parse(parser(), argv)
    mode = "bundled" if given.bundled else "smoke" if given.smoke else "paper"
    training = config.settings("wmt14", "paper", "archs.attn_paper_base", None if mode == "paper" else mode)
    table3 = config.settings("table3", mode)
    # the EN-DE recipe's training settings only: its data settings belong to the data stages it runs
    trains = {f.name for f in dataclasses.fields(Table3Settings)} - {"size", "average", "max_update"}
    yaml = {k: v for k, v in training.items() if k in trains}
    yaml.update(max_update=table3["max_update"], save_interval_updates=table3["save_interval_updates"])
    workdir = (given.workdir or REPO / "runs" / f"table3_{mode}").resolve()
    data_workdir = (given.data_workdir or default_data_workdir(mode, workdir)).resolve()
    dictionary = data_workdir / "data-bin" / "dict.en.txt"
    vocab = (common.dictionary_size(dictionary), " (the EN-DE data's dictionary)") if dictionary.exists() \
        else (training.get("bpe_merges") or EN_DE_VOCAB, " (until the EN-DE data is prepared)")
    rows = tuple(select_rows(given.rows))
    if given.job_per_group and (given.launcher != "slurm" or given.canary or given.merge):
        raise UsageError("--job-per-group submits Slurm jobs: it needs --launcher slurm, and is for training the "
                         "rows (not with --canary or --merge)")
    return settings.compose(Table3Settings, given, yaml, lambda v: dict(
        mode=mode, rows=rows, workers=settings.default_workers(), base=table3["base"],
        reused=reused_runs(given.reuse or [], rows, mode, v.max_update or table3["max_update"]),
        merge=tuple(Path(d).resolve() for d in given.merge or ()),
        workdir=workdir, data_workdir=data_workdir, vocab_estimate=vocab, arch="attn_paper_base", size=None,
        average=1,  # no checkpoint averaging in Table 3 (Sec. 6.2)
        validate_interval_updates=None,  # fairseq validates when training ends; fairseq-validate scores the row
        beam=PAPER_BEAM, length_penalty="gnmt", alpha=PAPER_ALPHA, beam_stop=None,
        recipe_module="attn_kit.recipes.table3"))


def reused_runs(specs: List[str], rows, mode: str, max_update: int) -> dict:
    """{row name: run directory} from --reuse ROW=RUN_DIR, each checked against its results.json:
    a row of this run, the paper's own model (base or big, unchanged) trained for Table 3's updates
    for it on WMT14 (attn_kit.recipes.translation.on_table2s_test_set), its final checkpoint there."""
    by_name, out = {r.name: r for r in rows}, {}
    for spec in specs:
        name, _, folder = spec.partition("=")
        usage = ("give ROW=RUN_DIR, e.g. --reuse base=runs/wmt14_en_de_base" if not folder else
                 "only the base and big rows are Table 2 runs" if name not in ("base", "big") else
                 f"--rows does not hold {name}" if name not in by_name else
                 f"the Table 2 runs are paper-scale; this is --{mode}" if mode != "paper" else None)
        if usage:
            raise UsageError(f"--reuse {spec!r}: {usage}")
        row, folder = by_name[name], Path(folder).resolve()
        r = read_json_or(folder / "results.json")
        if r is None:
            raise UsageError(f"--reuse {spec!r}: {folder / 'results.json'} is not there or not readable: the run "
                             "must have finished")
        updates = row_updates(row, max_update)
        problem = (f"its arch is {r.get('arch')}, the row's {row.arch}" if r.get("arch") != row.arch else
                   f"it trained {r.get('updates')} updates, the row {updates}" if r.get("updates") != updates else
                   f"it is a {r.get('mode')} run on {r.get('pair')}, not the paper's model on WMT14 en-de"
                   if r.get("pair") != "en-de" or not translation.on_table2s_test_set(r) else
                   "it has no checkpoints/checkpoint_last.pt" if not (folder / "checkpoints" / "checkpoint_last.pt")
                   .is_file() else None)
        if problem:
            raise UsageError(f"--reuse {spec!r}: {problem}; that row is trained here instead without --reuse")
        out[name] = folder
    return out


def default_data_workdir(mode: str, workdir: Path) -> Path:
    """Where the EN-DE recipe prepares this mode's data by default (translation.data_folders): the shared
    wmt14_en_de_data beside the work directory (--bundled, --smoke: that recipe's work directory); data an
    earlier version prepared in runs/wmt14_en_de_base (the default then) while the shared folder has none."""
    if mode != "paper":
        return REPO / "runs" / f"wmt14_en_de_{mode}"
    folder, old = workdir.parent / "wmt14_en_de_data", REPO / "runs" / "wmt14_en_de_base"
    if not (folder / ".stages").is_dir() and (old / ".stages" / "binarize.done").is_file():
        log(f"{old} holds EN-DE data prepared by an earlier version: using it (--data-workdir {folder} shares one "
            "copy with the base and big runs)")
        return old
    return folder


# ---------------------------------------------------------------------------------------------- a row
def row_settings(s: Table3Settings, row: Table3Row) -> Table3Settings:
    """The settings of one row's training: the run's, in the row's own folder and for its steps."""
    updates = row_updates(row, s.max_update)
    return dataclasses.replace(
        s, workdir=s.workdir / "rows" / row.name,
        arch=row.arch,  # attn_paper_base, or attn_paper_big (its sizes are given as flags anyway)
        max_update=updates, train_minutes=s.train_minutes * updates / s.max_update if s.train_minutes else None,
        save_interval_updates=min(s.save_interval_updates, updates))


def count_parameters(checkpoint: Path) -> int:
    """Parameters of the model in ``checkpoint``, each shared tensor once (Sec. 3.4's one matrix)."""
    tensors = load_checkpoint(checkpoint)["model"].values()
    unique = {(t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape)): t.numel() for t in tensors}
    return sum(unique.values())


def dev_command(r: Table3Settings, checkpoint) -> list:
    """fairseq-generate of the dev split as Sec. 6.1 decodes (beam 4, GNMT alpha 0.6, input + 50)."""
    plan = DecodePlan(beam=PAPER_BEAM, max_len_b=PAPER_MAX_LEN_B, batch_size=128, alpha=PAPER_ALPHA)
    return common.generate_command(r, r.data_workdir / "data-bin", checkpoint, "valid", plan)


def run_row(r: Table3Settings, row: Table3Row, ctx):
    """A row's stage: train (once: ``train.done`` marks a finished training), then dev PPL
    (fairseq-validate) and dev BLEU from the final checkpoint; write its row.json."""
    values, folder, data_bin = scaled_settings(row, r.base), r.workdir, r.data_workdir / "data-bin"
    flags, ckpt, done = model_flags(values), folder / "checkpoints" / "checkpoint_last.pt", folder / "train.done"
    reused = r.reused.get(row.name)
    if reused:
        ckpt = reused / "checkpoints" / "checkpoint_last.pt"
        print(f"  # train: none, the row is the final model of {reused} (--reuse)", flush=True)
        if not ctx.dry_run:
            check_same_data(ckpt, data_bin)
    elif done.exists() and not ctx.dry_run:
        print(f"  # train: done already ({done})", flush=True)
    else:
        cmd = common.train_command(r, data_bin, folder / "checkpoints", flags, label_smoothing=values["eps_ls"])
        common.run_training(ctx, r, cmd, record=folder / "train_command.json", model=flags)
        ctx.step(f"mark {done}", lambda: write_json_atomic(done, {"updates": common.last_update(
            ctx.log_dir / f"{ctx.stage}.log")}))
    lines = []
    ctx.sh(validate_command(data_bin, ckpt, max_tokens=r.max_tokens_per_gpu, gpus=r.ngpus),
           tail=lambda line: lines.append(line) or "valid on" in line, env=common.thread_env(r))
    with ctx.output(folder / "valid.out") as tmp:
        ctx.sh(dev_command(r, ckpt), stdout=tmp, tail=progress_line, env=common.thread_env(r))
    ctx.step(f"write {folder / 'row.json'}: dev PPL, dev BLEU, parameters", write_row, r, row, values, flags, lines,
             ckpt, (reused / "logs" / "train.log") if reused else ctx.log_dir / f"{ctx.stage}.log")


def check_same_data(checkpoint: Path, data_bin: Path):
    """A reused run's model was trained on ``data_bin`` (its dictionaries are the ones the row's
    evaluation reads): the data folder its checkpoint records is the same folder."""
    state = load_checkpoint(checkpoint, mmap=True)
    cfg = state.get("cfg") or {}
    trained_on = (cfg.get("task") or {}).get("data") if isinstance(cfg, dict) else getattr(cfg.task, "data", None)
    if not trained_on or Path(trained_on).resolve() != Path(data_bin).resolve():
        raise UserError(f"{checkpoint} was trained on {trained_on}, not on {data_bin}, which this Table 3 "
                        "evaluates on: give --data-workdir the run's data folder, or train the row here")


def row_inputs(data_bin: Path) -> List[Path]:
    """What a row's training reads: the EN-DE dictionaries and binarized train and valid splits."""
    return [data_bin / f"dict.{lang}.txt" for lang in ("en", "de")] + [
        data_bin / f"{split}.en-de.{lang}.{ext}" for split in ("train", "valid") for lang in ("en", "de")
        for ext in ("bin", "idx")]


def row_stage(s: Table3Settings, row: Table3Row) -> Stage:
    r, values, reused = row_settings(s, row), scaled_settings(row, s.base), s.reused.get(row.name)
    train = f"train {r.max_update} updates" + (f" (or {r.train_minutes:g} minutes)" if r.train_minutes else "")
    help_text = (f"{row.describe()}: {f'the final model of {reused}' if reused else train}, dev PPL and BLEU "
                 "(beam 4, alpha 0.6, final checkpoint)")
    return Stage(row.name, partial(run_row, r, row), help_text, inputs=row_inputs(s.data_workdir / "data-bin"),
                 outputs=[r.workdir / "row.json"], scratch=[r.workdir],
                 options={**common.train_options(r, model_flags(values)), "eps_ls": values["eps_ls"],
                          "minutes_per_row": s.train_minutes,  # the option's name before --train-minutes
                          **({"reused_from": str(reused)} if reused else {})},
                 resumable=common.RESUMABLE_TRAIN_OPTIONS)


def write_row(r: Table3Settings, row: Table3Row, values: dict, flags, validate_lines, ckpt: Path, stage_log: Path):
    """WORKDIR/rows/ROW/row.json: the row's settings, training, dev PPL and BLEU, parameters."""
    folder = r.workdir
    m = re.search(r"\| nll_loss ([\d.]+)", "".join(validate_lines))
    if not m:
        raise UserError(f"fairseq-validate printed no nll_loss for row {row.name}; see {stage_log}")
    nll = float(m.group(1))
    train = common.train_log_summary(stage_log)
    reused = r.reused.get(row.name)
    refs = read_lines(r.data_workdir / "raw" / "valid.de")  # dev BLEU: the paper's protocol (t2t) and sacreBLEU
    write_json_atomic(folder / "row.json", {
        "row": row.name, "group": row.group, "change": row.describe(), "settings": values, "flags": flags,
        **({"reused_from": str(reused)} if reused else {}),
        "train_command": common.recorded_train_command((reused or folder) / "train_command.json"),
        "updates": train.get("updates"), "tokens_per_update": train.get("tokens_per_update"),
        "dev_nll_loss_bits": nll, "dev_ppl": round(2 ** nll, 2),
        **dev_scores(common.read_hypotheses(folder / "valid.out", len(refs)), refs, "de"),
        "params": count_parameters(ckpt),
        "paper": {"ppl": row.ppl, "bleu": row.bleu, "params_millions": row.params}})


# ---------------------------------------------------------------------------------------------- the table
def spearman(ours: List[float], paper: List[float]) -> Optional[float]:
    """Spearman's rank correlation (scipy), None for fewer than 3 rows or a constant column."""
    from scipy.stats import spearmanr

    if len(ours) < 3 or len(set(ours)) < 2 or len(set(paper)) < 2:
        return None
    return round(float(spearmanr(ours, paper).statistic), 3)


def write_table(s: Table3Settings):
    """WORKDIR/table3.{json,md,png}: every row's numbers beside the paper's, with rank correlations."""
    rows = [json.loads((s.workdir / "rows" / r.name / "row.json").read_text()) for r in s.rows]
    write_info(s.workdir, {"mode": s.mode, "base": s.base or {k: BASE[k] for k in ("N", "d_model", "d_ff", "h")},
                           "max_update": s.max_update, "minutes_per_row": s.train_minutes,
                           "data": str(s.data_workdir / "data-bin")}, rows)


SHARED_BY_MERGED = ("mode", "base", "max_update", "minutes_per_row", "data")  # what every merged run must share


def write_info(workdir: Path, run: dict, rows: List[dict], **extra):
    """table3.{json,md,png} in ``workdir`` of ``rows`` (row.json dicts) of a run described by ``run``
    (:data:`SHARED_BY_MERGED`), with the rank correlations."""
    correlation = {"bleu": spearman([r["bleu"] for r in rows], [r["paper"]["bleu"] for r in rows]),
                   "ppl": spearman([r["dev_ppl"] for r in rows], [r["paper"]["ppl"] for r in rows])}
    info = {**provenance(), **run, **extra, "spearman": correlation, "rows": rows}
    write_json_atomic(workdir / "table3.json", info)
    write_text_atomic(workdir / "table3.md", markdown(info) + "\n")
    draw(info, workdir / "table3.png")


def merge_tables(s: Table3Settings):
    """--merge: the rows of finished Table 3 runs (each's table3.json), in Table 3's order, tabled
    in --workdir; one line where they differ in what they share or hold a row twice."""
    order = {row.name: i for i, row in enumerate(TABLE3)}
    if s.workdir.resolve() in s.merge:  # its table3.json would be replaced by the merged one
        raise UsageError(f"--workdir {s.workdir} is one of the --merge runs: table them in a new work directory")
    first, rows, seen = None, [], {}
    for folder in s.merge:
        try:
            info = json.loads((folder / "table3.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise UserError(f"--merge {folder}: no table3.json there (a Table 3 run writes it when its rows "
                            "are done)") from None
        if not isinstance(info, dict) or not isinstance(info.get("rows"), list) \
                or not all(isinstance(r, dict) and r.get("row") in order for r in info["rows"]):
            raise UserError(f"--merge {folder}/table3.json is not a Table 3 run's table (damaged or edited: "
                            "its rows are not Table 3's); run that Table 3 run's command again to write it")
        run = {k: info.get(k) for k in SHARED_BY_MERGED}
        first = first or (folder, run)
        if run != first[1]:
            key = next(k for k in SHARED_BY_MERGED if run[k] != first[1][k])
            raise UserError(f"--merge: {folder} and {first[0]} differ in {key} ({run[key]!r} vs {first[1][key]!r}); "
                            "a table holds rows of one setting")
        for row in info["rows"]:
            if row["row"] in seen:
                raise UserError(f"--merge: row {row['row']} is in {seen[row['row']]} and in {folder}: give each "
                                "row once")
            seen[row["row"]] = folder
            rows.append(row)
    rows.sort(key=lambda r: order[r["row"]])
    s.workdir.mkdir(parents=True, exist_ok=True)
    write_info(s.workdir, first[1], rows, merged_from=[str(f) for f in s.merge])
    missing = [row.name for row in TABLE3 if row.name not in seen]
    print((s.workdir / "table3.md").read_text(encoding="utf-8")
          + (f"rows not in the merged runs: {', '.join(missing)}\n" if missing else "")
          + table_files(s.workdir))


def table_files(workdir: Path) -> str:
    return f"table: {workdir / 'table3.md'}, {workdir / 'table3.json'}, {workdir / 'table3.png'}"


def markdown(info: dict) -> str:
    head = ["row", "change", "N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls", "train steps",
            "PPL (dev)", "BLEU (dev)", "params ×10^6", "paper PPL", "paper BLEU", "paper params"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in info["rows"]:
        s, p = r["settings"], r["paper"]
        lines.append("| " + " | ".join(str(x) for x in (
            r["row"], r["change"], s["N"], s["d_model"], s["d_ff"], s["h"], s["d_k"], s["d_v"], f"{s['P_drop']:g}",
            f"{s['eps_ls']:g}", r["updates"], f"{r['dev_ppl']:.2f}", f"{r['bleu']:.2f}", f"{r['params'] / 1e6:.1f}",
            f"{p['ppl']:.2f}", f"{p['bleu']:.1f}", p["params_millions"] or "-")) + " |")
    rho = info["spearman"]
    fmt = lambda v: "n/a (fewer than 3 rows or a constant column)" if v is None else f"{v:+.3f}"  # noqa: E731
    lines += ["", f"Spearman rank correlation with the paper's rows ({len(info['rows'])} rows): dev BLEU "
                  f"{fmt(rho['bleu'])}, dev PPL {fmt(rho['ppl'])}."]
    return "\n".join(lines)


def draw(info: dict, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = info["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, ours, paper, name in ((axes[0], "bleu", "bleu", "BLEU (dev)"), (axes[1], "dev_ppl", "ppl", "PPL (dev)")):
        xs, ys = [r["paper"][paper] for r in rows], [r[ours] for r in rows]
        ax.scatter(xs, ys, color="tab:blue")
        for r, x, y in zip(rows, xs, ys):
            ax.annotate(r["row"], (x, y), textcoords="offset points", xytext=(4, 3), fontsize=8)
        rho = info["spearman"]["bleu" if paper == "bleu" else "ppl"]
        ax.set_xlabel(f"the paper's {name}")
        ax.set_ylabel(f"ours ({info['mode']}, {info['max_update']} updates per row)")
        ax.set_title(f"{name}: Spearman rho = {'n/a' if rho is None else f'{rho:+.2f}'}")
        ax.grid(alpha=0.3)
    fig.suptitle("Table 3: each variation of the base model, ours against the paper's")
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- running
def data_command(s: Table3Settings, dry_run: bool = False) -> list:
    """The EN-DE recipe's data stages in --data-workdir (skipping what is done): given as that recipe's
    --data-workdir, so that data prepared there with other options is refused, never redone."""
    mode = {"bundled": ["--bundled"], "smoke": ["--smoke"]}.get(s.mode, [])
    return [sys.executable, "-m", "attn_kit.recipes.translation", "--pair", "en-de", *mode, "--workdir",
            str(s.data_workdir), "--data-workdir", str(s.data_workdir), "--stop-stage", "binarize",
            *(["--dry-run"] if dry_run else [])]


def data_prepared(s: Table3Settings) -> bool:
    """Whether the EN-DE recipe would skip every data stage in --data-workdir."""
    data = translation.build(data_command(s)[3:])
    return scale.all_done(Pipeline(data.workdir, translation.stages(data), True, data.stage, data.stop_stage,
                                   translation.STAGE_ALIASES))


def prepare_data(s: Table3Settings):
    """The EN-DE recipe's data stages (:func:`data_command`), here, their output shown indented;
    nothing when they are done, so that runs starting together (--job-per-group's jobs, or
    groups run by hand) do not meet at the data folder's lock."""
    if data_prepared(s):
        log(f"the EN-DE data in {s.data_workdir} is prepared already")
        return
    cmd = data_command(s, s.dry_run)
    log(f"data: the EN-DE recipe's stages download..binarize in {s.data_workdir}")
    print("  $ " + " ".join(cmd), flush=True)
    rc, last = stream(cmd, lambda line: print("  | " + line, end="", flush=True))
    if rc != 0:
        raise UserError(f"preparing the EN-DE data in {s.data_workdir} failed: {last}")


def canary_stage(s: Table3Settings, row: Table3Row) -> Stage:
    """The canary of one row (attn_kit.recipes.canary): its training for --canary-minutes, then
    its predicted cost (training, validations, checkpoint writes, the dev decoding)."""
    r, values = row_settings(s, row), scaled_settings(row, s.base)
    flags, data_bin, bpe = model_flags(values), s.data_workdir / "data-bin", s.data_workdir / "bpe"
    inputs = [data_bin / f"dict.{lang}.txt" for lang in ("en", "de")]
    return canary.stage(
        r, data_bin, [],
        lambda c, save_dir: common.train_command(c, data_bin, save_dir, flags, label_smoothing=values["eps_ls"]),
        lambda checkpoint: dev_command(r, checkpoint),
        [(bpe / "valid.en", bpe / "valid.de")], flags, inputs, name=f"canary-{row.name}", averages=False)


def write_canary_table(s: Table3Settings):
    """WORKDIR/canary.json: each row's predicted wall time, the EN-DE data preparation once, and the total."""
    canaries = {row.name: s.workdir / "rows" / row.name / "canary" / "canary.json" for row in s.rows}
    rows = {name: json.loads(path.read_text())["predicted_seconds"]["total"] for name, path in canaries.items()}
    data = canary.data_seconds(s.data_workdir, translation.STAGE_NAMES)
    total = sum(rows.values()) + (data or 0.0)
    write_json_atomic(s.workdir / "canary.json", {"rows_predicted_seconds": rows, "data_preparation": data,
                                                      "total": round(total, 1)})
    print("\npredicted wall time of Table 3 (each row's canary, attn_kit.recipes.canary):")
    for name, seconds in [*rows.items(), ("EN-DE data preparation (as it ran)", data), ("all rows", total)]:
        print(f"  {name:<36} {canary.clock(seconds)}")


def stages(s: Table3Settings) -> List[Stage]:
    """A stage per row (with --canary: the row's canary), then the table (the canaries' sum)."""
    W = s.workdir
    if s.canary:
        return [*(canary_stage(s, r) for r in s.rows),
                Stage("canary-table", lambda ctx: ctx.step(f"write {W / 'canary.json'}", write_canary_table, s),
                      "the rows' predicted wall times, summed", outputs=[W / "canary.json"],
                      inputs=[W / "rows" / r.name / "canary" / "canary.json" for r in s.rows])]
    return [*(row_stage(s, r) for r in s.rows),
            Stage("table", lambda ctx: ctx.step(f"write {W}/table3.{{md,json,png}}", write_table, s),
                  "Table 3: ours beside the paper's, with rank correlations",
                  inputs=[W / "rows" / r.name / "row.json" for r in s.rows],
                  outputs=[W / f"table3.{ext}" for ext in ("md", "json", "png")])]


def row_costs(s: Table3Settings) -> dict:
    """{row name: ({GPU type: seconds}, seconds on the paper's 8 P100s)} of every row trained here (not
    those --reuse takes): its training wall time (attn_kit.planning.step_model)."""
    out = {}
    for row in s.rows:
        if row.name in s.reused:
            continue
        r = row_settings(s, row)
        shape = cost.model_shape(r.arch, [*model_flags(scaled_settings(row, s.base)), *s.fairseq_extra],
                                 s.vocab_estimate[0])
        plan = common.plan(r)
        forward = None if plan.max_tokens == settings.AUTO else (plan.max_tokens, plan.update_freq)
        on_gpus = training_cost.gpu_seconds(shape, r.max_update, forward, r.precision_used,
                                            tokens_per_update=r.tokens_per_update, devices=common.devices(r))
        out[row.name] = (on_gpus, r.max_update * training_cost.paper_update_time(shape, r.tokens_per_update).estimate)
    return out


def total_cost(s: Table3Settings) -> List[str]:
    """--dry-run: the training wall time of the rows trained here, summed per GPU type and on the
    paper's P100s, one after the other as the rows run; with --job-per-group, also the longest
    group's (the groups' jobs run side by side)."""
    costs = row_costs(s)
    if not costs:
        return ["every row is a finished run (--reuse): nothing to train"]

    def summed(rows):
        sums = Counter()
        for row in rows:
            sums.update(costs[row][0])
        return (", ".join(f"{name} {cost.hours_text(seconds)}" for name, seconds in sums.items())
                + " (attn_kit.planning.step_model); on the paper's 8 P100s (fp32) "
                + cost.hours_text(sum(costs[row][1] for row in rows)))

    devices = f"{common.devices(s)} {'GPUs' if s.ngpus else 'CPU processes'}"
    reused = f"; {', '.join(sorted(s.reused))} from finished runs (--reuse), not counted" if s.reused else ""
    lines = [f"Table 3 in all: {len(costs)} rows trained one after the other on {devices}{reused}: "
             + summed(costs)]
    if s.job_per_group:
        groups = {}
        for row in s.rows:
            if row.name in costs:
                groups.setdefault(row.group, []).append(row.name)
        group, longest = max(groups.items(), key=lambda item: sum(costs[name][1] for name in item[1]))
        lines.append(f"--job-per-group: {len(groups)} training jobs of {devices} each, side by side: the table is "
                     f"done after the longest, group {group} ({len(longest)} row{'s' if len(longest) > 1 else ''}): "
                     + summed(longest))
    return lines


GROUP_RUNS = "groups"  # --job-per-group: WORKDIR/groups/GROUP is each group's run
MERGE_SCRIPT = "merge.sbatch"


def group_runs(s: Table3Settings) -> List[Table3Settings]:
    """--job-per-group: each group's run, as its job runs it: the group's rows of --rows (and the
    --reuse of those rows) in WORKDIR/groups/GROUP, on the same --data-workdir."""
    runs = []
    for group in dict.fromkeys(row.group for row in s.rows):
        rows = tuple(row for row in s.rows if row.group == group)
        reused = {row.name: s.reused[row.name] for row in rows if row.name in s.reused}
        argv = [*scale.without(s.recipe_argv, {"--rows": 1, "--reuse": 1, "--job-per-group": 0,
                                               "--data-workdir": 1}),
                "--rows", ",".join(row.name for row in rows), "--data-workdir", str(s.data_workdir),
                *(x for name, folder in reused.items() for x in ("--reuse", f"{name}={folder}"))]
        runs.append(dataclasses.replace(s, rows=rows, reused=reused, workdir=s.workdir / GROUP_RUNS / group,
                                        recipe_argv=argv, job_per_group=False))
    return runs


def group_jobs(s: Table3Settings, data_job: bool) -> list:
    """--job-per-group: (script, text, the jobs it waits for) of each group's training job (after
    the data job, which is the first if ``data_job``), then of the job that merges their tables
    into WORKDIR once all ended well."""
    runs, wait = group_runs(s), (0,) if data_job else ()
    jobs = [(str(Path(GROUP_RUNS) / run.workdir.name / slurm.SCRIPT),
             scale.train_script(run, stages(run)[0].name, "table")[1], wait) for run in runs]
    merge = [sys.executable, "-m", s.recipe_module, *([] if s.mode == "paper" else [f"--{s.mode}"]),
             "--workdir", str(s.workdir), "--merge", *(str(run.workdir) for run in runs)]
    log(f"Slurm merge job: Table 3 from the {len(runs)} groups' tables in {s.workdir}")
    alloc = slurm.Allocation(cpus_per_task=1, mem="4G", partition=s.prep_partition or s.partition,
                             time_limit=s.prep_time or s.time_limit, account=s.account)
    text = slurm.sbatch_script(merge, s.workdir, MERGE_SCRIPT, alloc, env=slurm.job_environment(), cwd=Path.cwd())
    return [*jobs, (MERGE_SCRIPT, text, tuple(range(len(wait), len(wait) + len(jobs))))]


def data_job(s: Table3Settings):
    """--launcher slurm: (script name, text) of a job that prepares the EN-DE data, or None when it
    is prepared already (the EN-DE recipe would skip every data stage)."""
    if data_prepared(s):
        log(f"the EN-DE data in {s.data_workdir} is prepared already: no data job")
        return None
    cpus = scale.data_job_cpus(s)
    return scale.prep_script(s, [*data_command(s), "--workers", str(cpus)], cpus,
                             f"the EN-DE data stages in {s.data_workdir}", watch=s.data_workdir)


def locked(s: Table3Settings):
    """The work directory's lock; none for --dry-run, which writes nothing."""
    return contextlib.nullcontext() if s.dry_run else workdir_lock(s.workdir)


def main(argv=None):
    s = build(argv)
    if s.merge:
        if s.dry_run:
            log(f"--merge: would table the rows of {', '.join(map(str, s.merge))} in {s.workdir}")
        else:
            with workdir_lock(s.workdir):
                merge_tables(s)
        return 0
    pipeline_stages = stages(s)
    scale.check_devices(s, pipeline_stages, training=lambda stage: not stage.name.startswith(("table", "canary-t")))
    slurm_jobs = s.launcher == "slurm"
    if slurm_jobs and not s.dry_run:
        slurm.check_no_job(s.workdir)
    prep = None
    if slurm_jobs and not s.prepare_here:
        prep = data_job(s)
    else:
        with locked(s):
            prepare_data(s)
    if slurm_jobs:
        jobs = [prep] if prep else []
        if s.job_per_group:
            jobs += group_jobs(s, data_job=bool(prep))
        else:
            jobs.append(scale.train_script(s, pipeline_stages[0].name, "table"))
        slurm.submit(jobs, s.workdir, s.dry_run)
    else:
        pipeline = Pipeline(s.workdir, pipeline_stages, s.dry_run, s.stage, s.stop_stage)
        with locked(s):
            pipeline.run()
    if s.dry_run and not s.canary:
        for line in total_cost(s):
            print(f"  # {line}", flush=True)
    if slurm_jobs and s.dry_run and prep:
        log(f"the job of {prep[0]} runs:")
        prepare_data(s)
    if not (slurm_jobs or s.dry_run or s.canary):  # a canary's table: the canary-table stage printed it
        print("\n" + (s.workdir / "table3.md").read_text(encoding="utf-8") + table_files(s.workdir))
    return 0


if __name__ == "__main__":
    main_guard(main, interrupted="interrupted; finished rows are kept, run the same command again to resume")
