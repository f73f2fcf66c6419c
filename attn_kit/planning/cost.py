"""What a training run computes: analytic FLOPs from the model's shape (Sec. 3; also the benchmarks' and the
canary's model FLOP utilization), Table 2's own arithmetic (its footnote: time x GPUs x sustained TFLOPS) and
the GPUs a run can be planned for (dense peaks, memory). step_model turns the count into time on a GPU,
training_cost prints a run's cost."""
import contextlib
import dataclasses
import io
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from ..fairseq_layer.build import PLUGIN_DIR, parse_train_args
from ..cli import UsageError
from .paper import EN_DE_VOCAB, P100_SUSTAINED_TFLOPS, TABLE2_FLOPS, TABLE2_TRAINING, TABLE3
from .sizes import ARCH_SIZES

# A sentence's tokens, for the attention terms (about WMT14's BPE sentences); the matmuls against weights
# dominate, so the total depends little on it.
MEAN_LENGTH = 30

# Table 2's arch for the archs the recipes train (big EN-FR is the big model with another dropout).
TABLE2_ARCH = {"attn_paper_base": "attn_paper_base", "attn_paper_big": "attn_paper_big",
               "attn_paper_big_en_fr": "attn_paper_big"}


@dataclass(frozen=True)
class Side:
    """One stack of the model: N layers of width d_model, FFN d_ff, h heads of d_k / d_v."""
    layers: int
    d_model: int
    d_ff: int
    h: int
    d_k: int
    d_v: int


@dataclass(frozen=True)
class Shape:
    encoder: Side
    decoder: Side
    vocab: int

    def describe(self) -> str:
        e, d = self.encoder, self.decoder
        sides = (f"N={e.layers}" if e.layers == d.layers else f"N={e.layers}+{d.layers}")
        text = f"{sides}, d_model {e.d_model}, d_ff {e.d_ff}, h {e.h}, d_k {e.d_k}, d_v {e.d_v}"
        if (e.d_model, e.d_ff, e.h, e.d_k, e.d_v) != (d.d_model, d.d_ff, d.h, d.d_k, d.d_v):
            text += f" (decoder: d_model {d.d_model}, d_ff {d.d_ff}, h {d.h}, d_k {d.d_k}, d_v {d.d_v})"
        return text + f", vocabulary {self.vocab}"

    def parameters(self) -> int:
        """Trainable parameters of attn_plugin's model: one shared embedding and pre-softmax matrix (Sec. 3.4;
        sinusoidal positions have none), per layer the attentions' W^Q, W^K, W^V, W^O and the FFN's two maps
        (eq. 2) with biases, and a layer norm (gain and bias) after each sub-layer (Sec. 3.1)."""
        e, d = self.encoder, self.decoder

        def attention(s: Side, width_kv: int) -> int:
            return (s.d_model + 1) * s.h * s.d_k + (width_kv + 1) * s.h * (s.d_k + s.d_v) + (s.h * s.d_v + 1) * s.d_model

        def ffn(s: Side) -> int:
            return (s.d_model + 1) * s.d_ff + (s.d_ff + 1) * s.d_model

        encoder = e.layers * (attention(e, e.d_model) + ffn(e) + 2 * 2 * e.d_model)
        decoder = d.layers * (attention(d, d.d_model) + attention(d, e.d_model) + ffn(d) + 3 * 2 * d.d_model)
        return self.vocab * e.d_model + encoder + decoder


