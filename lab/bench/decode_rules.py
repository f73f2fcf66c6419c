"""Decoding as the paper's code did, measured: a trained run's test set (and any other test set given, e.g.
newstest2014) translated with each beam-search stopping rule, tensor2tensor's (the paper's,
attn_plugin/beam_search.py) and fairseq's, under the paper's decoding (beam 4, GNMT alpha 0.6, input + 50), plus the
run's own decoding; BLEU every way the recipes report it, fairseq's own sentences/s, and how many translations the
two rules share; then the cost of ``--print-alignment`` (the same decoding, alignments printed) as a ratio.

    python benchmarks/decode_rules.py --run runs/wmt14_en_de_bundled \\
        --test-set newstest2014 ../shared/data/wmt14/plain/newstest2014.en ../shared/data/wmt14/plain/newstest2014.de

A test set besides the run's own goes through the run's pre-processing (Moses tokenization, its BPE codes and
vocabulary, its dictionaries; attn_kit.recipes.translation). Trials alternate the decodings; sentences/s is the
median of the trials (fairseq's timer covers the searches only).
"""
import argparse
import dataclasses
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from attn_kit.cli import ArgumentParser, Number, UsageError, UserError, add_output_option, check_output, log
from attn_kit.fairseq_layer.fairseq_commands import DecodePlan, preprocess_command
from attn_kit.metrics.bleu import read_lines
from attn_kit.metrics.scores import translation_scores
from attn_kit.pipeline.process import console_script
from attn_kit.pipeline.text import moses_tokenize
from attn_kit.recipes.translation import VOCABULARY_THRESHOLD
from attn_kit.results import write_results_file
from .ctranslate2_run import _card, generate_command, run_fairseq

PAPER = {"beam": 4, "alpha": 0.6}  # Sec. 6.1 (max length: the recipes' input + 50)
DECODINGS = {  # name: how it changes the run's own decoding plan (attn_kit.fairseq_layer.fairseq_commands.DecodePlan)
    "paper, t2t stop": dict(beam=4, alpha=0.6, beam_stop="t2t"),
    "paper, fairseq stop": dict(beam=4, alpha=0.6, beam_stop="fairseq"),
    # the paper's code let </s> come first (an empty translation); fairseq's --min-len 1 forbids it
    "paper, t2t stop, --min-len 0": dict(beam=4, alpha=0.6, beam_stop="t2t", min_len=0),
}
NAMES = {"own": "the run's own", "t2t": "paper, t2t stop", "fairseq": "paper, fairseq stop",
         "min0": "paper, t2t stop, --min-len 0", "alignment": "paper, t2t stop, --print-alignment"}  # --decodings
NOTES = {"same_output_t2t_vs_fairseq_stop": ": same translation under both stopping rules {}",  # a test set's, printed
         "same_output_min_len_1_vs_0": "; the same with --min-len 1 and 0 {}",
         "print_alignment_time_ratio": "; --print-alignment takes {:.2f}x the time"}


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, required=True, help="a trained translation run's work directory")
    p.add_argument("--test-set", nargs=3, action="append", default=[], metavar=("NAME", "SOURCE", "REFERENCE"),
                   help="another test set, raw text one sentence a line (repeatable)")
    p.add_argument("--decodings", default=",".join(NAMES),
                   help=f"comma-separated decodings from {', '.join(NAMES)} (default: all)")
    p.add_argument("--trials", type=Number(int, minimum=1), default=2,
                   help="alternating trials of each decoding (default 2)")
    p.add_argument("--threads", type=Number(int, minimum=1), default=2,
                   help="CPU threads of fairseq-generate (default 2)")
    add_output_option(p, "the results file to write (JSON; required)")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")
    return p.parse_args(argv)


def prepare(run_dir: Path, info: dict, name: str, source: Path, work: Path) -> Path:
    """``source`` through the run's pre-processing, binarized (source side) with the run's dictionaries."""
    args = info["args"]
    src, tgt = args["source_lang"], args["target_lang"]
    tok, bpe, data = work / f"{name}.tok.{src}", work / f"{name}.bpe", work / f"{name}-bin"
    moses_tokenize(source, tok, src, workers=2)
    with open(tok, "rb") as fin, open(f"{bpe}.{src}", "wb") as fout:
        subprocess.run([console_script("subword-nmt"), "apply-bpe", "-c", str(run_dir / args["bpe_codes"]),
                        "--vocabulary", str(run_dir / args["bpe_vocabulary"]), "--vocabulary-threshold",
                        str(args.get("bpe_vocabulary_threshold", VOCABULARY_THRESHOLD))],
                       stdin=fin, stdout=fout, check=True)
    dictionaries = run_dir / info["data"]
    subprocess.run(preprocess_command(src, tgt, data, {"test": bpe}, only_source=True,
                                      srcdict=dictionaries / f"dict.{src}.txt", workers=2,
                                      program=console_script("fairseq-preprocess")), check=True, capture_output=True)
    shutil.copy(dictionaries / f"dict.{tgt}.txt", data / f"dict.{tgt}.txt")
    return data


