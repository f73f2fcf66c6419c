"""A trained run as a Hugging Face transformers model: ``scripts/export_hf.py RUN_DIR --output DIR`` writes a
folder that transformers' own ``AutoModelForSeq2SeqLM`` and ``AutoTokenizer`` load (no remote code).

**Why FSMT** (not ``MarianMTModel``; both are post-norm, Sec. 3.1, with sqrt(d_model)-scaled embeddings, Sec.
3.4, and ReLU feed-forward layers, eq. 2): FSMT loads its position table as saved, so the plugin's own (Sec.
3.5) is written in bit for bit, where Marian recomputes a [sin | cos] table on every load (every weight on the
residual stream would need d_model permuted, and its float64 sinusoids differ in the last bits); and
FSMTTokenizer runs Moses (``-a``) and subword-nmt BPE, as the run did. FSMT's head size is d_model / h.

The tokenizer's differences (XML escaping, apply-bpe's vocabulary filter: :func:`kept_merges`) and the exported
search (fairseq's greedy or ``--lenpen`` beam search; greedy for a run with the paper's GNMT search, Sec. 6.1):
docs/using-a-model.md. The export checks itself against fairseq (:func:`check_export`) before it is kept.
"""
import io
import json
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .. import options
from ..planning.paper import PAPER_ALPHA, PAPER_BEAM
from ..cli import (ArgumentParser, Number, UsageError, UserError, add_force_option, add_ignore_changed_option,
                   add_output_option, atomic_output, check_output, log)
from ..fairseq_layer.plugin import load
from ..metrics.scores import sacrebleu_score
from ..results import write_results_file
from ..textio import read_lines
from .ctranslate2 import check_export_folder, load_run, plugin_positions
from .translate import Translator, read_input

CARD = "hf_export.json"
TESTED = "5.24.0"
INSTALL = f"transformers is not installed: pip install transformers=={TESTED} (the version this export is tested with)"
# sacremoses' escape_xml, in its order: & first, so that no other entity's & is escaped again
ESCAPES = (("&", "&amp;"), ("|", "&#124;"), ("<", "&lt;"), (">", "&gt;"), ("'", "&apos;"), ('"', "&quot;"),
           ("[", "&#91;"), ("]", "&#93;"))
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
EOW = "</w>"  # subword-nmt 0.2's end-of-word mark, FSMTTokenizer's too
CHECK_SENTENCES = 8
# largest log-probability difference accepted between the plugin and the export, relative to the log-probability
# where it is below -1 (float32 rounds a large logit to about 1e-7 of its size, in a different order in each)
TOLERANCE = 1e-3
FALLBACK_SENTENCES = ("The house is small.", "I would like a cup of coffee, please.", "Tom's dog doesn't bark.",
                      "Where is the station?")


