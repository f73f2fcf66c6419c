"""``python scripts/plot_attention.py RUN_DIR --sentence "..." --output fig.png``: the paper's Figures 3-5 for any
sentence and run. The sentence is translated as scripts/translate.py does, then one forward pass with
``need_head_weights`` gives every layer's encoder self-attention and encoder-decoder attention: drawn as Fig. 3's
lines (``--query WORD`` as Figs. 3-4) and per-head heatmaps, or written whole with ``--dump weights.npz``.
"""
import sys
from pathlib import Path
from typing import List, Optional

from ..cli import (ArgumentParser, Number, UsageError, UserError, add_force_option, add_ignore_changed_option,
                   add_output_option, atomic_output, check_output, log)
from .translate import Translator


def parse_args(argv=None):
    p = ArgumentParser(prog="python scripts/plot_attention.py",
                       description="The paper's Figures 3-5 for a sentence: attention weights of a run's "
                                   "model (encoder self-attention, encoder-decoder attention).")
    p.add_argument("run_dir", type=Path, help="a recipe's --workdir (holds inference.json)")
    p.add_argument("--sentence", required=True, help="a raw source sentence")
    add_output_option(p, "the figure (PNG, PDF or SVG by its suffix)")
    p.add_argument("--dump", type=Path, help="also write every layer's weights to this .npz file")
    p.add_argument("--layer", type=Number(int, minimum=1),
                   help="encoder layer to draw, 1..N (default N-1, the paper's 5 of 6)")
    p.add_argument("--heads", help="heads to draw, 1-based and comma-separated (default all)")
    p.add_argument("--style", choices=("both", "lines", "heatmap"), default="both",
                   help="Fig. 3's lines, heatmaps, or both (default)")
    p.add_argument("--min-weight", type=Number(float, minimum=0, maximum=1), default=0.05,
                   help="lines below this weight are not drawn (0.05)")
    p.add_argument("--query", metavar="WORD",
                   help="draw only the lines from this word of the sentence, as tokenized (all its BPE pieces; "
                        "every occurrence), as the paper's Figs. 3 and 4 do for 'making' and 'its'")
    add_force_option(p, "the --output and --dump files")
    add_ignore_changed_option(p)
    args = p.parse_args(argv)
    if not args.out and not args.dump:
        raise UsageError("give --output FIG.png, --dump WEIGHTS.npz or both")
    if args.out and args.out.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise UsageError(f"--output {args.out}: give a .png, .pdf or .svg file")
    if args.out and args.dump and args.out.resolve() == args.dump.resolve():
        raise UsageError("--output and --dump name the same file: give two")
    for option, path in (("--output", args.out), ("--dump", args.dump)):  # before any work
        if path:
            check_output(path, option, args.force)
    return args


