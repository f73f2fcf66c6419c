"""A trained run as a CTranslate2 model: export (``scripts/export_ctranslate2.py RUN_DIR OUT_DIR``) and decoding
(``scripts/translate.py --engine ctranslate2 OUT_DIR``) with the run's own pre- and post-processing.

:func:`export` builds CTranslate2's ``TransformerSpec`` from the plugin's weights; :class:`CT2Translator`
decodes with CTranslate2's beam search and scores as fairseq-generate ``--beam-stop fairseq`` does (the finished
hypotheses reranked on fairseq's score, GNMT penalty included; ``</s>`` at the first step and the length limit
repaired). The full account is in docs/using-a-model.md (CTranslate2).
"""
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from .. import options
from ..cli import (ArgumentParser, UsageError, UserError, add_force_option, add_ignore_changed_option, atomic_output,
                   check_output, log)
from ..metrics.trees import delinearize
from ..fairseq_layer.plugin import load, quiet_inference

CARD = "ct2_card.json"
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
                 "bfloat16")
INSTALL = "CTranslate2 is not installed: pip install attn_plugin[ct2] (or pip install ctranslate2)"
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which the plugin's AddNorm keeps
PAD_NAME = "<blank>"  # CTranslate2's converters' name for the padding token
# Sentences per CTranslate2 call when several calls run at once on one thread each (CPU): smaller calls waste
# less on padding and finished sentences (timed on the bundled model: docs/using-a-model.md, CTranslate2).
PARALLEL_CALL = 32


def require_ctranslate2():
    """The ``ctranslate2`` module, or a one-line UserError saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(INSTALL) from None
    return ctranslate2


# --------------------------------------------------------------------------------------------- export
def load_run(run_dir: Path, checkpoint: Optional[str], ignore_changed_files: bool, **options):
    """(the run's card, its resolved args, fairseq's hub of its model in eval mode; ``options`` for
    from_pretrained): the card and every file it names checked before anything loads. Also hf_export's and
    translate's."""
    quiet_inference()
    run_cards = load("attn_plugin.run_cards")
    info = run_cards.read_run_card(run_dir, not ignore_changed_files)
    AttnTransformerModel = load("attn_plugin.models.attn_transformer").AttnTransformerModel
    hub = AttnTransformerModel.from_pretrained(str(run_dir), checkpoint_file=checkpoint,
                                               ignore_changed_files=ignore_changed_files, **options)
    hub.eval()
    return info, run_cards.resolved_args(run_dir, info), hub


def plugin_positions(embed, rows: int):
    """The plugin's positional encodings of positions 0 .. rows-1 (Sec. 3.5) as its Embedding adds them: the
    sinusoid table in the run's layout, or the learned one (zeros past its end, which the plugin never reaches)."""
    import torch

    pe = embed.positions
    if pe.weight is not None:
        table = pe.weight.detach()[pe.offset:pe.offset + rows].float()
        return torch.cat([table, table.new_zeros(rows - table.size(0), table.size(1))])
    sinusoidal_encoding = load("attn_plugin.models.attn_transformer").sinusoidal_encoding
    return sinusoidal_encoding(torch.arange(rows + pe.offset), pe.d_model, pe.layout)[pe.offset:]


def unsupported(model) -> List[str]:
    """What CTranslate2's Transformer cannot represent in the plugin ``model``, one phrase per problem naming
    the option that made it; empty if it can be exported."""
    AttnTransformerModel = load("attn_plugin.models.attn_transformer").AttnTransformerModel
    if not isinstance(model, AttnTransformerModel):
        return [f"the model is {type(model).__name__}, not attn_plugin's attn_transformer (stock fairseq "
                "transformers convert with CTranslate2's own ct2-fairseq-converter)"]
    problems = []
    attentions = [layer.self_attn for layer in model.encoder.layers]
    attentions += [a for layer in model.decoder.layers for a in (layer.self_attn, layer.cross_attn)]
    pairs = sorted({(a.d_k, a.d_v) for a in attentions if a.d_k != a.d_v})
    if pairs:
        d_k, d_v = pairs[0]
        problems.append(f"--attention-key-dim {d_k} != --attention-value-dim {d_v}: CTranslate2 has one head_dim "
                        "for queries, keys and values (d_k = d_v is fine, also != d_model/h)")
    d_enc = model.encoder.embed.embed_tokens.embedding_dim
    d_dec = model.decoder.embed.embed_tokens.embedding_dim
    if d_enc != d_dec:
        problems.append(f"--encoder-embed-dim {d_enc} != --decoder-embed-dim {d_dec}")
    return problems


