"""Real source and target tokens per update under fairseq's batching.

Sec. 5.1 gives ~25000 source and ~25000 target tokens per batch (real tokens); fairseq's
``--max-tokens`` caps each device's *padded* batch (sentences x the longest length in it). This
batches sentence lengths exactly as fairseq-train does (``batch_by_size``, shuffled then sorted,
``--required-batch-size-multiple 8``) and prints the mean real tokens per update.

    python scripts/tokens_per_update.py --data-bin runs/wmt14_en_de_base/data-bin --max-tokens 3125 --devices 8
    python scripts/tokens_per_update.py --src test.bpe.en --tgt test.bpe.de --max-tokens 3125 --devices 8
"""
import argparse
import glob
import json
import os
import numpy as np

from .. import options
from ..cli import ArgumentParser, Number, UserError


def batch_stats(src_sizes, tgt_sizes, max_tokens: int, batches_per_update: int = 1, multiple: int = 8,
                seed: int = 1) -> dict:
    """Mean real source / target tokens and padded tokens per update when
    fairseq batches pairs of these lengths (tokens incl. </s>) with ``max_tokens``
    per batch, ``batches_per_update`` batches (devices x update_freq) an update."""
    from fairseq.data import data_utils

    src_sizes, tgt_sizes = np.asarray(src_sizes, dtype=np.int64), np.asarray(tgt_sizes, dtype=np.int64)
    num_tokens = np.maximum(src_sizes, tgt_sizes)
    keep = num_tokens <= max_tokens  # fairseq-train skips longer pairs (--skip-invalid-size-inputs-valid-test)
    order = np.random.RandomState(seed).permutation(len(src_sizes))
    order = order[keep[order]]
    order = order[np.argsort(tgt_sizes[order], kind="mergesort")]  # LanguagePairDataset.ordered_indices
    order = order[np.argsort(src_sizes[order], kind="mergesort")]
    batches = data_utils.batch_by_size(order, num_tokens_fn=None, num_tokens_vec=num_tokens[order],
                                       max_tokens=max_tokens, required_batch_size_multiple=multiple)
    if not batches:
        raise UserError("no batches: no sentence pair fits --max-tokens")
    src = np.array([src_sizes[b].sum() for b in batches], dtype=np.float64)
    tgt = np.array([tgt_sizes[b].sum() for b in batches], dtype=np.float64)
    padded = np.array([len(b) * num_tokens[b].max() for b in batches], dtype=np.float64)
    k = batches_per_update
    return {"max_tokens": max_tokens, "batches_per_update": k, "budget_per_update": max_tokens * k,
            "batches": len(batches), "pairs": int(keep.sum()),
            "source_per_update": round(float(src.mean()) * k, 1), "target_per_update": round(float(tgt.mean()) * k, 1),
            "padded_per_update": round(float(padded.mean()) * k, 1)}


def sizes_from_data_bin(data_bin: str, split: str):
    """Source and target lengths (</s> included) of a fairseq-preprocess'ed split."""
    from fairseq.data import data_utils

    found = sorted(glob.glob(os.path.join(data_bin, f"{split}.*-*.*.idx")))
    if len(found) != 2:
        raise UserError(f"{data_bin}: expected {split}.SRC-TGT.SRC.idx and .TGT.idx (fairseq-preprocess output)")
    pair = os.path.basename(found[0]).split(".")[1]
    src, tgt = pair.split("-")
    out = []
    for lang in (src, tgt):
        ds = data_utils.load_indexed_dataset(os.path.join(data_bin, f"{split}.{pair}.{lang}"), None)
        if ds is None:
            raise UserError(f"{data_bin}: cannot read {split}.{pair}.{lang}")
        out.append(ds.sizes)
    return out


def sizes_from_text(path: str, lang=None, bpe=None):
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang) if lang else None
    sizes = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if tok:
                line = tok.tokenize(line, aggressive_dash_splits=True, return_str=True, escape=False)
            if bpe:
                line = bpe.process_line(line)
            sizes.append(len(line.split()) + 1)
    return sizes


def main(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-bin", help="a fairseq-preprocess output folder")
    p.add_argument("--split", default="train", help="with --data-bin: the split (default train)")
    p.add_argument("--src", nargs="+", help="source text file(s), one sentence a line (several are concatenated)")
    p.add_argument("--tgt", nargs="+", help="target text file(s), line for line with --src")
    p.add_argument("--moses", nargs=2, metavar=("SRC_LANG", "TGT_LANG"), help="Moses-tokenize the text first")
    p.add_argument("--bpe-codes", help="apply these subword-nmt codes to the text first")
    options.add(p, "max_tokens", "the recipes' --max-tokens-per-gpu", checked="here", required=True)
    p.add_argument("--devices", type=Number(int, minimum=1), default=1,
                   help="devices over all nodes, the recipes' --ngpus x --nnodes (default 1)")
    options.add(p, "update_freq", "default 1", checked="here", default=1)
    p.add_argument("--required-batch-size-multiple", type=Number(int, minimum=1), default=8,
                   help="as fairseq-train (default 8)")
    p.add_argument("--resample", type=Number(int, minimum=1), metavar="N",
                   help="batch N pairs drawn with replacement from the given ones (seed 1): a small test set's "
                        "lengths then batch as a large corpus of the same length distribution does")
    p.add_argument("--target-tokens", type=Number(int, minimum=1),
                   help="also find the padded per-update budget whose mean real (source + target) / 2 "
                        "tokens per update come closest to this")
    args = p.parse_args(argv)
    if args.data_bin:
        src_sizes, tgt_sizes = sizes_from_data_bin(args.data_bin, args.split)
    elif args.src and args.tgt:
        bpe = None
        if args.bpe_codes:
            from subword_nmt.apply_bpe import BPE

            with open(args.bpe_codes, encoding="utf-8") as codes:
                bpe = BPE(codes)
        langs = args.moses or (None, None)
        src_sizes = [n for path in args.src for n in sizes_from_text(path, langs[0], bpe)]
        tgt_sizes = [n for path in args.tgt for n in sizes_from_text(path, langs[1], bpe)]
        if len(src_sizes) != len(tgt_sizes):
            raise UserError(f"the --src files have {len(src_sizes)} lines, the --tgt files {len(tgt_sizes)}")
    else:
        raise UserError("give --data-bin DIR, or --src and --tgt")
    if args.resample:
        pick = np.random.RandomState(1).randint(0, len(src_sizes), size=args.resample)
        src_sizes, tgt_sizes = np.asarray(src_sizes)[pick], np.asarray(tgt_sizes)[pick]
    k = args.devices * args.update_freq
    result = {"at_max_tokens": batch_stats(src_sizes, tgt_sizes, args.max_tokens, k,
                                           args.required_batch_size_multiple)}
    if args.target_tokens:
        # real tokens grow almost linearly with the budget: rescale it until the mean is within 0.5%
        s, per_device, best = result["at_max_tokens"], args.max_tokens, None
        for _ in range(5):
            mean = (s["source_per_update"] + s["target_per_update"]) / 2
            gap = abs(mean - args.target_tokens)
            if best is None or gap < best[0]:
                best = (gap, s)
            if gap < 0.005 * args.target_tokens:
                break
            per_device = max(1, round(per_device * args.target_tokens / mean))
            s = batch_stats(src_sizes, tgt_sizes, per_device, k, args.required_batch_size_multiple)
        result["closest_to_target"] = best[1]
    print(json.dumps(result, indent=2))
    return 0