def scores(hyps_tok, refs, tgt) -> dict:
    """BLEU every way the recipes report it (attn_kit.metrics.scores.translation_scores), without the texts."""
    out = translation_scores(hyps_tok, refs, tgt)
    out.pop("detokenized")
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.out is None:
        raise UsageError("give --output FILE: the results file to write")
    check_output(args.out, "--output", force=args.force)
    for name, source, reference in args.test_set:  # before the run card, whose reading imports fairseq (seconds)
        for path in (source, reference):
            if not Path(path).is_file():
                raise UserError(f"--test-set {name}: {path} is not a file")
    run_dir = args.run.resolve()
    info = _card(run_dir)
    tgt = info["args"]["target_lang"]
    own = dict(info["generation"], gnmt_alpha=info["args"].get("gnmt_alpha"), beam_stop=info["args"].get("beam_stop"))
    own_plan = DecodePlan.from_card(info, info["batch_size"])
    every = {"the run's own": generate_command(run_dir, info, gpu=False, batch_size=info["batch_size"]),
             **{k: generate_command(run_dir, info, gpu=False, batch_size=info["batch_size"],
                                    plan=dataclasses.replace(own_plan, **change)) for k, change in DECODINGS.items()}}
    every["paper, t2t stop, --print-alignment"] = every["paper, t2t stop"] + ["--print-alignment"]
    asked = [d.strip() for d in args.decodings.split(",") if d.strip()]
    unknown = [d for d in asked if d not in NAMES]
    if unknown or not asked:
        raise UsageError(f"--decodings: unknown {unknown[0] if unknown else args.decodings!r}; choose from "
                         f"{', '.join(NAMES)}")
    decodings = {NAMES[d]: every[NAMES[d]] for d in NAMES if d in asked}
    result = {"run": str(args.run), "run_decoding": own, "paper_decoding": dict(PAPER, max_len="input + 50"),
              "threads": args.threads, "trials": args.trials, "test_sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        sets = {"the run's test set": (run_dir / info["data"], Path(info["results"]["test_reference"]))}
        for name, source, reference in args.test_set:
            log(f"{name}: the run's pre-processing (tokenize, BPE, binarize)")
            sets[name] = (prepare(run_dir, info, name.replace(" ", "_"), Path(source), Path(tmp)), Path(reference))
        for name, (data, reference) in sets.items():
            refs = read_lines(reference)
            rates, outputs = {k: [] for k in decodings}, {}
            for trial in range(args.trials):
                for decoding, cmd in decodings.items():
                    cmd = [cmd[0], str(data), *cmd[2:]]
                    rate, hyps = run_fairseq(cmd, args.threads, len(refs))
                    rates[decoding].append(rate)
                    outputs[decoding] = hyps
                    log(f"{name}, trial {trial + 1}/{args.trials}, {decoding}: {rate:.1f} sentences/s")
            rows = {}
            for decoding in decodings:
                row = {"sentences_per_s": statistics.median(rates[decoding]), "trials_sentences_per_s": rates[decoding]}
                if "--print-alignment" not in decoding:
                    row.update(scores(outputs[decoding], refs, tgt))
                    row["empty_outputs"] = sum(not hyp.strip() for hyp in outputs[decoding])
                rows[decoding] = row
            entry = result["test_sets"][name] = {"sentences": len(refs), "reference": str(reference),
                                                 "decodings": rows}
            for key, other in (("same_output_t2t_vs_fairseq_stop", "fairseq"), ("same_output_min_len_1_vs_0", "min0")):
                if {NAMES["t2t"], NAMES[other]} <= set(outputs):
                    entry[key] = sum(a == b for a, b in zip(outputs[NAMES["t2t"]], outputs[NAMES[other]]))
            if {NAMES["t2t"], NAMES["alignment"]} <= set(rows):
                entry["print_alignment_time_ratio"] = (rows[NAMES["t2t"]]["sentences_per_s"]
                                                       / rows[NAMES["alignment"]]["sentences_per_s"])
    write_results_file(args.out, [Path(sys.executable).name, "benchmarks/decode_rules.py", *(argv or sys.argv[1:])],
                       result)
    for name, t in result["test_sets"].items():
        notes = "".join(note.format(t[k]) for k, note in NOTES.items() if k in t)
        print(f"\n{name} ({t['sentences']} sentences){notes}")
        for decoding, row in t["decodings"].items():
            print(f"  {decoding:36s} {row['sentences_per_s']:7.1f} sent/s"
                  + (f"  sacreBLEU {row['sacrebleu']:.2f}  t2t {row['bleu_t2t']:.2f}  t2t-2018 {row['bleu_t2t_2018']:.2f}"
                     f"  empty {row['empty_outputs']}" if "sacrebleu" in row else ""))
    print(f"\nwrote {args.out}")
    return 0