def _np(tensor):
    return tensor.detach().float().cpu().numpy().copy()


def _linear(spec, module):
    spec.weight = _np(module.weight)
    if module.bias is not None:
        spec.bias = _np(module.bias)


def _norm(spec, module):
    spec.gamma = _np(module.weight)
    spec.beta = _np(module.bias)


def _attention(spec, module, norm):
    """Fused projections one to one: self-attention's [W^Q | W^K | W^V] and W^O as linear[0..1] (CTranslate2's
    fused order), cross-attention's W^Q, [W^K | W^V] and W^O as linear[0..2]; then the sub-layer's norm."""
    import numpy as np

    parts = (module.w_qkv, module.w_o) if module.self_attention else (module.w_q, module.w_kv, module.w_o)
    for linear, part in zip(spec.linear, parts):
        _linear(linear, part)
    spec.queries_scale = np.float32(1.0 / math.sqrt(module.d_k))  # softmax(QK^T / sqrt(d_k)), eq. 1
    _norm(spec.layer_norm, norm)


def vocabulary(dictionary) -> List[str]:
    """A fairseq dictionary's symbols in id order, padding named as CTranslate2 names it."""
    return [PAD_NAME if i == dictionary.pad() else s for i, s in enumerate(dictionary.symbols)]


def build_spec(model, src_dict, tgt_dict):
    """CTranslate2's ``TransformerSpec`` holding the weights of the plugin ``model`` (eval mode, any device and
    dtype), validated: post-norm layers, one embedding matrix for both inputs and the pre-softmax projection
    (Sec. 3.4) scaled by sqrt(d_model), the plugin's own position table as explicit ``position_encodings``."""
    problems = unsupported(model)
    if problems:
        raise UserError("CTranslate2 cannot represent this model: " + "; ".join(problems))
    ct2 = require_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    enc, dec = model.encoder, model.decoder
    d_model = enc.embed.embed_tokens.embedding_dim

    def side(layers, spec_class):
        heads, d_k = layers[0].self_attn.h, layers[0].self_attn.d_k
        head_dim = None if d_k * heads == d_model else d_k  # None: CTranslate2's default d_model / h
        return spec_class(len(layers), heads, pre_norm=False, activation=common_spec.Activation.RELU,
                          head_dim=head_dim)

    spec = transformer_spec.TransformerSpec(side(enc.layers, transformer_spec.TransformerEncoderSpec),
                                            side(dec.layers, transformer_spec.TransformerDecoderSpec))
    e, d = spec.encoder, spec.decoder
    e.embeddings[0].weight = _np(enc.embed.embed_tokens.weight)
    d.embeddings.weight = _np(dec.embed.embed_tokens.weight)
    d.projection.weight = _np(dec.embed.embed_tokens.weight)  # tied pre-softmax matrix, no bias
    for side_spec, stack in ((e, enc), (d, dec)):
        side_spec.scale_embeddings = True  # x sqrt(d_model)
        side_spec.position_encodings.encodings = _np(plugin_positions(stack.embed, stack.embed.positions.max_positions))
        for layer_spec, layer in zip(side_spec.layer, stack.layers):
            _attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm)
            if stack is dec:
                _attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_norm)
            _linear(layer_spec.ffn.linear_0, layer.ffn.w_1)
            _linear(layer_spec.ffn.linear_1, layer.ffn.w_2)
            _norm(layer_spec.ffn.layer_norm, layer.ffn_norm)
    spec.register_source_vocabulary(vocabulary(src_dict))
    spec.register_target_vocabulary(vocabulary(tgt_dict))
    config = spec.config
    config.bos_token, config.eos_token, config.unk_token = (src_dict.symbols[src_dict.bos()],
                                                            tgt_dict.symbols[tgt_dict.eos()],
                                                            tgt_dict.symbols[tgt_dict.unk()])
    config.decoder_start_token = config.eos_token  # fairseq's decoder starts from </s>
    config.add_source_eos = True  # fairseq's source ends with </s>
    config.add_source_bos = False
    config.layer_norm_epsilon = LAYER_NORM_EPS
    try:
        spec.validate()
    except ValueError as exc:
        raise UserError(f"CTranslate2 {ct2.__version__} refused the converted model: {' '.join(str(exc).split())}"
                        ) from None
    return spec


