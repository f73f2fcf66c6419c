"""A trained run's test set: the recipe's own ``fairseq-generate`` against CTranslate2 exports of the model it
evaluated (``benchmarks/generate_throughput.py --ctranslate2 --run RUN_DIR``).

    bash recipes/wmt14_en_de.sh --bundled --workdir runs/bundled
    python benchmarks/generate_throughput.py --ctranslate2 --run runs/bundled

Where lab.bench.ctranslate2 forces random weights to one output length, this measures what a user of a trained
model gets:

- ``fairseq-generate``: the command the recipe's generate stage ran (RUN_DIR/inference.json: checkpoint, beam,
  length penalty and limit), with ``OMP_NUM_THREADS`` = T and the benchmark's ``--batch-size`` (both engines').
  Its rate is fairseq's own "Translated N sentences ... (S sentences/s)" line, which times only the beam searches.
- ``ct2 <type>`` and ``ct2 <type>, T x 1 thread``: the run's model exported by
  :func:`attn_kit.inference.ctranslate2.export` (float32 and int8), decoding the same source tokens (the binarized
  test split) with ``scripts/translate.py --engine ctranslate2``'s engine (:class:`CT2Translator`: the run's beam,
  length limit and penalty, fairseq's scores and batches): one translator batch after batch on T threads; or T
  calls at once on one thread each, every batch cut into calls of at most
  :data:`attn_kit.inference.ctranslate2.PARALLEL_CALL` sentences. Timed from the token lists to the best
  hypotheses, rescoring included.

Each trial runs every engine once, the order rotating; medians. Also reported: the lines equal to
fairseq-generate's (after BPE removal) and each engine's sacreBLEU against the run's test reference.
"""
import dataclasses
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from attn_kit.cli import UserError
from attn_kit.fairseq_layer.fairseq_commands import DecodePlan, generate_command as generate_command_of, thread_env
from attn_kit.inference.ctranslate2 import CT2Translator, export, fairseq_batches
from attn_kit.metrics.scores import sacrebleu_score
from attn_kit.pipeline.process import console_script
from attn_kit.fairseq_layer.plugin import load
from attn_kit.recipes.common import read_hypotheses
from . import measure
from .ctranslate2 import engines
from .harness import markdown_table, progress, publish

TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in [\d.]+s \(([\d.]+) sentences/s")
FAIRSEQ = "fairseq-generate"


def _card(run_dir: Path):
    """RUN_DIR's inference.json, with its results.json under ``results``, checked (attn_plugin.run_cards)."""
    run_cards = load("attn_plugin.run_cards")
    try:
        info = run_cards.read_run_card(run_dir)
        info["results"] = run_cards.read_results(run_dir)
    except Exception as exc:  # the schema's ConfigError: one line that names the file and the key
        raise UserError(str(exc)) from None
    if info["kind"] != "translation":
        raise UserError(f"--run {run_dir}: a {info.get('kind')} run; the benchmark times translation runs "
                        "(the WMT14 recipes' or recipes/parallel.sh's)")
    gen = info["generation"]
    needed = [f"generation.{k}" for k in ("beam", "max_len_b") if k not in gen] + \
        ([] if info["batch_size"] else ["batch_size"]) + \
        ([] if "lenpen" in gen or info["args"].get("gnmt_alpha") is not None else ["generation.lenpen"])
    if needed:
        raise UserError(f"{run_dir / run_cards.RUN_CARD} has no '{needed[0]}': the benchmark repeats the recipe's "
                        "fairseq-generate, which needs the run's decoding settings")
    return info


def generate_command(run_dir: Path, info: dict, gpu: bool, batch_size: int, beam_stop=None,
                     plan: "DecodePlan | None" = None) -> list:
    """The recipe's fairseq-generate command for the run's test split (attn_kit.fairseq_layer.fairseq_commands),
    ``batch_size`` sentences a batch; ``beam_stop``: another stopping rule than the run's (with the GNMT penalty;
    CTranslate2's own search stops as fairseq's rule does); ``plan``: another decoding than the run card's."""
    plan = plan or DecodePlan.from_card(info, batch_size)
    if beam_stop and plan.alpha is not None:
        plan = dataclasses.replace(plan, beam_stop=beam_stop)
    cmd = generate_command_of(run_dir / info["data"], run_dir / info["checkpoint"], subset="test", plan=plan,
                              gpus=1 if gpu else 0, program=console_script(FAIRSEQ))
    return cmd + ["--source-lang", info["args"]["source_lang"], "--target-lang", info["args"]["target_lang"]]


def test_sources(run_dir: Path, info: dict) -> list:
    """The binarized test split's source sentences as token strings (without the final </s>)."""
    from fairseq.data import Dictionary, data_utils

    src, tgt = info["args"]["source_lang"], info["args"]["target_lang"]
    data = run_dir / info["data"]
    dictionary = Dictionary.load(str(data / f"dict.{src}.txt"))
    dataset = data_utils.load_indexed_dataset(str(data / f"test.{src}-{tgt}.{src}"), dictionary)
    if dataset is None:
        raise UserError(f"{data} has no binarized test split test.{src}-{tgt}.{src}: rerun the recipe's binarize stage")
    return [[dictionary[i] for i in dataset[k].tolist()[:-1]] for k in range(len(dataset))]


def run_fairseq(cmd, threads: int, sentences: int):
    """(sentences/s by fairseq's own timer, its hypotheses in input order) of one fairseq-generate run."""
    env = dict(os.environ, **(thread_env(threads) or {}), PYTHONWARNINGS="ignore")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gen.out"
        with open(out, "w", encoding="utf-8") as f:
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True, env=env)
        if proc.returncode != 0:
            tail = " ".join(proc.stderr.strip().splitlines()[-1:])
            raise UserError(f"fairseq-generate failed (exit {proc.returncode}): {tail}")
        found = TRANSLATED.findall(proc.stderr)
        if not found:
            raise UserError("fairseq-generate printed no 'Translated N sentences ...' line to time it by")
        n, _, rate = found[-1]
        if int(n.replace(",", "")) != sentences:
            raise UserError(f"fairseq-generate translated {n} sentences, the test split has {sentences}")
        return float(rate), read_hypotheses(out, sentences)