# --------------------------------------------------------------------------------------------- what fits
def unsupported(model, card: dict, args: dict) -> List[str]:
    """What FSMT (model or tokenizer) cannot represent in the run, one phrase per problem naming the option
    that made it; empty if it can be exported."""
    AttnTransformerModel = load("attn_plugin.models.attn_transformer").AttnTransformerModel
    if not isinstance(model, AttnTransformerModel):
        return [f"the model is {type(model).__name__}, not attn_plugin's attn_transformer"]
    problems = []
    d_model = model.encoder.embed.embed_tokens.embedding_dim
    if model.decoder.embed.embed_tokens.embedding_dim != d_model:
        problems.append(f"--encoder-embed-dim {d_model} != --decoder-embed-dim "
                        f"{model.decoder.embed.embed_tokens.embedding_dim}: FSMT has one d_model")
    attentions = [layer.self_attn for layer in model.encoder.layers]
    attentions += [a for layer in model.decoder.layers for a in (layer.self_attn, layer.cross_attn)]
    odd = sorted({(a.d_k, a.d_v, a.h) for a in attentions if not a.d_k == a.d_v == d_model // a.h})
    if odd:
        d_k, d_v, h = odd[0]
        problems.append(f"--attention-key-dim {d_k} / --attention-value-dim {d_v} with {h} heads: FSMT's head "
                        f"size is d_model / h = {d_model // h}")
    if card["kind"] != "translation":
        problems.append(f"a {card['kind']} run: its output is repaired into trees by the plugin, which "
                        "transformers cannot do")
    if args.get("tokenizer") != "attn_moses":
        problems.append(f"--tokenizer {args.get('tokenizer')}: FSMTTokenizer runs Moses (the recipes' attn_moses)")
    elif args.get("moses_no_normalize") or args.get("moses_no_dash_splits"):
        problems.append("--moses-no-normalize / --moses-no-dash-splits: FSMTTokenizer always normalizes "
                        "punctuation and splits dashes (-a)")
    if args.get("bpe") != "attn_subword_nmt":
        problems.append(f"--bpe {args.get('bpe')}: FSMTTokenizer runs subword-nmt BPE (the recipes' "
                        "attn_subword_nmt)")
    return problems


# --------------------------------------------------------------------------------------------- weights
def fsmt_positions(embed, positions: int, padding_idx: int):
    """FSMT's position table: FSMT numbers positions from padding_idx + 1 (the rows before are read only for
    padding, which is zero), so row padding_idx + 1 + p holds the plugin's position p (Sec. 3.5)."""
    import torch

    rows = plugin_positions(embed, positions)
    return torch.cat([rows.new_zeros(padding_idx + 1, rows.size(1)), rows])


def max_positions(model) -> int:
    return max(int(model.encoder.max_positions()), int(model.decoder.max_positions()))


def fsmt_config(model, src_dict, tgt_dict, langs: Sequence[str]):
    """FSMTConfig of the plugin ``model``: its sizes, dropout rates (Sec. 5.4) and fairseq's special ids."""
    from transformers import FSMTConfig

    enc, dec = model.encoder, model.decoder
    layer = enc.layers[0]
    return FSMTConfig(
        langs=list(langs), src_vocab_size=len(src_dict), tgt_vocab_size=len(tgt_dict), activation_function="relu",
        d_model=enc.embed.embed_tokens.embedding_dim, max_position_embeddings=max_positions(model),
        encoder_layers=len(enc.layers), encoder_attention_heads=layer.self_attn.h,
        encoder_ffn_dim=layer.ffn.w_1.out_features, decoder_layers=len(dec.layers),
        decoder_attention_heads=dec.layers[0].self_attn.h, decoder_ffn_dim=dec.layers[0].ffn.w_1.out_features,
        dropout=enc.embed.dropout.p, attention_dropout=layer.self_attn.attention_dropout.p,
        activation_dropout=layer.ffn.activation_dropout.p,
        scale_embedding=True, tie_word_embeddings=enc.embed.embed_tokens is dec.embed.embed_tokens,
        pad_token_id=tgt_dict.pad(), bos_token_id=tgt_dict.bos(), eos_token_id=tgt_dict.eos(),
        decoder_start_token_id=tgt_dict.eos(), forced_eos_token_id=None, num_beams=1,
        max_length=max_positions(model) + 1)


def _attention(state: dict, name: str, module):
    """One attention's projections: the plugin's fused [W^Q | W^K | W^V] (or W^Q and [W^K | W^V]) split into
    FSMT's q/k/v (Sec. 3.2.2), W^O as out_proj."""
    if module.self_attention:
        weights, biases = module.w_qkv.weight.split(module.qkv_sizes), module.w_qkv.bias.split(module.qkv_sizes)
    else:
        sizes = module.qkv_sizes[1:]
        weights = (module.w_q.weight, *module.w_kv.weight.split(sizes))
        biases = (module.w_q.bias, *module.w_kv.bias.split(sizes))
    for part, w, b in (*zip(("q_proj", "k_proj", "v_proj"), weights, biases),
                       ("out_proj", module.w_o.weight, module.w_o.bias)):
        state[f"{name}.{part}.weight"], state[f"{name}.{part}.bias"] = w, b


def fsmt_state_dict(model, padding_idx: int) -> Dict[str, object]:
    """The plugin ``model``'s weights under FSMTForConditionalGeneration's names (float32 copies)."""
    enc, dec = model.encoder, model.decoder
    n = max_positions(model)
    state = {"model.encoder.embed_tokens.weight": enc.embed.embed_tokens.weight,
             "model.decoder.embed_tokens.weight": dec.embed.embed_tokens.weight,
             "model.decoder.output_projection.weight": dec.embed.embed_tokens.weight,  # tied (Sec. 3.4)
             "model.encoder.embed_positions.weight": fsmt_positions(enc.embed, n, padding_idx),
             "model.decoder.embed_positions.weight": fsmt_positions(dec.embed, n, padding_idx)}
    for side, stack in (("encoder", enc), ("decoder", dec)):
        for i, layer in enumerate(stack.layers):
            p = f"model.{side}.layers.{i}"
            _attention(state, f"{p}.self_attn", layer.self_attn)
            parts = {"self_attn_layer_norm": layer.self_attn_norm, "fc1": layer.ffn.w_1, "fc2": layer.ffn.w_2,
                     "final_layer_norm": layer.ffn_norm}
            if side == "decoder":
                _attention(state, f"{p}.encoder_attn", layer.cross_attn)
                parts["encoder_attn_layer_norm"] = layer.cross_attn_norm
            for part, module in parts.items():
                state[f"{p}.{part}.weight"], state[f"{p}.{part}.bias"] = module.weight, module.bias
    return {k: v.detach().float().cpu().clone() for k, v in state.items()}


def build_fsmt(model, src_dict, tgt_dict, langs: Sequence[str], beam: Optional[int] = None, lenpen: float = 1.0):
    """FSMTForConditionalGeneration holding the plugin ``model``'s weights (every one: a missing weight is an
    error), with fairseq's search as its generation_config: greedy, or with ``beam`` fairseq's beam search with
    ``--lenpen`` (``early_stopping=True`` is fairseq's stopping rule, ``length_penalty`` divides by |Y|^p)."""
    from transformers import FSMTForConditionalGeneration, GenerationConfig

    fsmt = FSMTForConditionalGeneration(fsmt_config(model, src_dict, tgt_dict, langs))
    missing, unexpected = fsmt.load_state_dict(fsmt_state_dict(model, tgt_dict.pad()), strict=False)
    if missing or unexpected:
        raise UserError(f"the FSMT of this transformers version has other weights than the export writes (missing "
                        f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}): install transformers=={TESTED}")
    search = dict(num_beams=beam, early_stopping=True, length_penalty=lenpen) if beam else dict(num_beams=1)
    fsmt.generation_config = GenerationConfig(
        decoder_start_token_id=tgt_dict.eos(), bos_token_id=tgt_dict.bos(), eos_token_id=tgt_dict.eos(),
        pad_token_id=tgt_dict.pad(), forced_eos_token_id=None, do_sample=False, **search,
        max_new_tokens=max_positions(model) - 1, min_new_tokens=1,  # fairseq's limit and --min-len 1
        suppress_tokens=[tgt_dict.pad()])  # fairseq never emits <pad>
    fsmt.eval()
    return fsmt


# --------------------------------------------------------------------------------------------- tokenizer
def escape(text: str, escaped: bool = True) -> str:
    """``text`` as sacremoses' escape_xml writes it (``escaped``: FSMTTokenizer escapes, the run did not)."""
    if escaped:
        for char, entity in ESCAPES:
            text = text.replace(char, entity)
    return text


def unescape(word: str) -> str:
    for char, entity in reversed(ESCAPES):
        word = word.replace(entity, char)
    return word


def fsmt_vocabulary(dictionary, separator: str, escaped: bool) -> Dict[str, int]:
    """FSMTTokenizer's vocabulary (spelling -> id) of a fairseq dictionary, the same ids: ``sub@@`` -> ``sub``,
    a word's last unit ``end`` -> ``end</w>``, special symbols as they are."""
    vocab = {}
    for i, symbol in enumerate(dictionary.symbols):
        if symbol in SPECIALS:
            spelled = symbol
        elif symbol.endswith(separator):
            spelled = escape(symbol[:-len(separator)], escaped)
        else:
            spelled = escape(symbol, escaped) + EOW
        if spelled in vocab:  # two symbols one spelling: the ids of one would be lost
            raise UserError(f"the dictionary's symbols {dictionary.symbols[vocab[spelled]]!r} and {symbol!r} are "
                            f"both {spelled!r} in FSMT's spelling")
        vocab[spelled] = i
    return vocab


def read_merges(codes: Path) -> List[Tuple[str, str]]:
    """subword-nmt's BPE codes as merge pairs in rank order; version 0.2 only (``</w>`` on a word's last
    character, which FSMTTokenizer assumes)."""
    lines = Path(codes).read_text(encoding="utf-8").split("\n")
    if not lines or not lines[0].startswith("#version: 0.2"):
        raise UserError(f"{codes}: not subword-nmt BPE codes of version 0.2 (first line '#version: 0.2'), which "
                        "FSMTTokenizer needs")
    return [tuple(line.split()[:2]) for line in lines[1:] if len(line.split()) >= 2]


def kept_merges(merges: Sequence[Tuple[str, str]], vocabulary: Optional[set], separator: str
                ) -> List[Tuple[str, str]]:
    """apply-bpe's vocabulary filter approximated as a merge list: the merges whose result the filter keeps (a
    subword in ``vocabulary``, spelled ``sub@@`` / ``end``) and those that build one of those, recursively;
    every merge when ``vocabulary`` is None (no filter)."""
    if vocabulary is None:
        return list(merges)
    makers: Dict[str, List[Tuple[str, str]]] = {}
    for a, b in merges:
        makers.setdefault(a + b, []).append((a, b))
    keep = {made for made in makers if (made[:-len(EOW)] if made.endswith(EOW) else made + separator) in vocabulary}
    todo = list(keep)
    while todo:
        for pair in makers.get(todo.pop(), ()):
            for part in pair:
                if part in makers and part not in keep:
                    keep.add(part)
                    todo.append(part)
    return [(a, b) for a, b in merges if a + b in keep]


def escaped_merges(merges: Sequence[Tuple[str, str]], escaped: bool) -> List[Tuple[str, str]]:
    """``merges`` in FSMTTokenizer's escaped spelling, after merges that first join each entity's characters
    into one unit (ranked first, so every entity is one unit before any other merge)."""
    if not escaped:
        return list(merges)
    first = []
    for _, entity in ESCAPES:
        first += [pair for pair in ((entity[:i], entity[i]) for i in range(1, len(entity) - 1)) if pair not in first]
        first += [(entity[:-1], entity[-1]), (entity[:-1], entity[-1] + EOW)]  # inside a word and at its end

    def spelled(unit: str) -> str:  # the end-of-word mark is not text: not escaped
        return escape(unit[:-len(EOW)]) + EOW if unit.endswith(EOW) else escape(unit)

    return first + [(spelled(a), spelled(b)) for a, b in merges]


def run_merges(args: dict) -> Tuple[list, list]:
    """(the run's BPE merges, those the export keeps: :func:`kept_merges` under the run's vocabulary filter)."""
    from subword_nmt.apply_bpe import read_vocabulary

    merges = read_merges(Path(args["bpe_codes"]))
    vocabulary = None
    if args.get("bpe_vocabulary"):
        with open(args["bpe_vocabulary"], encoding="utf-8") as f:
            vocabulary = set(read_vocabulary(f, args.get("bpe_vocabulary_threshold")))
    return merges, kept_merges(merges, vocabulary, args.get("bpe_separator") or "@@")


def write_tokenizer(folder: Path, src_dict, tgt_dict, args: dict, max_source: int) -> Tuple[dict, list]:
    """FSMTTokenizer's files in ``folder`` (vocabularies, merges, tokenizer_config.json); returns what the card
    records of them and the kept merges (in the run's spelling)."""
    from transformers import FSMTTokenizer

    separator = args.get("bpe_separator") or "@@"
    escaped = not args.get("moses_escape")  # FSMTTokenizer escapes; vocabulary and merges follow it
    merges, kept = run_merges(args)
    files = {"src_vocab_file": folder / "vocab-src.json", "tgt_vocab_file": folder / "vocab-tgt.json",
             "merges_file": folder / "merges.txt"}
    for key, dictionary in (("src_vocab_file", src_dict), ("tgt_vocab_file", tgt_dict)):
        files[key].write_text(json.dumps(fsmt_vocabulary(dictionary, separator, escaped), ensure_ascii=False,
                                         indent=0) + "\n", encoding="utf-8")
    files["merges_file"].write_text("".join(f"{a} {b}\n" for a, b in escaped_merges(kept, escaped)),
                                    encoding="utf-8")
    tokenizer = FSMTTokenizer(langs=[args["source_lang"], args["target_lang"]], **{k: str(v) for k, v in files.items()},
                              do_lower_case=False, model_max_length=max_source, clean_up_tokenization_spaces=False)
    tokenizer.save_pretrained(str(folder))
    return {"merges": len(merges), "merges_kept": len(kept), "escaped": escaped,
            "vocabulary_threshold": args.get("bpe_vocabulary_threshold") if args.get("bpe_vocabulary") else None}, kept


def plain_bpe(merges: Sequence[Tuple[str, str]], separator: str):
    """subword-nmt's own BPE over ``merges`` without a vocabulary filter: what the exported merges give a
    Moses-tokenized line, computed apart from FSMTTokenizer."""
    from subword_nmt.apply_bpe import BPE

    return BPE(io.StringIO("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)), separator=separator)


# --------------------------------------------------------------------------------------------- checking
def quiet_transformers():
    """No progress bars or notes from transformers while the export works."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


class Exported:
    """An exported folder as a user loads it: transformers' Auto classes, nothing of the plugin."""

    def __init__(self, folder):
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModelForSeq2SeqLM.from_pretrained(str(folder))
        self.model.eval()

    def generate(self, sources, max_len_a: float, max_len_b: int, **options) -> List[List[int]]:
        return generate(self.model, sources, max_len_a, max_len_b, **options)

    def log_probs(self, source, target):
        return log_probs(self.model, source, target)


def generate(model, sources: Sequence[Sequence[int]], max_len_a: float, max_len_b: int, batch_size: int = 64,
             **options) -> List[List[int]]:
    """transformers' ``generate`` of an FSMT ``model`` on each source (token ids ending in ``</s>``) with
    ``options`` (default: the generation_config): the output ids without the decoder's start, ``</s>`` and
    padding. Sources of one length go in one batch, so each has fairseq's limit of its own length (``</s>``
    included; ``max_len_a`` x source + ``max_len_b``) and no padding."""
    import torch

    special = {model.config.eos_token_id, model.config.pad_token_id}
    out: List[List[int]] = [[] for _ in sources]
    by_length: Dict[int, List[int]] = {}
    for i, ids in enumerate(sources):
        by_length.setdefault(len(ids), []).append(i)
    for n, members in sorted(by_length.items()):
        limit = min(int(max_len_a * n + max_len_b), model.config.max_position_embeddings - 1)
        for start in range(0, len(members), batch_size):
            part = members[start:start + batch_size]
            ids = torch.tensor([list(sources[i]) for i in part])
            with torch.no_grad():
                seqs = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=limit,
                                      **options)
            for i, seq in zip(part, seqs.tolist()):
                out[i] = [t for t in seq[1:] if t not in special]
    return out


def log_probs(model, source: Sequence[int], target: Sequence[int]):
    """An FSMT ``model``'s log P(target_t | source, target_<t) rows (teacher forcing, which needs FSMT's cache off)."""
    import torch

    prev = [model.config.decoder_start_token_id, *target[:-1]]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(source)]), decoder_input_ids=torch.tensor([prev]),
                       use_cache=False).logits
    return torch.log_softmax(logits.float(), -1)[0]