def save_spec(spec, out_dir: Path, quantization: Optional[str] = None):
    """Optimize (alias shared weights, quantize) and save ``spec`` into the new folder ``out_dir``."""
    spec.optimize(quantization=quantization)
    Path(out_dir).mkdir(parents=True)
    spec.save(str(out_dir))


# card args that belong to the tokenizer / BPE / decoding, kept in the export's card
_ENCODER_OPTIONS = {"source_lang", "target_lang", "tokenizer", "bpe", "gnmt_alpha"}


def export(run_dir, out_dir, quantization: Optional[str] = None, checkpoint: Optional[str] = None,
           ignore_changed_files: bool = False) -> dict:
    """Export RUN_DIR's evaluated model (or ``checkpoint``) to ``out_dir`` (replaced whole, atomically) as a
    CTranslate2 model with the run's BPE files and :data:`CARD`; returns the card. ``ignore_changed_files``:
    export a run whose dictionaries or BPE files changed since it made them."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UsageError(f"--quantization {quantization}: choose from {', '.join(QUANTIZATIONS)}")
    ct2 = require_ctranslate2()
    run_dir = Path(run_dir)
    info, args, hub = load_run(run_dir, checkpoint, ignore_changed_files)
    model = hub.models[0]
    cfg = hub.cfg.model
    spec = build_spec(model, hub.task.source_dictionary, hub.task.target_dictionary)
    for kind in ("tokenizer", "bpe"):  # one the engine cannot run is refused now, not at translation time
        _encoder(kind, args.get(kind), args)
    files = {}
    kept = {"tokenizer": None, "bpe": None}  # always in the card (null: none), so that none is ever lost
    for name, value in args.items():
        if name in load("attn_plugin.run_cards").PATH_ARGS:
            if value:
                files[name] = Path(value)  # in RUN_DIR and of the right kind: read_run_card checked
        elif name in _ENCODER_OPTIONS or name.startswith(("moses_", "bpe_", "subword_", "sentencepiece_")):
            kept[name] = value
    card = {"engine": "ctranslate2", "ctranslate2": ct2.__version__, "kind": info["kind"],
            "exported_from": str(run_dir.resolve()), "checkpoint": str(checkpoint or info["checkpoint"]),
            "quantization": quantization or "float32", "args": kept, "paths": sorted(files),
            "generation": dict(info["generation"]), "batch_size": info["batch_size"],
            "max_source_positions": int(model.encoder.max_positions()),
            "max_target_positions": int(model.decoder.max_positions()),
            "model": {"d_model": cfg.encoder_embed_dim, "heads": cfg.encoder_attention_heads,
                      "d_k": model.encoder.layers[0].self_attn.d_k,
                      "encoder_layers": len(model.encoder.layers), "decoder_layers": len(model.decoder.layers),
                      "positional_encoding": cfg.positional_encoding, "sinusoid_layout": cfg.sinusoid_layout}}
    with atomic_output(out_dir) as tmp:
        save_spec(spec, tmp, quantization)
        for name, path in files.items():
            shutil.copyfile(path, Path(tmp) / name)
            card["args"][name] = name  # relative to OUT_DIR
        (Path(tmp) / CARD).write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    return card


# --------------------------------------------------------------------------------------------- decoding
def read_card(out_dir) -> dict:
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise UserError(f"{out_dir}: no such folder (give the OUT_DIR that scripts/export_ctranslate2.py wrote)")
    card = out_dir / CARD
    if not card.is_file():
        if (out_dir / "inference.json").is_file():
            raise UserError(f"{out_dir} is a recipe run, not a CTranslate2 model: export it first with python "
                            f"scripts/export_ctranslate2.py {out_dir} OUT_DIR, then give OUT_DIR")
        raise UserError(f"{out_dir} has no {CARD}: give the OUT_DIR that scripts/export_ctranslate2.py wrote")
    return load("attn_plugin.run_cards").read_ct2_card(card)  # its schema; every file it names in OUT_DIR


# the plugin's encoders: module attn_plugin.encoders.NAME, classes PREFIX + Tokenizer / BPE and PREFIX + Config
_ENCODERS = {("tokenizer", "attn_moses"): "AttnMoses", ("tokenizer", "attn_treebank"): "AttnTreebank",
             ("bpe", "attn_subword_nmt"): "AttnSubwordNMT"}


def _encoder(kind: str, name: Optional[str], args: dict):
    """The plugin's registered tokenizer or BPE ``name`` (None: none), built from its dataclass config with the
    card's options of the same names, as fairseq fills it from the command line."""
    if not name:
        return None
    if (kind, name) not in _ENCODERS:
        raise UserError(f"--{kind} {name}: the CTranslate2 engine knows the plugin's "
                        f"{', '.join(n for k, n in _ENCODERS if k == kind)}")
    prefix, module = _ENCODERS[(kind, name)], load(f"attn_plugin.encoders.{name}")
    Config = getattr(module, prefix + "Config")
    options = {f: args[f] for f in Config.__dataclass_fields__ if f in args and args[f] is not None}
    return getattr(module, prefix + ("Tokenizer" if kind == "tokenizer" else "BPE"))(Config(**options))