def bench_run(run_dir: Path, info: dict, args, log) -> dict:
    """The trials of every engine on ``run_dir``'s test set (``info``: its inference.json as :func:`_card`
    checked it, with its results.json under ``results``)."""
    import torch
    from fairseq.data.data_utils import post_process

    results = info["results"]
    gpu = args.device == "cuda"
    threads = torch.get_num_threads()
    batch = int(args.batch_size or info["batch_size"])
    cmd = generate_command(run_dir, info, gpu, batch, beam_stop="fairseq")  # the rule CTranslate2's search has
    sources = test_sources(run_dir, info)
    batches = fairseq_batches([len(s) + 1 for s in sources], batch)
    outputs, runs = {}, {}

    def fairseq():
        rate, outputs[FAIRSEQ] = run_fairseq(cmd, threads, len(sources))
        return rate

    runs[FAIRSEQ] = fairseq
    translator = None  # the first export's; its tokenizer detokenizes every engine's output for sacreBLEU

    def ct2(name, engine, parallel):
        def run():
            start = time.perf_counter()
            best = engine.search_batches([[sources[i] for i in b] for b in batches], parallel)
            seconds = time.perf_counter() - start
            out = [None] * len(sources)
            for b, results in zip(batches, best):
                for i, (tokens, _) in zip(b, results):
                    out[i] = tokens
            outputs[name] = out
            return len(sources) / seconds
        runs[name] = run

    with tempfile.TemporaryDirectory() as tmp:
        for ctype in engines(args):
            log(f"  exporting {run_dir / info['checkpoint']} to CTranslate2 ({ctype}) ...")
            out = Path(tmp) / ctype
            export(run_dir, out, ctype)
            # one CT2Translator per set-up: each keeps one CTranslate2 translator loaded
            one = CT2Translator(out, threads=threads, gpu=gpu)
            translator = translator or one
            ct2(f"ct2 {ctype}", one, False)
            if not gpu and threads > 1:
                ct2(f"ct2 {ctype}, {threads} x 1 thread", CT2Translator(out, threads=threads), True)
        names = list(runs)  # fairseq-generate first; every engine warmed up once, then the trials, the order rotating
        for name in names[1:]:  # fairseq-generate's start-up is outside its timer; CTranslate2's warm-up is this
            runs[name]()
        sps, ratios = measure.rotating_trials(names, lambda name: runs[name](), args.repeats, log)

    refs = Path(results["test_reference"]).read_text(encoding="utf-8").split("\n")[:len(sources)] \
        if results.get("test_reference") else None
    detok = translator.tokenizer.decode if translator.tokenizer else (lambda line: line)
    reference = outputs[FAIRSEQ]
    result = {"run": str(run_dir), "checkpoint": info["checkpoint"], "sentences": len(sources),
              "batch_size": batch, "beam": info["generation"]["beam"], "threads": threads,
              "fairseq_generate_command": " ".join(cmd), "engines": {}}
    if "sacrebleu" in results:
        result["run_sacrebleu"] = results["sacrebleu"]
    for name in names:
        # what fairseq-generate --remove-bpe prints
        lines = reference if name == FAIRSEQ else [post_process(" ".join(t), "subword_nmt") for t in outputs[name]]
        e = {"sentences_per_s": measure.median(sps[name]), "trials_sentences_per_s": sps[name]}
        if name != FAIRSEQ:
            e.update(ratio_sentences_per_s=measure.median(ratios[name]), trial_ratios=ratios[name],
                     compute_type=name.split()[1].rstrip(","),
                     same_output=f"{sum(a == b for a, b in zip(lines, reference))}/{len(sources)}")
        if refs is not None:
            e["sacrebleu"] = sacrebleu_score([detok(h) for h in lines], refs)
        result["engines"][name] = e
    return result


def table(result: dict) -> tuple:
    header = ["engine", "sent/s", "x fairseq-generate", "same output", "sacreBLEU"]
    rows = []
    for name, e in result["engines"].items():
        ratio = f"**{e['ratio_sentences_per_s']:.2f}**" if "ratio_sentences_per_s" in e else "1"
        rows.append([name, f"{e['sentences_per_s']:.1f}", ratio, e.get("same_output", ""),
                     f"{e['sacrebleu']:.2f}" if "sacrebleu" in e else ""])
    return header, rows


def main(args, env):
    run_dir = Path(args.run)
    info = _card(run_dir)  # a run that cannot be timed is one line before anything starts
    progress(f"{run_dir}: the recipe's fairseq-generate and CTranslate2 on its test set, {args.repeats} trials ...")
    result = bench_run(run_dir, info, args, progress)
    title = (f"beam-{result['beam']} translation of {result['sentences']} test sentences of {args.run} (batches of "
             f"{result['batch_size']}), fairseq-generate vs CTranslate2 ({args.device}, {result['threads']} threads, "
             f"median of {args.repeats} trials)")
    settings = {"run": str(args.run), "repeats": args.repeats, "compute_types": [
        e["compute_type"] for e in result["engines"].values() if "compute_type" in e]}
    publish("generate_throughput_ctranslate2_run", args.out, env, title, markdown_table(*table(result)), settings,
            result)
