"""Beam-search generation throughput: the plugin under fairseq's generator against CTranslate2 exports of the
same weights (``benchmarks/generate_throughput.py --ctranslate2``).

    python benchmarks/generate_throughput.py --ctranslate2 --shapes small,base     # CPU: float32, int8
    python benchmarks/generate_throughput.py --ctranslate2 --ngpus 1 --precision fp16   # GPU: float16, int8_float16

The plugin's Transformer (``attn_paper_base`` at the shape's sizes, the paper's sinusoids, weights from ``--seed``)
decodes a synthetic batch with fairseq's ``SequenceGenerator`` (what fairseq-generate and scripts/translate.py
run); CTranslate2 decodes the same sentences with the same weights and beam, exported by
:func:`attn_kit.inference.ctranslate2.build_spec` (float32 and int8; on CUDA the ``--precision``'s type and its int8
variant). Default batch on CPU: 64 sentences (scripts/translate.py's default) of up to 24 tokens.

Engines (T = torch's threads, ``--threads``): ``plugin``, one process on T threads (as scripts/translate.py runs);
``plugin, T procs``, T one-thread processes each decoding 1/T of the batch, timed together (CPU, T > 1: the
plugin's best use of T cores); ``ct2 <type>``, one batch on ``intra_threads`` = T; ``ct2 <type>, T x 1 thread``,
``inter_threads`` = T, the batch cut in T (CPU, T > 1: CTranslate2's throughput set-up, which scripts/translate.py's
engine does not use). Ratios are to ``plugin``; compare with ``plugin, T procs`` too.

With random weights where a hypothesis ends is arbitrary (and would differ between float32 and int8 and between
the engines' roundings), so no engine may end early: every hypothesis is exactly ``length`` tokens plus ``</s>``
(fairseq: ``min_len = max_len = length``; CTranslate2: ``min_decoding_length = max_decoding_length = length + 1``),
and each engine runs ``length + 1`` decoder steps over ``beam`` hypotheses, encoder included, from token ids
(fairseq) or strings (CTranslate2) to the best hypotheses. Each trial runs every engine once, the order rotating;
medians, and medians of the per-trial ratios. "same output": best hypotheses whose first ``length`` tokens equal the
plugin's (float32 agrees but for near-ties: CTranslate2 masks ``</s>`` before its softmax, fairseq after; int8
changes the numbers). A trained model's outputs are shorter; the work per token is the same.
"""
import copy
import math
import tempfile
from pathlib import Path

from attn_kit.fairseq_layer.build import count_parameters, make_dictionary
from attn_kit.cli import UserError
from attn_kit.inference.ctranslate2 import build_spec, require_ctranslate2, save_spec
from . import measure
from .harness import quiet_fairseq
from .models import SHAPES, build, make_sample

COMPUTE_TYPES = {  # the exported weight types compared, per device and --precision
    ("cpu", "fp32"): ("float32", "int8"),
    ("cuda", "fp32"): ("float32", "int8_float32"),
    ("cuda", "fp16"): ("float16", "int8_float16"),
    ("cuda", "bf16"): ("bfloat16", "int8_bfloat16"),
}
BATCH = {"cpu": (64, 24), "cuda": (128, 32)}  # (sentences, source length at most)


def engines(args):
    return COMPUTE_TYPES[(args.device, args.dtype)]


def sources(sample, dictionary):
    """The sample's left-padded sources as token strings, without padding and the final </s>
    (CTranslate2 appends it, as the export's config says)."""
    rows = sample["net_input"]["src_tokens"].tolist()
    return [[dictionary[i] for i in [t for t in row if t != dictionary.pad()][:-1]] for row in rows]


def subsample(sample, rows):
    """The sentences ``rows`` of ``sample`` (the padded width stays: fairseq's limit is the same)."""
    net = sample["net_input"]
    return {"id": sample["id"][rows], "nsentences": len(rows),
            "net_input": {"src_tokens": net["src_tokens"][rows], "src_lengths": net["src_lengths"][rows]}}


def _setup(shape, args, sentences, length, threads):
    """(dictionary, sample, plugin model, generator) as every process of the benchmark builds them."""
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    torch.set_num_threads(threads)
    dictionary = make_dictionary(SHAPES[shape].vocab)
    sample = make_sample(dictionary, sentences, length, length, args.seed, args.device)
    model, _ = build("plugin", shape, dictionary, args.seed)
    model.eval()
    model = model.to(device=args.device, dtype=measure.torch_dtype(args.dtype))
    # every hypothesis: exactly `length` tokens, then </s> (see the module docstring)
    generator = SequenceGenerator([model], dictionary, beam_size=args.beam, max_len_a=1, max_len_b=0,
                                  max_len=length + 2, min_len=length)
    return dictionary, sample, model, generator


def _worker(shape, args, sentences, length, rows, start, done, rounds):
    """A 1-thread plugin process decoding the sentences ``rows``, once per barrier round."""
    import torch

    quiet_fairseq()
    _, sample, model, generator = _setup(shape, args, sentences, length, 1)
    part = subsample(sample, rows)
    for _ in range(rounds):
        start.wait()
        with torch.inference_mode():
            generator.generate([model], part)
        done.wait()