def forward_flops(shape: Shape, src_tokens: float, tgt_tokens: float, src_len: float, tgt_len: float) -> float:
    """Forward FLOPs (a multiply-add is 2) of ``src_tokens`` / ``tgt_tokens`` positions in sentences of
    ``src_len`` / ``tgt_len``: per layer W^Q, W^K, W^V, W^O (Sec. 3.2.2), eq. 1's attention (decoder
    self-attention over half the positions: the causal mask), eq. 2's FFN; the encoder output's W^K, W^V
    per decoder layer; the pre-softmax map (Sec. 3.4). O(d) work per position is left out."""
    e, d = shape.encoder, shape.decoder

    def projections(s: Side, width_in: int) -> float:  # W^Q, W^K, W^V, W^O of one attention
        return 2 * (2 * width_in * s.h * s.d_k + 2 * width_in * s.h * s.d_v)

    def attention(s: Side, keys: float) -> float:  # QK^T and the weighted sum over `keys` positions
        return 2 * keys * s.h * (s.d_k + s.d_v)

    ffn = lambda s: 2 * 2 * s.d_model * s.d_ff  # noqa: E731
    encoder = e.layers * src_tokens * (projections(e, e.d_model) + attention(e, src_len) + ffn(e))
    self_attention = projections(d, d.d_model) + attention(d, tgt_len / 2)
    cross_q_o = 2 * (d.d_model * d.h * d.d_k + d.h * d.d_v * d.d_model) + attention(d, src_len)
    cross_k_v = 2 * (e.d_model * d.h * d.d_k + e.d_model * d.h * d.d_v)
    decoder = d.layers * (tgt_tokens * (self_attention + cross_q_o + ffn(d)) + src_tokens * cross_k_v)
    output = tgt_tokens * 2 * d.d_model * shape.vocab
    return encoder + decoder + output


def train_flops_per_update(shape: Shape, tokens_per_update: float, mean_length: float = MEAN_LENGTH) -> float:
    """Forward + backward (3 x forward) of ``tokens_per_update`` source and as many target positions."""
    return 3.0 * forward_flops(shape, tokens_per_update, tokens_per_update, mean_length, mean_length)


def batch_train_flops(shape: Shape, src_tokens: float, tgt_tokens: float, sentences: float) -> float:
    """Forward + backward of a batch of ``sentences``, eq. 1's terms at its mean lengths: of its real
    tokens, the model FLOPs; of its padded positions, the arithmetic the GPU did."""
    if not sentences:
        return 0.0
    return 3.0 * forward_flops(shape, src_tokens, tgt_tokens, src_tokens / sentences, tgt_tokens / sentences)


@dataclass(frozen=True)
class Utilization:
    """Model FLOP utilization as usually counted: model FLOPs of the real tokens per second over the matmul
    rate measured in the same run (``mfu``); the padding's share beside it; a datasheet peak where it says so."""
    real_tflops_per_second: float    # model FLOPs of the real tokens
    padded_tflops_per_second: float  # the arithmetic done: padded positions counted as work
    padding_share: float             # of the source and target positions computed on
    mfu: Optional[float]             # real / the measured matmul rate (None: no rate measured)
    mfu_of_datasheet_peak: Optional[float]  # real / the GPU's datasheet dense peak (None: none known)

    @classmethod
    def of(cls, real_flops: float, padded_flops: float, real_positions: float, padded_positions: float,
           seconds: float, matmul_flops: Optional[float] = None, peak_flops: Optional[float] = None):
        real, padded = real_flops / seconds, padded_flops / seconds
        return cls(real / 1e12, padded / 1e12, 1 - real_positions / padded_positions if padded_positions else 0.0,
                   real / matmul_flops if matmul_flops else None, real / peak_flops if peak_flops else None)

    def fields(self) -> dict:
        """As a results file records them, to four significant digits (a CPU's TFLOP/s are small)."""
        names = ("real_token_tflops_per_second", "padded_position_tflops_per_second", "padding_share", "mfu",
                 "mfu_of_datasheet_peak")  # the fields' own order
        return {k: None if v is None else float(f"{v:.4g}") for k, v in zip(names, dataclasses.astuple(self))}


# ---------------------------------------------------------------------------------------------- shapes
# fairseq-train flags that change the shape of attn_plugin's archs: (side or None for both, field)
SHAPE_FLAGS = {
    "--encoder-layers": ("encoder", "layers"), "--decoder-layers": ("decoder", "layers"),
    "--encoder-embed-dim": ("encoder", "d_model"), "--decoder-embed-dim": ("decoder", "d_model"),
    "--encoder-ffn-embed-dim": ("encoder", "d_ff"), "--decoder-ffn-embed-dim": ("decoder", "d_ff"),
    "--encoder-attention-heads": ("encoder", "h"), "--decoder-attention-heads": ("decoder", "h"),
    "--attention-key-dim": (None, "d_k"), "--attention-value-dim": (None, "d_v"),
}