def fairseq_batches(lengths: Sequence[int], batch_size: int) -> List[List[int]]:
    """The batches (lists of indices) fairseq's hub makes of sentences of ``lengths``: LanguagePairDataset's
    order (a permutation drawn with NumPy seed 2, get_batch_iterator's seed 1 + epoch 1, then a stable sort by
    length), cut into consecutive batches. The batch decides fairseq's length limit (its longest source)."""
    import numpy as np

    lengths = np.asarray(lengths, dtype=np.int64)
    perm = np.random.RandomState(2).permutation(len(lengths))
    order = perm[np.argsort(lengths[perm], kind="mergesort")].tolist()
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


class CT2Translator:
    """An exported run (OUT_DIR of :func:`export`) with the run's pre- and post-processing, decoding on
    CTranslate2. ``options``: scripts/translate.py's overrides (beam, gnmt_alpha, lenpen, max_len_b,
    tokenizer=None for --tokenized)."""

    def __init__(self, out_dir, options: Optional[dict] = None, threads: Optional[int] = None,
                 gpu: bool = False):
        ct2 = require_ctranslate2()
        options = dict(options or {})
        self.card = card = read_card(out_dir)
        out_dir = Path(out_dir)
        if options.pop("checkpoint_file", None):
            raise UserError("--checkpoint does not apply to an exported model: export that checkpoint with "
                            "scripts/export_ctranslate2.py RUN_DIR OUT_DIR --checkpoint FILE")
        self.parsing = card["kind"] == "parsing"
        args = load("attn_plugin.run_cards").resolved_args(out_dir, card)
        generation = dict(card["generation"])
        self.beam = int(options.get("beam") or generation.get("beam", 5))
        self.max_len_a = float(generation.get("max_len_a", 0))
        self.max_len_b = int(options["max_len_b"] if options.get("max_len_b") is not None
                             else generation.get("max_len_b", 200))
        # the penalty: an override first (--lenpen switches GNMT off, as the hub does), then the run's
        if options.get("lenpen") is not None:
            self.gnmt_alpha, self.lenpen = None, float(options["lenpen"])
        elif options.get("gnmt_alpha") is not None:
            self.gnmt_alpha, self.lenpen = float(options["gnmt_alpha"]), None
        elif args.get("gnmt_alpha") is not None and "lenpen" not in generation:
            self.gnmt_alpha, self.lenpen = float(args["gnmt_alpha"]), None
        else:
            self.gnmt_alpha, self.lenpen = None, float(generation.get("lenpen", 1.0))
        self.tokenizer = None if "tokenizer" in options and options["tokenizer"] is None else \
            _encoder("tokenizer", args.get("tokenizer"), args)
        self.bpe = _encoder("bpe", args.get("bpe"), args)
        self.max_source = card.get("max_source_positions")
        self.max_target = card.get("max_target_positions") or 1024
        self.device = "cuda" if gpu else "cpu"
        if gpu and ct2.get_cuda_device_count() == 0:
            raise UserError("--ngpus 1: CTranslate2 sees no CUDA GPU (no GPU here, or a CPU-only build)")
        self.out_dir = out_dir
        self.threads = threads or (os.cpu_count() or 1)
        self._translators = {}
        self._load(parallel=False)  # a model CTranslate2 cannot load is reported now

    def _load(self, parallel: bool):
        """CTranslate2's translator, one at a time (each holds the model): ``parallel`` (CPU, several batches to
        do): ``threads`` batches at once, one thread each; else one batch on all threads."""
        if parallel not in self._translators:
            self._translators.clear()
            ct2 = require_ctranslate2()
            threads = dict(intra_threads=1, inter_threads=self.threads) if parallel else \
                dict(intra_threads=self.threads if self.device == "cpu" else 0)
            try:
                self._translators[parallel] = ct2.Translator(str(self.out_dir), device=self.device, **threads)
            except (RuntimeError, ValueError) as exc:
                raise UserError(f"CTranslate2 cannot load {self.out_dir}: {' '.join(str(exc).split())}") from None
        return self._translators[parallel]

    # pre- and post-processing, as fairseq's hub interface does them
    def words(self, line: str) -> List[str]:
        return (self.tokenizer.encode(line) if self.tokenizer else line).split()

    def encode(self, line: str) -> List[str]:
        """The source tokens (BPE units; CTranslate2 appends </s>)."""
        text = self.tokenizer.encode(line) if self.tokenizer else line
        return (self.bpe.encode(text) if self.bpe else text).split()

    def decode(self, line: str, tokens: List[str]) -> str:
        text = " ".join(t for t in tokens if t not in ("</s>", "<s>"))  # fairseq's Dictionary.string drops them
        if self.bpe:
            text = self.bpe.decode(text)
        if self.parsing:
            return str(delinearize(text.split(), self.words(line))[0])
        return self.tokenizer.decode(text) if self.tokenizer else text

    def max_length(self, source_tokens: int) -> int:
        """fairseq's longest output before </s> for a batch whose longest source has ``source_tokens`` (with </s>)."""
        return min(int(self.max_len_a * source_tokens + self.max_len_b), self.max_target - 1)

    def penalty(self, n: int) -> float:
        """The run's length penalty for a hypothesis of ``n`` tokens, </s> included."""
        if self.gnmt_alpha is not None:
            return ((5.0 + n) / 6.0) ** self.gnmt_alpha
        return float(n) ** self.lenpen

    def search_penalty(self, batch: List[List[str]]) -> float:
        """CTranslate2's ``length_penalty`` for the search: fairseq's lenpen itself; for GNMT the exponent p with
        |Y|^p closest to ((5 + |Y|) / 6)^alpha around the batch's mean source length (it only decides which
        hypotheses CTranslate2 keeps when more than ``beam`` finish at once; the engine ranks them by the run's
        penalty). Never 0: that would switch CTranslate2 to stopping when the best beam finishes."""
        if self.gnmt_alpha is None:
            p = self.lenpen
        else:
            n = sum(len(s) + 1 for s in batch) / len(batch)
            p = self.gnmt_alpha * n / (5.0 + n)
        return p if p != 0 else 1e-9

    def _translate(self, batch, max_len: int, penalty: float, min_len: int, translator, asynchronous=False):
        return translator.translate_batch(
            batch, beam_size=self.beam, num_hypotheses=self.beam, length_penalty=penalty, return_end_token=True,
            return_scores=True, max_input_length=0, max_decoding_length=max_len, min_decoding_length=min_len,
            asynchronous=asynchronous)

    def search(self, batch: List[List[str]]) -> List[Tuple[List[str], float]]:
        """The best hypothesis (target tokens, no </s>) for each source of ``batch`` under the run's beam, length
        limit and length penalty, with fairseq's score (log P(Y|X) / penalty(|Y|), natural log)."""
        return self.search_batches([batch])[0]

    def search_batches(self, batches: List[List[List[str]]], parallel: bool = False
                       ) -> List[List[Tuple[List[str], float]]]:
        """:meth:`search` for each of ``batches``, all submitted to CTranslate2 at once (``parallel``: to a
        translator that decodes ``threads`` calls at the same time, each batch cut into calls of at most
        :data:`PARALLEL_CALL` sentences that keep the batch's length limit and penalty)."""
        translator = self._load(parallel)
        plans = []
        for batch in batches:
            max_len = self.max_length(max(len(s) for s in batch) + 1)
            p = self.search_penalty(batch)
            step = PARALLEL_CALL if parallel else len(batch)
            # min length 0: CTranslate2 forbids </s> by masking it before the softmax, which would add
            # -log(1 - P(</s> first)) to every score; fairseq masks it after (see _finish)
            calls = [(part, self._translate(part, max_len, p, 0, translator, asynchronous=True))
                     for part in (batch[i:i + step] for i in range(0, len(batch), step))]
            plans.append((max_len, p, calls))
        return [[best for part, pending in calls
                 for best in self._finish(translator, part, max_len, p, [r.result() for r in pending])]
                for max_len, p, calls in plans]

    def _finish(self, translator, batch, max_len: int, p: float, results) -> List[Tuple[List[str], float]]:
        """The best of each sentence's finished hypotheses ``results`` on fairseq's score."""
        hyps = [self._hypotheses(r, p) for r in results]
        # Sentences where </s> first made the beam: searched again with min length 1, as fairseq
        # searches, and the term -log(1 - P(</s> first)) that CTranslate2's masking adds subtracted.
        redo = [i for i, h in enumerate(hyps) if any(not words and done for words, _, done in h)]
        if redo:
            again = self._translate([batch[i] for i in redo], max_len, p, 1, translator)
            first_eos = translator.score_batch([batch[i] for i in redo], [[] for _ in redo], max_input_length=0)
            for i, r, s in zip(redo, again, first_eos):
                shift = math.log1p(-math.exp(min(s.log_probs[0], -1e-12)))
                hyps[i] = [(w, raw + shift if done else None, done) for w, raw, done in self._hypotheses(r, p)]
        # Hypotheses that reached the length limit: fairseq appends </s> and scores it.
        limit = [(i, k) for i, h in enumerate(hyps) for k, (_, _, done) in enumerate(h) if not done]
        if limit:
            scored = translator.score_batch([batch[i] for i, _ in limit], [hyps[i][k][0] for i, k in limit],
                                            max_input_length=0)
            for (i, k), s in zip(limit, scored):
                hyps[i][k] = (hyps[i][k][0], float(sum(s.log_probs)), True)
        scored = [[(words, raw / self.penalty(len(words) + 1)) for words, raw, _ in h] for h in hyps]
        return [max(h, key=lambda x: x[1]) for h in scored]

    @staticmethod
    def _hypotheses(result, penalty: float):
        """(tokens without </s>, log P(Y|X) or None, ended by </s>) of a result scored log P / |Y|^penalty."""
        out = []
        for tokens, score in zip(result.hypotheses, result.scores):
            tokens = list(tokens)
            done = bool(tokens) and tokens[-1] == "</s>"
            raw = score * float(len(tokens)) ** penalty if done else None
            out.append((tokens[:-1] if done else tokens, raw, done))
        return out

    def translate(self, lines: List[str], batch_size: int, progress=None) -> List[str]:
        out = [""] * len(lines)
        todo = [(i, self.encode(line)) for i, line in enumerate(lines) if line.strip()]
        for i, tokens in todo:
            n = len(tokens) + 1  # with </s>
            if self.max_source and n > self.max_source:
                raise UserError(f"line {i + 1} is {n} tokens long after BPE; the model reads at most "
                                f"{self.max_source} (its max_source_positions): split it into shorter sentences")
        chunk = batch_size * 8  # as the fairseq engine hands lines to the hub, which batches them
        for start in range(0, len(todo), chunk):
            part = todo[start:start + chunk]
            batches = fairseq_batches([len(t) for _, t in part], batch_size)
            parallel = self.device == "cpu" and self.threads > 1 and len(part) > PARALLEL_CALL
            best = self.search_batches([[part[k][1] for k in batch] for batch in batches], parallel)
            for batch, results in zip(batches, best):
                for k, (tokens, _) in zip(batch, results):
                    i = part[k][0]
                    out[i] = self.decode(lines[i], tokens)
            if progress:
                progress.update(start + len(part))
        return out