def plugin_log_probs(model, source, target):
    """The plugin's log P(target_t | source, target_<t) rows; the decoder starts from ``</s>``."""
    import torch

    prev = torch.tensor([[model.decoder.dictionary.eos(), *target[:-1]]])
    with torch.no_grad():
        logits, _ = model(torch.tensor([list(source)]), torch.tensor([len(source)]), prev)
    return torch.log_softmax(logits.float(), -1)[0]


def token_category(exported: Exported, hub, bpe, escaped: bool, line: str, run_ids: List[int]) -> str:
    """Why the exported tokenizer gives ``line`` other ids than the run: ``same`` (it does not), ``moses``
    (FSMTTokenizer's Unicode punctuation replacement or control-character removal makes other Moses tokens),
    ``vocabulary filter`` (the same Moses tokens, segmented by the kept merges as designed) or ``other``
    (neither: the export is wrong)."""
    tokenizer = exported.tokenizer
    if tokenizer(line).input_ids == run_ids:
        return "same"
    lang = tokenizer.src_lang
    words = tokenizer.moses_tokenize(tokenizer.moses_pipeline(line, lang=lang), lang)
    if [unescape(w) if escaped else w for w in words] != hub.tokenize(line).split():
        return "moses"
    designed = hub.src_dict.encode_line(" ".join(bpe.segment_tokens(hub.tokenize(line).split())),
                                        add_if_not_exist=False).tolist()
    return "vocabulary filter" if designed == tokenizer(line).input_ids else "other"