def parse_heads(spec: Optional[str], h: int) -> List[int]:
    """0-based head indices from ``--heads`` (1-based, comma-separated)."""
    if not spec:
        return list(range(h))
    try:
        heads = [int(x) - 1 for x in spec.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--heads {spec!r}: give head numbers like 1,3") from None
    if not heads or any(not 0 <= x < h for x in heads):
        raise UsageError(f"--heads {spec!r}: the model has heads 1..{h}")
    return heads


def word_positions(tokens: List[str], word: str, separator: str = "@@") -> List[int]:
    """The positions of the BPE pieces of every occurrence of ``word`` in ``tokens`` (a piece
    ending in ``separator`` continues into the next one, as subword-nmt writes them)."""
    out, span = [], []
    for i, token in enumerate(tokens):
        span.append(i)
        if not token.endswith(separator) or i == len(tokens) - 1:  # a word's last piece
            if "".join(tokens[k].removesuffix(separator) for k in span) == word:
                out += span
            span = []
    return out


def attention_of(translator, sentence: str) -> dict:
    """Translate ``sentence`` and compute every attention weight of the pass that scores it."""
    import torch

    hub = translator.hub
    if not sentence.strip():
        raise UserError("--sentence is empty")
    src = translator.encode(sentence)
    best = hub.generate([src], beam=hub.cfg.generation.beam)[0][0]["tokens"]
    model = hub.models[0]
    from attn_plugin.models.attn_transformer import AttnTransformerModel  # deferred: pulls in fairseq/torch

    if not isinstance(model, AttnTransformerModel):  # stock fairseq's layers do not return every head's weights
        arch = getattr(hub.cfg.model, "_name", None) or getattr(hub.cfg.model, "arch", "?")
        raise UserError(f"the checkpoint's model is {type(model).__name__} (--arch {arch}), not "
                        "attn_plugin's attn_transformer, whose layers return every head's attention weights: convert "
                        "stock transformer weights with attn_plugin.convert (docs/plugin.md)")
    prev = torch.cat([best.new_tensor([hub.tgt_dict.eos()]), best[:-1]])  # EOS, then the output shifted right
    with torch.no_grad():
        enc = model.encoder(src[None], torch.tensor([src.numel()]), need_head_weights=True)
        _, extra = model.decoder(prev[None], enc, need_head_weights=True)
    return {
        "source_tokens": [hub.src_dict[int(i)] for i in src],
        "target_tokens": [hub.tgt_dict[int(i)] for i in best],
        "translation": translator.decode(sentence, best),
        "encoder_self_attention": torch.stack([w[0] for w in enc["self_attn_weights"]]).float().numpy(),
        "encoder_decoder_attention": torch.stack([w[0] for w in extra["cross_attn_weights"]]).float().numpy(),
    }


def draw(weights: dict, layer: int, heads: List[int], style: str, min_weight: float, out: Path,
         query: Optional[List[int]] = None, query_word: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src = weights["source_tokens"]
    enc = weights["encoder_self_attention"][layer]  # heads x S x S
    cross = weights["encoder_decoder_attention"][-1].mean(axis=0)  # T x S
    colours = plt.get_cmap("tab10")
    n_maps = len(heads) if style in ("both", "heatmap") else 0
    cols = min(4, max(1, n_maps))
    map_rows = -(-n_maps // cols) if n_maps else 0
    top = 1 if style in ("both", "lines") else 0
    fig = plt.figure(figsize=(4 * cols + 4, 0.35 * len(src) * (top + map_rows) + 3))
    grid = fig.add_gridspec(top + map_rows + 1, cols)
    if top:  # Fig. 3: the sentence twice, a line from each query to each key it attends to
        ax = fig.add_subplot(grid[0, :])
        n = len(src)
        for i, tok in enumerate(src):
            ax.text(0, -i, tok, ha="right", va="center", fontsize=9)
            ax.text(1, -i, tok, ha="left", va="center", fontsize=9)
        for k, head in enumerate(heads):
            for i in (query if query else range(n)):
                for j in range(n):
                    w = float(enc[head, i, j])
                    if w >= min_weight:
                        ax.plot([0.02, 0.98], [-i, -j], color=colours(k % 10), alpha=min(1.0, w), linewidth=2)
            ax.plot([], [], color=colours(k % 10), label=f"head {head + 1}")
        ax.set_xlim(-0.6, 1.6)
        ax.set_ylim(-n, 1)
        ax.axis("off")
        ax.legend(loc="upper right", fontsize=8, ncol=min(len(heads), 8))
        ax.set_title(f"encoder self-attention, layer {layer + 1} of {len(weights['encoder_self_attention'])}"
                     + (f": attention of '{query_word}'" if query else ""))
    for k, head in enumerate(heads[:n_maps]):
        ax = fig.add_subplot(grid[top + k // cols, k % cols])
        ax.imshow(enc[head], cmap="Blues", vmin=0, vmax=1)
        ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=9)
        ax.set_xticks(range(len(src)), src, rotation=90, fontsize=7)
        ax.set_yticks(range(len(src)), src, fontsize=7)
    ax = fig.add_subplot(grid[-1, :])
    ax.imshow(cross, cmap="Greens", vmin=0, vmax=1, aspect="auto")
    ax.set_title(f"encoder-decoder attention, last layer, mean over heads: {weights['translation']}", fontsize=9)
    ax.set_xticks(range(len(src)), src, rotation=90, fontsize=7)
    ax.set_yticks(range(len(weights["target_tokens"])), weights["target_tokens"], fontsize=7)
    fig.tight_layout()
    with atomic_output(out) as tmp:
        fig.savefig(tmp, format=out.suffix[1:].lower(), dpi=120)
    plt.close(fig)


def dump(weights: dict, path: Path):
    import numpy as np

    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **{k: np.asarray(v) for k, v in weights.items()})


def main(argv=None):
    args = parse_args(argv)
    translator = Translator(args.run_dir, {"ignore_changed_files": True} if args.ignore_changed_files else {})
    weights = attention_of(translator, args.sentence)
    n_layers, h = weights["encoder_self_attention"].shape[:2]
    layer = (args.layer if args.layer is not None else max(1, n_layers - 1)) - 1
    if not 0 <= layer < n_layers:
        raise UsageError(f"--layer {args.layer}: the encoder has layers 1..{n_layers}")
    heads = parse_heads(args.heads, h)
    query = None
    if args.query is not None:
        query = word_positions(weights["source_tokens"], args.query)
        if not query:
            words = "".join(t.removesuffix("@@") if t.endswith("@@") else t + " " for t in weights["source_tokens"])
            raise UsageError(f"--query {args.query!r} is not a word of the sentence as the model reads it: "
                             f"{' '.join(words.split())}")
    print(weights["translation"], flush=True)
    if args.dump:
        dump(weights, args.dump)
        log(f"weights: {args.dump}", stream=sys.stderr)
    if args.out:
        draw(weights, layer, heads, args.style, args.min_weight, args.out, query, args.query or "")
        log(f"figure: {args.out}", stream=sys.stderr)
    return 0
