"""The BLEU scores the project reports, computed here and nowhere else: the recipes' results
(:func:`translation_scores`, :func:`dev_scores`), the checks and benchmarks that score a decoding
again (:func:`sacrebleu_score`) and the baseline comparison (:func:`tokenized_score`). The
protocols themselves (multi-bleu.perl's statistics, tensor2tensor's scripts) are
:mod:`attn_kit.metrics.bleu`; the keys each returns are the ones results files have always had.
"""
from typing import List, Optional, Sequence, Tuple

from ..pipeline.text import _moses_line
from .bleu import T2T_2018_NORMALIZES, T2T_LANGS, compound_split, multi_bleu, t2t_bleu

T2T_PROTOCOL = {  # results.json's bleu_t2t_protocol, by whether the target is German
    True: "tensor2tensor get_ende_bleu.sh of 2017: tokenizer.perl -l de (no -a), compound split, multi-bleu.perl "
          f"(the paper's Table 2); bleu_t2t_2018: the 2018 script, {T2T_2018_NORMALIZES}",
    False: "tokenizer.perl (no -a), multi-bleu.perl (t2t's 2017 pipeline without the compound split); "
           f"bleu_t2t_2018: {T2T_2018_NORMALIZES}",
}


def detokenize(hyps_tok: Sequence[str], lang: str) -> List[str]:
    """fairseq-generate's hypotheses (Moses -a tokens, BPE removed) as raw text (Moses' detokenizer)."""
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=lang)
    return [detok.detokenize(h.split()) for h in hyps_tok]


def sacrebleu_score(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """sacreBLEU of raw-text translations with its defaults (13a tokenization, exp smoothing), rounded
    to 2 decimals as every results file keeps it."""
    return sacrebleu_with_signature(hyps, refs)[0]


def sacrebleu_with_signature(hyps: Sequence[str], refs: Sequence[str]) -> Tuple[float, str]:
    """:func:`sacrebleu_score` and sacreBLEU's signature of it (version, tokenization, smoothing)."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    score = bleu.corpus_score(list(hyps), [list(refs)]).score
    return round(score, 2), str(bleu.get_signature())


def tokenized_score(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """BLEU of already tokenized text as sacreBLEU scores it without tokenizing (exp smoothing),
    rounded to 2: the baseline comparison's score of fairseq-generate's D- and T- lines."""
    from sacrebleu.metrics import BLEU

    return round(BLEU(tokenize="none", force=True).corpus_score(list(hyps), [list(refs)]).score, 2)


def translation_scores(hyps_tok: Sequence[str], refs: Sequence[str], tgt: str,
                       tok_refs: Optional[Sequence[str]] = None) -> dict:
    """BLEU of fairseq-generate's hypotheses (Moses -a tokens, BPE removed) against the raw references every way
    the paper and fairseq report it: the paper's protocol (tensor2tensor's get_ende_bleu.sh of 2017, and of 2018;
    for German and French targets, the languages it is checked for), sacreBLEU with its signature, multi-bleu.perl
    on the tokens and, for German, with fairseq's compound split. ``tok_refs``: the references as the recipe
    tokenized them (default: tokenized here the same way). ``detokenized``: the hypotheses as raw text."""
    if tok_refs is None:
        tok_refs = [_moses_line(tgt, r) for r in refs]
    hyps = detokenize(hyps_tok, tgt)
    sacrebleu, signature = sacrebleu_with_signature(hyps, refs)
    out = {"sacrebleu": sacrebleu, "sacrebleu_signature": signature,
           "bleu_tokenized": round(multi_bleu(hyps_tok, tok_refs).score, 2), "detokenized": hyps}
    if tgt in T2T_LANGS:  # the paper's protocol, as checked against its perl scripts (German, French)
        out = {"bleu_t2t": round(t2t_bleu(hyps, refs, lang=tgt).score, 2),
               "bleu_t2t_2018": round(t2t_bleu(hyps, refs, lang=tgt, version="2018").score, 2),
               "bleu_t2t_protocol": T2T_PROTOCOL[tgt == "de"], **out}
    if tgt == "de":
        split = multi_bleu([compound_split(h) for h in hyps_tok], [compound_split(r) for r in tok_refs])
        out["bleu_compound_split"] = round(split.score, 2)
    return out


def dev_scores(hyps_tok: Sequence[str], refs: Sequence[str], lang: str) -> dict:
    """Table 3's development-set BLEU (Sec. 6.2): the paper's protocol (tensor2tensor's 2017 script)
    and sacreBLEU, of fairseq-generate's hypotheses against the raw references."""
    hyps = detokenize(hyps_tok, lang)
    return {"bleu": round(t2t_bleu(hyps, refs, lang=lang).score, 2), "bleu_script": "2017",
            "sacrebleu": sacrebleu_score(hyps, refs), "dev_sentences": len(refs)}