def fairseq_greedy(hub, ids) -> List[int]:
    """fairseq's greedy search on one source (the hub is loaded with beam_stop fairseq), without ``</s>``."""
    import torch

    tokens = hub.generate([torch.tensor(list(ids))], beam=1)[0][0]["tokens"].tolist()
    return tokens[:-1] if tokens and tokens[-1] == hub.tgt_dict.eos() else tokens


def compare_sentence(exported: Exported, hub, ids: List[int], a: float, b: int) -> dict:
    """One source through fairseq's greedy search and the export's: whether the outputs are equal, the largest
    log-probability difference along fairseq's output (over max(1, |log P|), as :data:`TOLERANCE`), and where
    the outputs part, how much more the plugin gives its own token than the export's (0: a tie)."""
    ours = fairseq_greedy(hub, ids)
    theirs = exported.generate([ids], a, b, num_beams=1)[0]
    eos = hub.tgt_dict.eos()
    target = ours + [eos]
    plugin = plugin_log_probs(hub.models[0], ids, target)
    difference = float(((plugin - exported.log_probs(ids, target)).abs() / plugin.abs().clamp(min=1)).max())
    gap = 0.0
    if ours != theirs:
        t = next(i for i in range(len(target)) if i >= len(theirs) or target[i] != theirs[i])
        gap = float(plugin[t, target[t]] - plugin[t, theirs[t] if t < len(theirs) else eos])
    return {"same": ours == theirs, "difference": difference, "gap": gap}


