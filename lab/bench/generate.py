"""Beam-search generation throughput: attn_plugin's Transformer against stock fairseq's.

    python benchmarks/generate_throughput.py                           # CPU, shapes small and base
    python benchmarks/generate_throughput.py --ngpus 1 --precision bf16    # GPU, shapes base and big

Both models decode the same batch of synthetic source sentences with fairseq's own ``SequenceGenerator`` (what
fairseq-generate runs): beam 4, incremental decoding with cached keys and values, output length up to the source
length. So that both do exactly the same search, the plugin runs with ``--sinusoid-layout fairseq`` and the stock
model's weights (``convert_fairseq_transformer_state_dict``): the two compute the same log-probabilities, so they
pick the same hypotheses and decode the same number of steps; the table checks that their outputs agree. Each trial
decodes the batch with one model, then with the other, alternating which goes first; the table gives medians over
the trials and the median of the per-trial ratios plugin/stock of sentences per second (> 1: the plugin is faster).
bf16/fp16 convert both models to that precision, as fairseq-generate --fp16 does for fp16 (fairseq 0.12's generate
has no bf16 of its own).

Peak memory: the most bytes one model's generation held (parameters plus everything beam search allocated); see
lab.bench.measure.

``--ctranslate2`` compares the plugin with CTranslate2 exports of its weights instead (float32 and int8 on CPU),
every hypothesis decoded to the same length in both engines (lab.bench.ctranslate2). ``--ctranslate2 --run
RUN_DIR`` times a trained run instead: the recipe's own fairseq-generate on its test set against CTranslate2 exports
of the model it evaluated (lab.bench.ctranslate2_run).
"""

from pathlib import Path

from attn_kit.fairseq_layer.build import count_parameters, make_dictionary
from attn_kit.cli import Number, UsageError
from lab.pairs import MODELS
from . import ctranslate2, ctranslate2_run, harness, measure
from .models import SHAPES, build, make_sample

BATCH = {  # (sentences, source length at most) per device and shape
    "cpu": {"small": (16, 24), "base": (8, 24), "big": (4, 24)},
    "cuda": {"small": (128, 32), "base": (128, 32), "big": (128, 32)},
}


def parse_args(argv=None):
    p = harness.base_parser(__doc__, "runs/benchmarks/generate_throughput_<device>_<dtype>.json")
    p.add_argument("--beam", type=Number(int, minimum=1), default=4, help="beam size (default 4, the paper's)")
    p.add_argument("--sentences", type=Number(int, minimum=1),
                   help="sentences per batch (default per shape: CPU 16/8/4 for small/base/big, CUDA 128; "
                        "with --ctranslate2: CPU 64)")
    p.add_argument("--length", type=Number(int, minimum=1),
                   help="longest source sentence; outputs stop at the source length (default CPU 24, CUDA 32)")
    p.add_argument("--warmup", type=Number(int, minimum=0), default=1,
                   help="untimed generations per model first (default 1)")
    p.add_argument("--ctranslate2", action="store_true",
                   help="compare the plugin under fairseq's generator with CTranslate2 exports of the same weights "
                        "(CPU: float32 and int8; CUDA: the --precision's type and its int8 variant) instead of with "
                        "stock fairseq; every hypothesis is decoded to the same length in both engines")
    p.add_argument("--run", type=Path, metavar="RUN_DIR",
                   help="with --ctranslate2: a recipe run (its --workdir) instead of the synthetic shapes: the "
                        "run's own fairseq-generate command on its test set against CTranslate2 exports of the "
                        "model it evaluated, on the same sentences, beam, length penalty and batch size "
                        "(lab.bench.ctranslate2_run); trials default to 3")
    p.add_argument("--batch-size", type=Number(int, minimum=1),
                   help="with --run: sentences per batch in both engines (default: the run's, as its generate "
                        "stage decoded)")
    args = p.parse_args(argv)
    if args.run and not args.ctranslate2:
        raise UsageError("--run compares a run's fairseq-generate with CTranslate2: give --ctranslate2 too")
    if args.batch_size is not None and not args.run:
        raise UsageError("--batch-size goes with --run")
    if args.run and args.repeats is None:
        args.repeats = 3  # each trial translates the whole test set with every engine
    args = harness.check_common_args(args, default_repeats_cpu=9)
    args.out = harness.resolve_out(args, "generate_throughput" + ("_ctranslate2" if args.ctranslate2 else "")
                                   + ("_run" if args.run else ""))
    return args