def _flag_values(flags: Sequence[str]) -> Dict[str, str]:
    """The last value of each of :data:`SHAPE_FLAGS` in ``flags`` (``--x v`` or ``--x=v``)."""
    flags, found = [str(f) for f in flags], {}
    for i, arg in enumerate(flags):
        name, eq, value = arg.partition("=")
        if name in SHAPE_FLAGS:
            found[name] = value if eq else (flags[i + 1] if i + 1 < len(flags) else "")
    return found


def model_shape(arch: str, flags: Sequence[str] = (), vocab: int = EN_DE_VOCAB) -> Shape:
    """The shape fairseq-train builds from ``--arch arch`` plus ``flags``: attn_plugin's archs from
    :data:`.sizes.ARCH_SIZES` with :data:`SHAPE_FLAGS` applied as the plugin does (the decoder takes the
    encoder's values unless given its own; d_k = d_v = d_model / h unless given); any other arch parsed by
    fairseq (a few seconds to import)."""
    if arch not in ARCH_SIZES:
        return _fairseq_shape(arch, flags, vocab)
    base, given = ARCH_SIZES[arch], _flag_values(flags)

    def value(side, field, default):
        flag = next(f for f, (s, k) in SHAPE_FLAGS.items() if s == side and k == field)
        try:
            return int(given[flag]) if flag in given else default
        except ValueError:
            raise UsageError(f"{flag} {given[flag]!r}: not an integer") from None

    enc = {k: value("encoder", k, getattr(base, k)) for k in ("layers", "d_model", "d_ff", "h")}
    dec = {k: value("decoder", k, enc[k]) for k in ("layers", "d_model", "d_ff", "h")}
    return Shape(*(Side(**s, **{k: value(None, k, s["d_model"] // s["h"]) for k in ("d_k", "d_v")})
                   for s in (enc, dec)), vocab)


def _fairseq_shape(arch: str, flags: Sequence[str], vocab: int) -> Shape:
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # fairseq's parser prints its whole usage before its error
            a = parse_train_args(["--user-dir", str(PLUGIN_DIR), "--arch", arch, *map(str, flags)])
    except SystemExit:
        why = said.getvalue().strip().splitlines()[-1:] or [""]
        raise UsageError(f"fairseq-train does not accept --arch {arch} {' '.join(map(str, flags))}".rstrip()
                         + (f" ({why[0].split('error: ', 1)[-1]})" if why[0] else "")) from None

    def side(prefix: str) -> Side:
        d, h = getattr(a, f"{prefix}_embed_dim"), getattr(a, f"{prefix}_attention_heads")
        return Side(getattr(a, f"{prefix}_layers"), d, getattr(a, f"{prefix}_ffn_embed_dim"), h,
                    getattr(a, "attention_key_dim", None) or d // h, getattr(a, "attention_value_dim", None) or d // h)

    try:
        return Shape(side("encoder"), side("decoder"), vocab)
    except AttributeError:
        raise UsageError(f"--arch {arch}: not an encoder-decoder Transformer this estimate knows") from None


# ---------------------------------------------------------------------------------------------- Table 2
def table2_arithmetic(arch: str) -> float:
    """Table 2's cost of ``arch`` as the paper computed it: hours x GPUs x 9.5 TFLOPS (P100)."""
    t = TABLE2_TRAINING[arch]
    return t["hours"] * 3600 * t["gpus"] * P100_SUSTAINED_TFLOPS * 1e12


def paper_updates(arch: str) -> Optional[int]:
    """The training steps of ``arch`` in the paper (Table 3: base 100K, big 300K)."""
    row = next((r for r in TABLE3 if r.name == {"attn_paper_base": "base", "attn_paper_big": "big"}.get(arch)), None)
    return row.settings["steps"] if row else None


def describe_table2(mean_length: float = MEAN_LENGTH) -> List[str]:
    """Table 2's cost recomputed from its footnote, beside the analytic count of the same training
    (Sec. 5.1: ~25000 source and ~25000 target tokens per update; the shared 37000-token vocabulary)."""
    rows = ["| model | training | Table 2's arithmetic | Table 2 | analytic model FLOPs | analytic / Table 2 |",
            "|---|---|---|---|---|---|"]
    for arch, printed in TABLE2_FLOPS.items():
        t, updates = TABLE2_TRAINING[arch], paper_updates(arch)
        analytic = train_flops_per_update(model_shape(arch, (), EN_DE_VOCAB), 25000, mean_length) * updates
        rows.append(f"| {arch} | {t['time']} x {t['gpus']} {t['gpu']} x {P100_SUSTAINED_TFLOPS:g} TFLOPS | "
                    f"{table2_arithmetic(arch):.2e} | {printed:.1e} | {analytic:.2e} ({updates} updates) | "
                    f"{analytic / printed:.0%} |")
    return rows


# ---------------------------------------------------------------------------------------------- GPUs
@dataclass(frozen=True)
class GPU:
    """Dense peak TFLOPS (NVIDIA datasheets, without sparsity): bf16 and fp16 tensor cores, fp32
    without TF32 (PyTorch's default for fp32 matmuls); None where the GPU has no such unit."""
    bf16: Optional[float]
    fp16: float
    fp32: float
    memory_gib: float = 16  # the smallest variant sold (A100: 40 GB; an 80 GB one sizes itself when visible)
    # how the GPUs of one node exchange gradients, and its datasheet bandwidth per GPU and direction
    link: str = "PCIe"
    link_gb_per_s: float = 32.0

    def peak(self, precision: str) -> Optional[float]:
        return getattr(self, precision)


GPUS = {
    "H200": GPU(989, 989, 67, 141, "NVLink", 450), "H100": GPU(989, 989, 67, 80, "NVLink", 450),
    "H100-PCIe": GPU(756, 756, 51, 80, "PCIe 5", 64), "A100": GPU(312, 312, 19.5, 40, "NVLink", 300),
    "L40S": GPU(362, 362, 91.6, 48, "PCIe 4", 32), "A10": GPU(125, 125, 31.2, 24, "PCIe 4", 32),
    "L4": GPU(121, 121, 30.3, 24, "PCIe 4", 32), "V100": GPU(None, 125, 15.7, 16, "NVLink", 150),
    "T4": GPU(None, 65, 8.1, 16, "PCIe 3", 16), "P100": GPU(None, 21.2, 10.6, 16, "NVLink", 80),
}
# Between nodes: 200 Gb/s per node (InfiniBand HDR), an assumption stated where it is used;
# --interconnect-gb-per-s gives a cluster's own.
NETWORK_GB_PER_S = 25.0


def gpu_name(name: str) -> str:
    """The :data:`GPUS` key of ``name`` (case and an "NVIDIA " prefix ignored)."""
    key = {k.lower(): k for k in GPUS}.get(name.lower().removeprefix("nvidia ").strip())
    if key is None:
        raise UsageError(f"unknown --gpu {name!r}; known: {', '.join(GPUS)} (or give --gpu-tflops X)")
    return key


def gpu(name: str) -> GPU:
    """A GPU of :data:`GPUS` by name (case and an "NVIDIA " prefix ignored)."""
    return GPUS[gpu_name(name)]


def gpu_of_device(device_name: str) -> Optional[str]:
    """The :data:`GPUS` name in a CUDA device name as torch reports it ("NVIDIA H100 80GB HBM3" -> H100,
    "NVIDIA H100 PCIe" -> H100-PCIe), the longest that fits; None for a GPU not listed."""
    words = device_name.upper().replace("-", " ")
    found = [name for name in GPUS if re.search(rf"\b{name.upper().replace('-', ' ')}\b", words)]
    return max(found, key=len) if found else None


def hours_text(seconds: float) -> str:
    hours = seconds / 3600
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    if hours < 1:
        return f"{seconds / 60:.0f} min"
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"