def check_lines(run_dir: Path, n: int) -> List[str]:
    """The first ``n`` non-empty lines of the run's raw test source (results.json), else a few fixed ones."""
    try:
        results = load("attn_plugin.run_cards").read_results(run_dir, required=("test_source",))
    except load("attn_plugin.errors").AttnPluginError:
        return list(FALLBACK_SENTENCES)[:n]
    if results.get("test_source_tokenized"):
        return list(FALLBACK_SENTENCES)[:n]
    lines = [line for line in read_lines(Path(results["test_source"]), "test_source", "replace") if line.strip()]
    return lines[:n] or list(FALLBACK_SENTENCES)[:n]


def check_export(folder: Path, hub, lines: Sequence[str], kept: Sequence[Tuple[str, str]], args: dict) -> dict:
    """The written export against fairseq on ``lines``: fed the run's token ids, it must give fairseq's greedy
    output (but for an exact tie) with log-probabilities within :data:`TOLERANCE`, and the tokenizer the run's
    ids or differ only as designed; else a UserError naming the first sentence that fails. Returns what it
    measured."""
    exported = Exported(folder)
    gen = hub.cfg.generation
    a, b = float(gen.max_len_a), int(gen.max_len_b)
    escaped = not args.get("moses_escape")
    bpe = plain_bpe(kept, args.get("bpe_separator") or "@@")
    report = {"sentences": len(lines), "token_ids_identical": 0, "greedy_identical": 0, "greedy_ties": 0,
              "max_log_prob_difference": 0.0}
    for k, line in enumerate(lines, 1):
        ids = hub.encode(line).tolist()
        category = token_category(exported, hub, bpe, escaped, line, ids)
        if category == "other":
            raise UserError(f"the exported tokenizer gives check sentence {k} ({line[:40]!r}) ids that neither the run "
                            "nor its exported merges give: the export is wrong; nothing was written")
        report["token_ids_identical"] += category == "same"
        result = compare_sentence(exported, hub, ids, a, b)
        report["max_log_prob_difference"] = max(report["max_log_prob_difference"], result["difference"])
        if result["difference"] > TOLERANCE or result["gap"] > TOLERANCE:
            what = (f"its log-probabilities differ from the plugin's by up to {result['difference']:.3g} (relative)"
                    if result["difference"] > TOLERANCE
                    else f"its greedy output parts from fairseq's where fairseq's token is {result['gap']:.3g} more "
                         "likely")
            raise UserError(f"the exported model does not reproduce the run on check sentence {k} ({line[:40]!r}): "
                            f"{what}; nothing was written")
        report["greedy_identical"] += result["same"]
        report["greedy_ties"] += not result["same"]
    report["max_log_prob_difference"] = float(f"{report['max_log_prob_difference']:.3g}")
    return report