def build_pair(shape, dictionary, args):
    """Stock fairseq's model and the plugin's with the same weights, in eval mode."""
    from attn_plugin.convert import convert_fairseq_transformer_state_dict  # deferred: pulls in fairseq/torch

    stock, _ = build("stock", shape, dictionary, args.seed)
    plugin, _ = build("plugin", shape, dictionary, args.seed, sinusoid_layout="fairseq")
    plugin.load_state_dict(convert_fairseq_transformer_state_dict(stock.state_dict()), strict=True)
    dtype = measure.torch_dtype(args.dtype)
    return {w: m.to(device=args.device, dtype=dtype).eval() for w, m in (("plugin", plugin), ("stock", stock))}


def bench_shape(shape, args, log):
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    dictionary = make_dictionary(SHAPES[shape].vocab)
    sentences, length = BATCH[args.device][shape]
    sentences, length = args.sentences or sentences, args.length or length
    sample = make_sample(dictionary, sentences, length, length, args.seed, args.device)
    models = build_pair(shape, dictionary, args)
    gens = {w: SequenceGenerator([m], dictionary, beam_size=args.beam, max_len_a=1, max_len_b=0, max_len=length + 2,
                                 min_len=1) for w, m in models.items()}
    outputs = {}

    def generate(w):
        with torch.inference_mode():
            outputs[w] = gens[w].generate([models[w]], sample)

    for w in MODELS:
        for _ in range(args.warmup):
            generate(w)
    rate = lambda w: sentences / measure.time_calls(args.device, lambda: generate(w), 1)  # noqa: E731
    sps, ratios = measure.alternating_trials(rate, args.repeats, log, shape, "sent/s", ".2f")
    same = sum(a[0]["tokens"].tolist() == b[0]["tokens"].tolist()
               for a, b in zip(outputs["plugin"], outputs["stock"]))
    out_tokens = sum(len(h[0]["tokens"]) for h in outputs["stock"])
    peak = {w: measure.measure_peak(args.device, list(models[w].parameters()), lambda: generate(w)) for w in MODELS}
    result = {"batch": {"sentences": sentences, "max_length": length, "beam": args.beam,
                        "output_tokens": out_tokens},
              "same_best_hypothesis": f"{same}/{sentences}",
              "ratio_sentences_per_s": measure.median(ratios), "trial_ratios": ratios,
              "ratio_peak_bytes": peak["plugin"] / peak["stock"]}
    for w, m in models.items():
        result[w] = {"params": count_parameters(m), "sentences_per_s": measure.median(sps[w]),
                     "trials_sentences_per_s": sps[w], "peak_bytes": peak[w]}
    return result


def main(argv=None):
    args = parse_args(argv)
    env = harness.start(args)
    if args.ctranslate2:
        return main_ctranslate2(args, env)
    results = harness.run_shapes(args, bench_shape, f"beam-{args.beam} generation")
    header = harness.table_header("sent/s") + ["same output"]
    rows = [harness.table_row(shape, r, "sentences_per_s", ".2f") + [r["same_best_hypothesis"]]
            for shape, r in results.items()]
    harness.report("generate_throughput", args, env, f"beam-{args.beam} generation throughput", header, rows,
                   {"beam": args.beam, "warmup": args.warmup}, results)


def main_ctranslate2(args, env):
    """``--ctranslate2``: the plugin against CTranslate2 (lab.bench.ctranslate2)."""
    env["ctranslate2"] = ctranslate2.require_ctranslate2().__version__
    if args.run:
        return ctranslate2_run.main(args, env)
    results = harness.run_shapes(args, ctranslate2.bench_shape, f"beam-{args.beam} generation, plugin and CTranslate2")
    title = (f"beam-{args.beam} generation throughput, plugin (fairseq's generator) vs CTranslate2 ({args.device}, "
             f"{args.dtype}, {env['threads']} threads, median of {args.repeats} trials, every hypothesis "
             f"{results[args.shapes[0]]['batch']['output_tokens_per_sentence']} tokens)")
    settings = {"beam": args.beam, "warmup": args.warmup, "repeats": args.repeats, "seed": args.seed,
                "shapes": args.shapes, "fixed_output_length": True, "compute_types": list(ctranslate2.engines(args))}
    harness.publish("generate_throughput_ctranslate2", args.out, env, title,
                    harness.markdown_table(*ctranslate2.table(results, args)), settings, results)
