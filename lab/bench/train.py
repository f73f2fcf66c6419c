"""Training throughput: attn_plugin's Transformer against stock fairseq's.

    python benchmarks/train_throughput.py                          # CPU, shapes small and base
    python benchmarks/train_throughput.py --ngpus 1 --precision bf16   # GPU, shapes base and big

One training step = forward + label-smoothed loss (each model with its own criterion, as fairseq-train runs it) +
backward + Adam step, on the same synthetic batch (left-padded sources, right-padded targets, lengths 70-100% of the
batch length). Both models are built by fairseq from the flags fairseq-train would get (plugin: attn_paper_base/big;
stock: transformer_wmt_en_de / transformer_vaswani_wmt_en_de_big, --share-all-embeddings) with the same sizes, in
one process. Each trial times a few steps of one model, then of the other, alternating which goes first; the table
gives medians over the trials and the median of the per-trial ratios plugin/stock (> 1: the plugin is faster).

bf16/fp16 run as fairseq's mixed precision does (``--mixed fairseq``, the default; ``fairseq-train --fp16``, and
``--bf16`` where fairseq 0.12 allows it, TPUs): half-precision weights, Adam on an fp32 master copy that takes the
half-precision gradients after each backward pass (fairseq's FP16Optimizer; fp16 with its initial loss scale of
128). ``--mixed autocast`` keeps fp32 weights and runs forward under torch.autocast (``fairseq-train --amp``).

Peak memory: the most bytes one model's training step held (parameters, gradients, Adam state, activations); see
lab.bench.measure. On CUDA the table adds model FLOP utilization: the model FLOPs of the batch's real tokens per
second (``measure.train_utilization``) over the matmul rate measured on this GPU at --precision; the padded
positions' share is recorded beside it.
"""

from attn_kit.fairseq_layer.build import count_parameters, make_dictionary
from attn_kit.cli import Number
from attn_kit.recipes.canary import matmul_rate
from lab.pairs import MODELS
from . import harness, measure
from .models import SHAPES, build, make_sample

BATCH = {  # (sentences, tokens per sentence at most) per device and shape
    "cpu": {"small": (32, 32), "base": (16, 32), "big": (8, 32)},
    "cuda": {"small": (128, 64), "base": (128, 64), "big": (128, 64)},
}


def parse_args(argv=None):
    args = harness.check_common_args(parser().parse_args(argv))
    cuda = args.device == "cuda"
    args.steps = args.steps or (10 if cuda else 3)
    args.warmup = args.warmup if args.warmup is not None else (3 if cuda else 1)
    args.out = harness.resolve_out(args, "train_throughput")
    return args


def parser():
    p = harness.base_parser(__doc__, "runs/benchmarks/train_throughput_<device>_<dtype>.json")
    p.add_argument("--steps", type=Number(int, minimum=1),
                   help="timed steps per model per trial (default 3 on CPU, 10 on CUDA)")
    p.add_argument("--warmup", type=Number(int, minimum=0),
                   help="untimed steps before each model's first trial (default 1 on CPU, 3 on CUDA)")
    p.add_argument("--sentences", type=Number(int, minimum=1),
                   help="sentences per batch (default per shape: CPU 32/16/8 for small/base/big, CUDA 128)")
    p.add_argument("--length", type=Number(int, minimum=1),
                   help="longest source and target in the batch (default CPU 32, CUDA 64)")
    p.add_argument("--compile-layers", action="store_true",
                   help="train the plugin with its --compile-layers option (torch.compile of each layer; "
                        "the first steps compile, so raise --warmup); stock fairseq runs as always")
    p.add_argument("--mixed", default="fairseq", choices=["fairseq", "autocast"],
                   help="how --precision bf16/fp16 trains: fairseq = half-precision weights with an fp32 master "
                        "copy (fairseq's FP16Optimizer, as fairseq-train --fp16); autocast = fp32 weights under "
                        "torch.autocast (fairseq-train --amp). Default fairseq")
    return p