class PluginProcesses:
    """T one-thread processes, each decoding its share of the batch; ``run()`` times one round."""

    def __init__(self, shape, args, sentences, length, procs, rounds):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.start, self.done = ctx.Barrier(procs + 1), ctx.Barrier(procs + 1)
        share = math.ceil(sentences / procs)
        self.procs = [ctx.Process(target=_worker, daemon=True,
                                  args=(shape, args, sentences, length,
                                        list(range(i * share, min(sentences, (i + 1) * share))),
                                        self.start, self.done, rounds))
                      for i in range(procs)]
        for p in self.procs:
            p.start()

    def run(self):
        self.start.wait()
        self.done.wait()

    def close(self):
        for p in self.procs:
            p.join(timeout=60)


def bench_shape(shape, args, log):
    import torch

    ct2 = require_ctranslate2()
    if args.device == "cuda" and ct2.get_cuda_device_count() == 0:
        raise UserError("--ngpus 1: CTranslate2 sees no CUDA GPU")
    sentences, length = BATCH[args.device]
    sentences, length = args.sentences or sentences, args.length or length
    threads = torch.get_num_threads()
    dictionary, sample, model, generator = _setup(shape, args, sentences, length, threads)
    src = sources(sample, dictionary)
    parallel = args.device == "cpu" and threads > 1
    runs, sizes, outputs = {}, {}, {}

    def plugin():
        torch.set_num_threads(threads)  # CTranslate2 sets OpenMP's thread count for the process (1 for inter_threads)
        with torch.inference_mode():
            outputs["plugin"] = [h[0]["tokens"][:length].tolist() for h in generator.generate([model], sample)]

    runs["plugin"] = plugin
    procs = None
    if parallel:
        procs = PluginProcesses(shape, args, sentences, length, threads, args.warmup + args.repeats)
        runs[f"plugin, {threads} procs"] = procs.run

    def ct2_run(name, translator, batch):
        def run():
            results = translator.translate_batch(src, beam_size=args.beam, max_input_length=0,
                                                 max_decoding_length=length + 1, min_decoding_length=length + 1,
                                                 max_batch_size=batch)
            outputs[name] = [[dictionary.index(t) for t in r.hypotheses[0][:length]] for r in results]
        runs[name] = run

    # the export reads float32 weights on the CPU: from a copy (.float() and .cpu() change a module in place, which
    # left the plugin's own runs in float32 on the CPU whatever --ngpus and --dtype asked)
    cpu_model = copy.deepcopy(model).float().cpu() if args.device == "cuda" or args.dtype != "fp32" else model
    with tempfile.TemporaryDirectory() as tmp:
        for ctype in engines(args):
            out = Path(tmp) / ctype
            save_spec(build_spec(cpu_model, dictionary, dictionary), out, ctype)
            sizes[ctype] = (out / "model.bin").stat().st_size
            ct2_run(f"ct2 {ctype}", ct2.Translator(str(out), device=args.device, intra_threads=threads,
                                                   compute_type=ctype), 0)
            if parallel:
                many = ct2.Translator(str(out), device=args.device, intra_threads=1, inter_threads=threads,
                                      compute_type=ctype)
                ct2_run(f"ct2 {ctype}, {threads} x 1 thread", many, math.ceil(sentences / threads))
    names = list(runs)
    for name in names:
        for _ in range(args.warmup):
            runs[name]()
    rate = lambda name: sentences / measure.time_calls(args.device, runs[name], 1)  # noqa: E731
    sps, ratios = measure.rotating_trials(names, rate, args.repeats, log, f"{shape} ")
    if procs:
        procs.close()
    per_sentence = length + 1  # output tokens, </s> included, every engine
    result = {"batch": {"sentences": sentences, "max_length": length, "beam": args.beam,
                        "output_tokens_per_sentence": per_sentence, "decoder_steps": length + 1},
              "threads": threads, "params": count_parameters(model), "engines": {}}
    for name in names:
        e = {"sentences_per_s": measure.median(sps[name]), "tokens_per_s": measure.median(sps[name]) * per_sentence,
             "trials_sentences_per_s": sps[name]}
        if name != "plugin":
            e.update(ratio_sentences_per_s=measure.median(ratios[name]), trial_ratios=ratios[name])
        if name.startswith("ct2"):
            ctype = name.split()[1].rstrip(",")
            same = sum(a == b for a, b in zip(outputs[name], outputs["plugin"]))
            e.update(compute_type=ctype, model_bytes=sizes[ctype], same_best_hypothesis=f"{same}/{sentences}")
        result["engines"][name] = e
    return result


def table(results: dict, args) -> tuple:
    """(header, rows) of the markdown table for ``results``: one row per shape and engine."""
    header = ["shape", "engine", "sent/s", "tokens/s", "x plugin", "same output"]
    rows = []
    for shape, r in results.items():
        b = r["batch"]
        for name, e in r["engines"].items():
            label = (f"{shape} ({r['params'] / 1e6:.1f}M), {b['sentences']} x {b['output_tokens_per_sentence']} "
                     f"tokens, beam {b['beam']}") if name == "plugin" else ""
            ratio = f"**{e['ratio_sentences_per_s']:.2f}**" if "ratio_sentences_per_s" in e else "1"
            rows.append([label, name, f"{e['sentences_per_s']:.1f}", f"{e['tokens_per_s']:.0f}", ratio,
                         e.get("same_best_hypothesis", "")])
    return header, rows