# --------------------------------------------------------------------------------------------- command line
def check_export_folder(out: Path, card: str, option: str, args):
    """Before any work: ``out`` must differ from ``args.run_dir`` and be new, empty or an earlier export (holding
    ``card``), which the export replaces (:func:`attn_kit.cli.check_output`). Also hf_export's."""
    if out.resolve() == args.run_dir.resolve():
        raise UsageError(f"{option} must differ from RUN_DIR")
    empty = out.is_dir() and not out.is_symlink() and not any(out.iterdir())
    if (out.exists() or out.is_symlink()) and not (empty or (out.is_dir() and (out / card).is_file())):
        raise UsageError(f"{out} exists and is not an earlier export (no {card}), which the export would replace: "
                         "give a new folder")
    check_output(out, option, force=args.force or empty, folder=True, inputs=[args.run_dir, args.checkpoint])


def parse_args(argv=None):
    p = ArgumentParser(
        prog="python scripts/export_ctranslate2.py",
        description="Export a recipe run's evaluated model to CTranslate2 (then: python scripts/translate.py "
                    "--engine ctranslate2 OUT_DIR).")
    p.add_argument("run_dir", type=Path, help="a recipe's --workdir (holds inference.json)")
    p.add_argument("out_dir", type=Path, help="the folder to write (a new one, or with --force an earlier export, "
                                              "which is replaced)")
    p.add_argument("--quantization", choices=QUANTIZATIONS,
                   help="weight type: int8 (CPU, fastest), int8_float32, float16 / int8_float16 (GPU), ... "
                        "(default: float32, the exact weights)")
    options.add(p, "checkpoint")
    add_force_option(p, "an earlier export in OUT_DIR")
    add_ignore_changed_option(p)
    args = p.parse_args(argv)
    check_export_folder(args.out_dir, CARD, "OUT_DIR", args)
    return args


def main(argv=None):
    args = parse_args(argv)
    card = export(args.run_dir, args.out_dir, args.quantization,
                  str(args.checkpoint.resolve()) if args.checkpoint else None, args.ignore_changed_files)
    penalty = (f"GNMT alpha {card['args']['gnmt_alpha']:g} (reranked n-best)" if card["args"].get("gnmt_alpha")
               is not None and "lenpen" not in card["generation"]
               else f"fairseq lenpen {card['generation'].get('lenpen', 1.0):g}")
    log(f"wrote {args.out_dir} ({card['quantization']}, beam {card['generation'].get('beam')}, {penalty}); "
        f"translate with: python scripts/translate.py --engine ctranslate2 {args.out_dir}", stream=sys.stderr)
    return 0