class Trainee:
    """One model with its criterion and optimizer, and its training step."""

    LOSS_SCALE_FP16 = 128.0  # fairseq's --fp16-init-scale

    def __init__(self, which, shape, dictionary, args):
        import torch

        self.which, self.device, self.dtype = which, args.device, args.dtype
        extra = ["--compile-layers"] if args.compile_layers else []
        self.model, self.criterion = build(which, shape, dictionary, args.seed, plugin_extra=extra)
        self.model.to(args.device).train()
        self.params = count_parameters(self.model)
        self.half = args.dtype != "fp32" and args.mixed == "fairseq"
        self.autocast = args.dtype != "fp32" and args.mixed == "autocast"
        adam = dict(lr=1e-4, betas=(0.9, 0.98), eps=1e-9, **({"fused": True} if args.device == "cuda" else {}))
        self.scale = self.LOSS_SCALE_FP16 if args.dtype == "fp16" else 1.0
        if self.half:  # fairseq's FP16Optimizer: half model, fp32 master weights for Adam
            self.model.to(measure.torch_dtype(args.dtype))
            self.weights = [p for p in self.model.parameters() if p.requires_grad]
            self.master = [p.detach().float().clone().requires_grad_() for p in self.weights]
            for m in self.master:
                m.grad = torch.zeros_like(m)
            self.optimizer = torch.optim.Adam(self.master, **adam)
        else:
            self.master = []
            self.optimizer = torch.optim.Adam(self.model.parameters(), **adam)
        self.scaler = torch.amp.GradScaler("cuda") if self.autocast and args.dtype == "fp16" else None

    def step(self, sample):
        import torch

        with measure.autocast(self.device, self.dtype if self.autocast else "fp32"):
            loss, _sample_size, _log = self.criterion(self.model, sample)
        if self.half:
            (loss * self.scale).backward()
            grads = [m.grad for m in self.master]
            with torch.no_grad():
                torch._foreach_copy_(grads, [p.grad for p in self.weights])
                if self.scale != 1.0:
                    torch._foreach_mul_(grads, 1.0 / self.scale)
            self.optimizer.step()
            with torch.no_grad():
                torch._foreach_copy_(self.weights, self.master)
        elif self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.model.zero_grad(set_to_none=True)

    def resident(self):
        """Tensors that live between steps: weights, gradients, master copy, Adam state."""
        return measure.resident_tensors(self.model, self.optimizer) + [t for m in self.master for t in (m, m.grad)]


def bench_shape(shape, args, log):
    dictionary = make_dictionary(SHAPES[shape].vocab)
    sentences, length = BATCH[args.device][shape]
    sentences, length = args.sentences or sentences, args.length or length
    sample = make_sample(dictionary, sentences, length, length, args.seed, args.device)
    models = {w: Trainee(w, shape, dictionary, args) for w in MODELS}
    for m in models.values():
        for _ in range(args.warmup):
            m.step(sample)
    tokens = sample["ntokens"]
    tps, ratios = measure.alternating_trials(
        lambda w: tokens * args.steps / measure.time_calls(args.device, lambda: models[w].step(sample), args.steps),
        args.repeats, log, shape, "tok/s", ".0f")
    peak = {w: measure.measure_peak(args.device, m.resident(), lambda: m.step(sample)) for w, m in models.items()}
    result = {"batch": {"sentences": sentences, "max_length": length, "target_tokens": tokens},
              "ratio_tokens_per_s": measure.median(ratios), "trial_ratios": ratios,
              "ratio_peak_bytes": peak["plugin"] / peak["stock"]}
    for w, m in models.items():
        result[w] = {"params": m.params, "tokens_per_s": measure.median(tps[w]), "trials_tokens_per_s": tps[w],
                     "peak_bytes": peak[w]}
        if args.device == "cuda":
            u = measure.train_utilization(shape, sample, measure.median(tps[w]) / tokens, args.matmul_rate)
            result[w].update(u.fields())
    return result


def main(argv=None):
    args = parse_args(argv)
    env = harness.start(args)
    if args.device == "cuda":
        args.matmul_rate = matmul_rate(args.device, args.dtype)
        env["matmul_tflops"] = args.matmul_rate / 1e12
        harness.progress(f"measured {args.dtype} matmul rate: {args.matmul_rate / 1e12:.1f} TFLOP/s")
    results = harness.run_shapes(args, bench_shape, f"{args.steps} steps each")
    cuda = args.device == "cuda"
    header = harness.table_header("tok/s") + (["plugin MFU", "stock MFU"] if cuda else [])
    rows = [harness.table_row(shape, r, "tokens_per_s", ".0f")
            + ([f"{r['plugin']['mfu']:.1%}", f"{r['stock']['mfu']:.1%}"] if cuda else [])
            for shape, r in results.items()]
    mixed = f" ({args.mixed} mixed precision)" if args.dtype != "fp32" else ""
    harness.report("train_throughput", args, env, f"training throughput{mixed}", header, rows,
                   {"mixed": args.mixed, "compile_layers": args.compile_layers, "steps": args.steps,
                    "warmup": args.warmup}, results)