# --------------------------------------------------------------------------------------------- export
def export(run_dir, out_dir, checkpoint: Optional[str] = None, ignore_changed_files: bool = False,
           check_sentences: int = CHECK_SENTENCES) -> dict:
    """Export RUN_DIR's evaluated model (or ``checkpoint``) to ``out_dir`` (replaced whole, atomically) as
    FSMTForConditionalGeneration with FSMTTokenizer's files and :data:`CARD`, checked against fairseq
    (:func:`check_export`) before it is moved into place; returns the card."""
    try:
        import transformers
    except ImportError:
        raise UserError(INSTALL) from None
    quiet_transformers()
    run_dir = Path(run_dir)
    info, args, hub = load_run(run_dir, checkpoint, ignore_changed_files, beam_stop="fairseq")
    model = hub.models[0]
    problems = unsupported(model, info, args)
    if problems:
        raise UserError("transformers' FSMT cannot represent this run: " + "; ".join(problems))
    lines = check_lines(run_dir, check_sentences)
    gen = hub.cfg.generation
    card = {"engine": "transformers", "transformers": transformers.__version__,
            "model_class": "FSMTForConditionalGeneration", "tokenizer_class": "FSMTTokenizer",
            "exported_from": str(run_dir.resolve()), "checkpoint": str(checkpoint or info["checkpoint"]),
            "generation": {"beam": int(gen.beam), "max_len_a": float(gen.max_len_a), "max_len_b": int(gen.max_len_b),
                           "gnmt_alpha": args.get("gnmt_alpha"), "lenpen": info["generation"].get("lenpen")}}
    with atomic_output(out_dir) as tmp:
        tmp = Path(tmp)
        tmp.mkdir()
        gen_card = card["generation"]  # the run's beam search where it is fairseq's (no GNMT): transformers' own
        fsmt = build_fsmt(model, hub.src_dict, hub.tgt_dict, (args["source_lang"], args["target_lang"]),
                          None if gen_card["gnmt_alpha"] is not None else gen_card["beam"],
                          gen_card["lenpen"] if gen_card["lenpen"] is not None else 1.0)
        fsmt.save_pretrained(str(tmp))
        card["tokenizer"], kept = write_tokenizer(tmp, hub.src_dict, hub.tgt_dict, args,
                                                  int(model.encoder.max_positions()))
        for name in ("bpe_codes", "bpe_vocabulary"):  # the run's own BPE, for exact token ids (the docs)
            if args.get(name):
                shutil.copyfile(args[name], tmp / name)
                card["tokenizer"][name] = name
        card["check"] = check_export(tmp, hub, lines, kept, args)
        (tmp / CARD).write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    return card


