"""Named model sizes: the small configurations of the paper's model that the recipes, benchmarks and tests
run, each defined here once, as flags on top of an arch the plugin registers (attn_plugin/models/
attn_transformer.py): N layers in encoder and decoder, d_model, d_ff, h heads (Sec. 3), and P_drop where the
size fixes it."""
import dataclasses
from dataclasses import dataclass
from typing import List, Optional


@dataclass(frozen=True)
class ModelSize:
    layers: int          # N, for encoder and decoder alike
    d_model: int
    d_ff: int
    h: int               # attention heads; d_k = d_v = d_model / h unless set otherwise
    p_drop: Optional[float] = None  # residual dropout; None: the arch's

    def flags(self) -> List[str]:
        """fairseq-train flags that resize ``--arch attn_paper_base`` (or a stock transformer arch)."""
        flags = [str(f) for side in ("encoder", "decoder")
                 for f in (f"--{side}-layers", self.layers, f"--{side}-embed-dim", self.d_model,
                           f"--{side}-ffn-embed-dim", self.d_ff, f"--{side}-attention-heads", self.h)]
        return flags + (["--dropout", f"{self.p_drop:g}"] if self.p_drop is not None else [])

    def replace(self, **changes) -> "ModelSize":
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        text = f"{self.layers}+{self.layers} layers, d_model {self.d_model}, d_ff {self.d_ff}, h {self.h}"
        return text + (f", P_drop {self.p_drop:g}" if self.p_drop is not None else "")


SIZES = {
    # `--bundled` (recipes/wmt14_en_de.sh): as large as its 1000 updates on 2 CPU cores allow in the
    # bundled run's time budget. P_drop 0 (Table 3 row D's other end): 1000 updates on 150K short pairs
    # are far from overfitting, and the valid split scored higher without dropout
    # (recipes/results/bundled_sweep.pdrop0.json against bundled_sweep.bpe4k.json).
    "bundled": ModelSize(layers=2, d_model=256, d_ff=1024, h=4, p_drop=0.0),
    # `--smoke` of the WMT14 recipes: every stage on one CPU in minutes (checks plumbing, not the model).
    "smoke": ModelSize(layers=2, d_model=64, d_ff=128, h=4),
    # `--smoke` of the WSJ parsing recipe.
    "parse_smoke": ModelSize(layers=2, d_model=64, d_ff=256, h=4),
    # the test suite's models (tests/conftest.py): trained for a few dozen updates in seconds.
    "tiny": ModelSize(layers=2, d_model=32, d_ff=64, h=4),
}


# The paper's models as attn_plugin registers them (attn_plugin/models/attn_transformer.py: Table 3's
# base and big rows, big with P_drop 0.1 for EN-FR, Sec. 6.3's parsing model, and the model's own name,
# which fairseq lists as an arch too), known here without importing fairseq, so that a recipe checks --arch
# at once; tests/test_cost.py checks them against fairseq's own parser, tests/test_recipe_bundled.py the
# names against its registry.
ARCH_SIZES = {
    "attn_paper_base": ModelSize(layers=6, d_model=512, d_ff=2048, h=8, p_drop=0.1),
    "attn_paper_big": ModelSize(layers=6, d_model=1024, d_ff=4096, h=16, p_drop=0.3),
    "attn_paper_big_en_fr": ModelSize(layers=6, d_model=1024, d_ff=4096, h=16, p_drop=0.1),
    "attn_paper_parse": ModelSize(layers=4, d_model=1024, d_ff=2048, h=8, p_drop=0.1),
    "attn_transformer": ModelSize(layers=6, d_model=512, d_ff=2048, h=8, p_drop=0.1),
}
PLUGIN_ARCHS = tuple(ARCH_SIZES)  # the architectures attn_plugin registers
