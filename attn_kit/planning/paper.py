"""The paper's numbers (Vaswani et al., 2017), each written down once: Table 2 (newstest2014 BLEU), Table 3
(variations of the base model on newstest2013, with the fairseq-train flags that turn ``--arch
attn_paper_base`` into each) and Table 4 (WSJ section 23 F1), as data the recipes, scripts and tests read."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional

# Table 2: BLEU on newstest2014 (tokenized; compound-split for EN-DE), keyed by (pair, arch).
# Big EN-FR: Table 2 says 41.8, the text of Sec. 6.1 says 41.0.
TABLE2_BLEU = {("en-de", "attn_paper_base"): 27.3, ("en-de", "attn_paper_big"): 28.4,
               ("en-fr", "attn_paper_base"): 38.1, ("en-fr", "attn_paper_big_en_fr"): 41.8}
TABLE2_FLOPS = {"attn_paper_base": 3.3e18, "attn_paper_big": 2.3e19}
# How Table 2 got those costs (its footnote): "multiplying the training time, the number of GPUs used, and
# an estimate of the sustained single-precision floating-point capacity of each GPU" (P100: 9.5 TFLOPS).
# Sec. 5.2: one machine with 8 P100s; base 100K steps in 12 hours, big 300K steps in 3.5 days.
TABLE2_TRAINING = {"attn_paper_base": {"hours": 12.0, "gpus": 8, "gpu": "P100", "time": "12 hours"},
                   "attn_paper_big": {"hours": 3.5 * 24, "gpus": 8, "gpu": "P100", "time": "3.5 days"}}
P100_SUSTAINED_TFLOPS = 9.5
# Sec. 5.2: "each training step took about 0.4 seconds" (base); big: "step time was 1.0 seconds".
PAPER_STEP_SECONDS = {"attn_paper_base": 0.4, "attn_paper_big": 1.0}
# Sec. 6.1: "averaging the last 5 checkpoints, which were written at 10-minute intervals" (base;
# big: the last 20).
CHECKPOINT_INTERVAL_SECONDS = 600

# Sec. 6.1's decoding, which Sec. 6.2 uses for Table 3: beam 4, GNMT length penalty alpha 0.6, outputs up
# to the input's length + 50 (recipes/configs/wmt14.yaml's paper section holds the same, by a test).
PAPER_BEAM, PAPER_ALPHA, PAPER_MAX_LEN_B = 4, 0.6, 50

# Table 4: WSJ section 23 F1 of the 4-layer Transformer.
TABLE4_F1 = {"wsj": 91.3, "semi-supervised": 92.7}

# The shared EN-DE BPE vocabulary of Sec. 5.1, with which Table 3 counts parameters.
EN_DE_VOCAB = 37000

# Table 3's base row: N d_model d_ff h d_k d_v P_drop eps_ls, train steps (Sec. 6.2).
BASE = dict(N=6, d_model=512, d_ff=2048, h=8, d_k=64, d_v=64, P_drop=0.1, eps_ls=0.1, steps=100000)

# How a Table 3 setting becomes fairseq-train flags on --arch attn_paper_base.
_FLAGS = {
    "N": ("--encoder-layers", "--decoder-layers"),
    "d_model": ("--encoder-embed-dim", "--decoder-embed-dim"),
    "d_ff": ("--encoder-ffn-embed-dim", "--decoder-ffn-embed-dim"),
    "h": ("--encoder-attention-heads", "--decoder-attention-heads"),
    "d_k": ("--attention-key-dim",),
    "d_v": ("--attention-value-dim",),
    "P_drop": ("--dropout",),
    "eps_ls": ("--label-smoothing",),  # a criterion flag
    "positional_encoding": ("--positional-encoding",),
}


@dataclass(frozen=True)
class Table3Row:
    """One line of Table 3: what changes from base, and what the paper measured
    (dev perplexity per word piece, dev BLEU, parameters x 10^6; None where blank)."""
    group: str                     # base, A, B, C, D, E, big
    name: str                      # a short id: base, A1..A4, B1, ..., big
    change: Dict[str, object]      # settings that differ from BASE (d_k/d_v follow d_model/h unless given)
    ppl: float
    bleu: float
    params: Optional[int] = None
    arch: str = "attn_paper_base"
    label: str = field(default="", compare=False)

    @property
    def settings(self) -> dict:
        """Every column of the row: BASE with the change applied (d_k = d_v = d_model / h
        where the paper changes d_model or h without stating them)."""
        s = dict(BASE, **self.change)
        if self.arch == "attn_paper_big":
            s.update(N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3, steps=300000)
        for key in ("d_k", "d_v"):
            if key not in self.change:
                s[key] = s["d_model"] // s["h"]
        return s

    def flags(self) -> List[str]:
        """fairseq-train flags on ``--arch attn_paper_base`` for this row (the model's and,
        for eps_ls, the criterion's); ``--arch attn_paper_big`` for the big row."""
        if self.arch != "attn_paper_base":
            return ["--arch", self.arch]
        flags, settings = [], self.settings
        for key, value in self.change.items():
            if key in ("d_k", "d_v") and value == settings["d_model"] // settings["h"]:
                continue  # the model's default, d_model / h
            text = f"{value:g}" if isinstance(value, float) else str(value)
            flags += [x for flag in _FLAGS[key] for x in (flag, text)]
        return flags

    def describe(self) -> str:
        return self.label or ", ".join(f"{k}={v}" for k, v in self.change.items())


_row = Table3Row

TABLE3 = [
    _row("base", "base", {}, 4.92, 25.8, 65, label="N=6 d_model=512 d_ff=2048 h=8 d_k=d_v=64"),
    _row("A", "A1", {"h": 1, "d_k": 512, "d_v": 512}, 5.29, 24.9, label="h=1, d_k=d_v=512"),
    _row("A", "A2", {"h": 4, "d_k": 128, "d_v": 128}, 5.00, 25.5, label="h=4, d_k=d_v=128"),
    _row("A", "A3", {"h": 16, "d_k": 32, "d_v": 32}, 4.91, 25.8, label="h=16, d_k=d_v=32"),
    _row("A", "A4", {"h": 32, "d_k": 16, "d_v": 16}, 5.01, 25.4, label="h=32, d_k=d_v=16"),
    _row("B", "B1", {"d_k": 16}, 5.16, 25.1, 58, label="d_k=16"),
    _row("B", "B2", {"d_k": 32}, 5.01, 25.4, 60, label="d_k=32"),
    _row("C", "C1", {"N": 2}, 6.11, 23.7, 36, label="N=2"),
    _row("C", "C2", {"N": 4}, 5.19, 25.3, 50, label="N=4"),
    _row("C", "C3", {"N": 8}, 4.88, 25.5, 80, label="N=8"),
    _row("C", "C4", {"d_model": 256, "d_k": 32, "d_v": 32}, 5.75, 24.5, 28, label="d_model=256, d_k=d_v=32"),
    _row("C", "C5", {"d_model": 1024, "d_k": 128, "d_v": 128}, 4.66, 26.0, 168, label="d_model=1024, d_k=d_v=128"),
    _row("C", "C6", {"d_ff": 1024}, 5.12, 25.4, 53, label="d_ff=1024"),
    _row("C", "C7", {"d_ff": 4096}, 4.75, 26.2, 90, label="d_ff=4096"),
    _row("D", "D1", {"P_drop": 0.0}, 5.77, 24.6, label="P_drop=0.0"),
    _row("D", "D2", {"P_drop": 0.2}, 4.95, 25.5, label="P_drop=0.2"),
    _row("D", "D3", {"eps_ls": 0.0}, 4.67, 25.3, label="eps_ls=0.0 (criterion flag)"),
    _row("D", "D4", {"eps_ls": 0.2}, 5.47, 25.7, label="eps_ls=0.2 (criterion flag)"),
    _row("E", "E", {"positional_encoding": "learned"}, 4.92, 25.7, label="learned positional embedding"),
    _row("big", "big", {}, 4.33, 26.4, 213, arch="attn_paper_big",
         label="N=6 d_model=1024 d_ff=4096 h=16 P_drop=0.3"),
]