# --------------------------------------------------------------------------------------------- the test set
def compare_test_set(run_dir, folder, ignore_changed_files: bool = False, batch_size: int = 64) -> dict:
    """The export in ``folder`` against the run on its whole raw test source: how many lines get the run's token
    ids (and why not), how many greedy and beam-search translations (the run's settings, and the paper's: beam 4,
    GNMT alpha 0.6 given as ``length_penalty`` 0.6, not the same penalty) equal translate.py's and fairseq's."""
    quiet_transformers()
    run_dir = Path(run_dir)
    results = load("attn_plugin.run_cards").read_results(run_dir, required=("test_source",))
    if results.get("test_source_tokenized"):
        raise UserError(f"{run_dir}: its test source is tokenized (a parsing run), not raw text")
    lines = read_input(Path(results["test_source"]), "test_source")
    todo = [i for i, line in enumerate(lines) if line.strip()]
    _, args, hub = load_run(run_dir, None, ignore_changed_files, beam_stop="fairseq")
    exported = Exported(folder)
    card = json.loads((Path(folder) / CARD).read_text(encoding="utf-8"))
    run_ids = [hub.encode(lines[i]).tolist() for i in todo]
    hf_ids = [exported.tokenizer(lines[i]).input_ids for i in todo]
    bpe = plain_bpe(run_merges(args)[1], args.get("bpe_separator") or "@@")
    categories: Dict[str, List[int]] = {}
    for k, i in enumerate(todo):
        category = token_category(exported, hub, bpe, card["tokenizer"]["escaped"], lines[i], run_ids[k])
        categories.setdefault(category, []).append(i + 1)
    subset = [lines[i] for i in todo]
    outputs = {**transformers_outputs(exported, hf_ids, run_ids, card["generation"], batch_size),
               **fairseq_outputs(run_dir, subset, ignore_changed_files, batch_size)}
    return summarize(todo, categories, run_ids, hf_ids, outputs, card["generation"], results)


def run_penalty(generation: dict) -> float:
    """transformers' ``length_penalty`` a user would give for the run's: its GNMT alpha, else its lenpen."""
    return next((v for v in (generation.get("gnmt_alpha"), generation.get("lenpen")) if v is not None), 1.0)


def transformers_outputs(exported: Exported, hf_ids, run_ids, generation: dict, batch_size: int) -> dict:
    """The export's translations: greedy and beam search with the run's beam and penalty, from its tokenizer's
    ids and from the run's; beam search with the paper's; all with fairseq's stopping rule."""
    a, b = generation["max_len_a"], generation["max_len_b"]

    def texts(sources, **options):
        outs = exported.generate(sources, a, b, batch_size=batch_size, **options)
        return [exported.tokenizer.decode(ids, skip_special_tokens=True) for ids in outs]

    beam = dict(num_beams=generation["beam"], length_penalty=run_penalty(generation), early_stopping=True)
    paper = dict(num_beams=PAPER_BEAM, length_penalty=PAPER_ALPHA, early_stopping=True)
    return {"hf_greedy": texts(hf_ids, num_beams=1), "hf_greedy_run_ids": texts(run_ids, num_beams=1),
            "hf_beam_run": texts(hf_ids, **beam), "hf_beam_run_run_ids": texts(run_ids, **beam),
            "hf_beam_paper": texts(hf_ids, **paper)}


def fairseq_outputs(run_dir: Path, subset: List[str], ignore_changed_files: bool, batch_size: int) -> dict:
    """scripts/translate.py's translations (batches of ``batch_size``): --beam 1, the run's own settings, the
    paper's beam search; and fairseq's greedy search one sentence at a time (its own length limit each)."""
    def translate(options: dict, size: int = batch_size) -> List[str]:
        return Translator(run_dir, {**options, "ignore_changed_files": ignore_changed_files}).translate(subset, size)

    return {"translate_beam1": translate({"beam": 1}),
            "fairseq_greedy": translate({"beam": 1, "beam_stop": "fairseq"}, 1),
            "translate_run": translate({}),
            "translate_paper": translate({"beam": PAPER_BEAM, "gnmt_alpha": PAPER_ALPHA})}


