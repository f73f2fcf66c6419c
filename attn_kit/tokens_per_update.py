"""Real source and target tokens per update under fairseq's batching.

Sec. 5.1: "Each training batch contained a set of sentence pairs containing
approximately 25000 source tokens and 25000 target tokens." fairseq's
``--max-tokens`` is a different quantity: a cap on each device's *padded*
batch, sentences x the longest max(source, target) length in it (fairseq's
``num_tokens``). The real source and target tokens of a batch are less. This
script batches sentence lengths exactly as fairseq-train does (fairseq's own
``batch_by_size`` over ``LanguagePairDataset``'s order: shuffled, then sorted by
target and source length, ``--required-batch-size-multiple 8``) and prints the
mean real tokens per update: devices x update_freq batches.

    python scripts/tokens_per_update.py --data-bin runs/wmt14_en_de_base/data-bin --max-tokens 3125 --devices 8
    python scripts/tokens_per_update.py --src test.bpe.en --tgt test.bpe.de --max-tokens 3125 --devices 8
    python scripts/tokens_per_update.py --src newstest2014.en --tgt newstest2014.de --bpe-codes codes \\
        --moses en de --max-tokens 3125 --devices 8 --target-tokens 25000

With ``--target-tokens T`` it also prints the per-update token budget whose
mean real (source + target) / 2 comes closest to T. Text files count one
token per whitespace-separated word plus </s> (as fairseq-preprocess does);
``--moses SRC TGT`` Moses-tokenizes (sacremoses, -a) and ``--bpe-codes``
applies subword-nmt codes first, as the WMT recipes do. ``--resample N``
batches N pairs drawn from the given ones: fairseq sorts a 4.5M-pair corpus
into batches of nearly equal lengths, which 6000 test pairs cannot show.
"""
import argparse
import json
import numpy as np

from .cli import UserError


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
    import glob
    import os

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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-bin", help="a fairseq-preprocess output folder")
    p.add_argument("--split", default="train", help="with --data-bin: the split (default train)")
    p.add_argument("--src", nargs="+", help="source text file(s), one sentence a line (several are concatenated)")
    p.add_argument("--tgt", nargs="+", help="target text file(s), line for line with --src")
    p.add_argument("--moses", nargs=2, metavar=("SRC_LANG", "TGT_LANG"), help="Moses-tokenize the text first")
    p.add_argument("--bpe-codes", help="apply these subword-nmt codes to the text first")
    p.add_argument("--max-tokens", type=int, required=True, help="fairseq's --max-tokens (per device and batch)")
    p.add_argument("--devices", type=int, default=1, help="GPUs (default 1)")
    p.add_argument("--update-freq", type=int, default=1, help="fairseq's --update-freq (default 1)")
    p.add_argument("--required-batch-size-multiple", type=int, default=8, help="as fairseq-train (default 8)")
    p.add_argument("--resample", type=int, metavar="N",
                   help="batch N pairs drawn with replacement from the given ones (seed 1): a small test set's "
                        "lengths then batch as a large corpus of the same length distribution does")
    p.add_argument("--target-tokens", type=int, help="also find the per-update budget giving this many real tokens")
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
