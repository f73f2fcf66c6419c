"""The plugin's models and their stock fairseq counterparts, as pairs, for the comparison
(:mod:`lab.compare`) and the benchmarks (:mod:`lab.bench`), which build each side from the
fairseq-train flags made here: ``base`` (``attn_paper_base`` vs ``transformer_wmt_en_de``) and
``big`` (``attn_paper_big`` vs ``transformer_vaswani_wmt_en_de_big``), each side with its own
label-smoothed criterion and shared embeddings (Sec. 3.4).
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence

from attn_kit.fairseq_layer.build import plugin_flags
from attn_kit.planning.sizes import ARCH_SIZES, ModelSize


@dataclass(frozen=True)
class Pair:
    plugin_arch: str
    stock_arch: str


PAIRS = {
    "base": Pair("attn_paper_base", "transformer_wmt_en_de"),
    "big": Pair("attn_paper_big", "transformer_vaswani_wmt_en_de_big"),
}
# Either arch's name selects its pair.
ARCH_ALIASES = {arch: name for name, pair in PAIRS.items() for arch in (pair.plugin_arch, pair.stock_arch)}
MODELS = ("plugin", "stock")
LABEL = {"plugin": "attn_plugin", "stock": "stock fairseq"}


def arch_size(pair: str) -> ModelSize:
    """The size both archs of ``pair`` have by default: Table 3's row of that name
    (N, d_model, d_ff, h, P_drop), as attn_kit.planning.sizes holds it for the plugin's arch."""
    return ARCH_SIZES[PAIRS[pair].plugin_arch]


def model_flags(which: str, pair: str, size: Optional[ModelSize] = None, label_smoothing: float = 0.1,
                joined: bool = True, plugin_extra: Sequence[str] = ()) -> List[str]:
    """fairseq-train flags of the ``which`` side ("plugin" or "stock") of ``pair``:
    arch, ``size`` (None: the arch's own), embedding sharing and criterion.
    ``joined``: one dictionary for source and target, so all three embedding
    matrices are shared; otherwise only the decoder's input and output ones.
    ``plugin_extra``: more flags for the plugin's side only."""
    sizes = size.flags() if size is not None else []
    smoothing = ["--label-smoothing", f"{label_smoothing:g}"]
    arch = PAIRS[pair]
    if which == "plugin":
        return plugin_flags(*smoothing, *sizes, *([] if joined else ["--no-share-all-embeddings"]), *plugin_extra,
                            arch=arch.plugin_arch)
    if which != "stock":
        raise ValueError(f"which: plugin or stock, not {which!r}")
    return ["--arch", arch.stock_arch, "--share-all-embeddings" if joined else "--share-decoder-input-output-embed",
            "--criterion", "label_smoothed_cross_entropy", *smoothing, *sizes]