def summarize(todo: List[int], categories: Dict[str, List[int]], run_ids, hf_ids, outputs: Dict[str, List[str]],
              generation: dict, results: dict) -> dict:
    """:func:`compare_test_set`'s numbers from its outputs (one list of translations per way of decoding,
    in the order of ``todo``, the test lines that are not empty; line numbers count from 1)."""
    def same(x: str, y: str) -> List[int]:
        return [k for k, (p, q) in enumerate(zip(outputs[x], outputs[y])) if p == q]

    greedy_same = set(same("hf_greedy", "translate_beam1"))
    differ = [k for k in range(len(todo)) if k not in greedy_same]
    ids_same = [k for k in differ if run_ids[k] == hf_ids[k]]
    # fairseq's greedy search one sentence at a time agrees: translate.py's batches (a length limit from
    # the batch's longest source) or, for a GNMT run, its stopping rule
    batches = [k for k in ids_same if outputs["hf_greedy"][k] == outputs["fairseq_greedy"][k]]
    penalty = (f"GNMT alpha {generation['gnmt_alpha']:g}" if generation.get("gnmt_alpha") is not None
               else f"fairseq lenpen {generation.get('lenpen', 1.0):g}")
    out = {
        "test_source": results["test_source"], "sentences": len(todo),
        "token_ids_identical": len(categories.get("same", [])),
        "token_ids_differing": {name: {"lines": len(found), "first": found[:5]} for name, found in categories.items()
                                if name != "same"},
        "greedy_identical_to_translate_beam1": len(greedy_same),
        "greedy_differing": {"other_token_ids": len(differ) - len(ids_same),
                             "same_token_ids_translate_batches_or_stop_rule": len(batches),
                             "same_token_ids_other": len(ids_same) - len(batches),
                             "first": [todo[k] + 1 for k in differ[:5]]},
        "greedy_identical_to_fairseq_greedy": len(same("hf_greedy", "fairseq_greedy")),
        "greedy_from_run_ids_identical_to_fairseq_greedy": len(same("hf_greedy_run_ids", "fairseq_greedy")),
        "greedy_from_run_ids_identical_to_translate_beam1": len(same("hf_greedy_run_ids", "translate_beam1")),
        "beam_run": {"transformers": f"num_beams {generation['beam']}, length_penalty {run_penalty(generation):g}, "
                                     "early_stopping true",
                     "translate": f"the run's: beam {generation['beam']}, {penalty}",
                     "identical": len(same("hf_beam_run", "translate_run")),
                     "identical_from_run_ids": len(same("hf_beam_run_run_ids", "translate_run"))},
        "beam_paper": {"transformers": f"num_beams {PAPER_BEAM}, length_penalty {PAPER_ALPHA:g}, early_stopping true",
                       "translate": f"--beam {PAPER_BEAM} --gnmt-alpha {PAPER_ALPHA:g} (the paper's beam search)",
                       "identical": len(same("hf_beam_paper", "translate_paper"))},
        "max_length": f"{generation['max_len_a']:g} x source + {generation['max_len_b']}",
    }
    reference = results.get("test_reference")
    if reference:
        refs = read_input(Path(reference), "test_reference")
        out["sacrebleu"] = {name: sacrebleu_score(hyps, [refs[i] for i in todo]) for name, hyps in outputs.items()}
    return out


# --------------------------------------------------------------------------------------------- command line
DESCRIPTION = ("Export a recipe run's evaluated model as a Hugging Face transformers model (FSMT) with its "
               "tokenizer; transformers' AutoModelForSeq2SeqLM and AutoTokenizer load the folder. The export "
               "checks itself against fairseq and refuses a model it cannot reproduce.")


def parse_args(argv=None):
    p = ArgumentParser(prog="python scripts/export_hf.py", description=DESCRIPTION,
                       epilog="Then: AutoTokenizer.from_pretrained(DIR), AutoModelForSeq2SeqLM.from_pretrained(DIR), "
                              "model.generate(**tokenizer(lines, return_tensors='pt', padding=True)); see "
                              "docs/using-a-model.md (Hugging Face transformers).")
    p.add_argument("run_dir", type=Path, help="a recipe's --workdir (holds inference.json)")
    add_output_option(p, "the folder to write (a new one, or with --force an earlier export, which is replaced)",
                      metavar="DIR")
    options.add(p, "checkpoint")
    p.add_argument("--check-sentences", type=Number(int, minimum=1), default=CHECK_SENTENCES,
                   help=f"test sentences the export checks against fairseq, greedy (default {CHECK_SENTENCES})")
    p.add_argument("--compare-test-set", type=Path, metavar="RESULTS_JSON",
                   help="after the export, translate the run's whole test source with it and with "
                        "scripts/translate.py (greedy, and beam search) and write the agreement to this results file")
    options.add(p, "note", "with --compare-test-set")
    add_force_option(p, "an earlier export in --output (and the --compare-test-set file)")
    add_ignore_changed_option(p)
    args = p.parse_args(argv)
    if args.out is None:
        raise UsageError("give --output DIR, the folder to write")
    check_export_folder(args.out, CARD, "--output", args)
    if args.compare_test_set:
        check_output(args.compare_test_set, "--compare-test-set", args.force, inputs=[args.run_dir, args.out])
    return args


def main(argv=None):
    args = parse_args(argv)
    card = export(args.run_dir, args.out, str(args.checkpoint.resolve()) if args.checkpoint else None,
                  args.ignore_changed_files, args.check_sentences)
    check = card["check"]
    log(f"wrote {args.out}: FSMT, greedy output of fairseq on {check['greedy_identical']} of {check['sentences']} "
        f"check sentences ({check['greedy_ties']} at a tie), the run's token ids on {check['token_ids_identical']}; "
        f"load it with AutoModelForSeq2SeqLM.from_pretrained({str(args.out)!r})", stream=sys.stderr)
    if args.compare_test_set:
        result = compare_test_set(args.run_dir, args.out, args.ignore_changed_files)
        extra = {"note": args.note} if args.note else {}
        write_results_file(args.compare_test_set, None, result, **extra)
        log(f"wrote {args.compare_test_set}: greedy {result['greedy_identical_to_translate_beam1']} of "
            f"{result['sentences']} lines as translate.py --beam 1, token ids {result['token_ids_identical']}",
            stream=sys.stderr)
    return 0
