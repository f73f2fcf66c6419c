"""Stock fairseq Transformer weights as the plugin's model (``attn_transformer``).

Where the paper leaves a detail open, the plugin's model makes fairseq's
choice (see :mod:`attn_plugin.models.attn_transformer`), so a stock post-norm
``transformer`` (e.g. ``transformer_wmt_en_de``) maps onto it tensor for
tensor: only the names differ, and W^Q, W^K, W^V are stacked as the plugin
stores them. With ``--sinusoid-layout fairseq`` the converted model gives
stock fairseq's log-probabilities (tests/test_model.py checks it, full forward
and incremental decoding)::

    plugin.load_state_dict(convert_fairseq_transformer_state_dict(stock.state_dict()), strict=True)
"""
from typing import Dict

from torch import Tensor

from .models.attn_transformer import stack_attention_projections

FAIRSEQ_NAMES = [  # (stock fairseq fragment, plugin fragment)
    (".self_attn.q_proj.", ".self_attn.w_q."), (".self_attn.k_proj.", ".self_attn.w_k."),
    (".self_attn.v_proj.", ".self_attn.w_v."), (".self_attn.out_proj.", ".self_attn.w_o."),
    (".encoder_attn.q_proj.", ".cross_attn.w_q."), (".encoder_attn.k_proj.", ".cross_attn.w_k."),
    (".encoder_attn.v_proj.", ".cross_attn.w_v."), (".encoder_attn.out_proj.", ".cross_attn.w_o."),
    (".self_attn_layer_norm.", ".self_attn_norm."), (".encoder_attn_layer_norm.", ".cross_attn_norm."),
    (".final_layer_norm.", ".ffn_norm."), (".fc1.", ".ffn.w_1."), (".fc2.", ".ffn.w_2."),
    ("encoder.embed_tokens.", "encoder.embed.embed_tokens."),
    ("decoder.embed_tokens.", "decoder.embed.embed_tokens."),
    ("encoder.embed_positions.weight", "encoder.embed.positions.weight"),
    ("decoder.embed_positions.weight", "decoder.embed.positions.weight"),
]


def convert_fairseq_transformer_state_dict(state_dict: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """Rename a stock fairseq post-norm ``transformer`` state dict (e.g.
    ``transformer_wmt_en_de``) to the plugin model's names, stacking q/k/v
    projections as that model stores them. Buffers that the model recomputes
    (sinusoid tables, version counters) are dropped, and so is the tied output
    projection: the model reads the embedding matrix (Sec. 3.4)."""
    out = {}
    for name, tensor in state_dict.items():
        if name.endswith((".version", "embed_positions._float_tensor")):
            continue
        if name == "decoder.output_projection.weight":
            continue
        for old, new in FAIRSEQ_NAMES:
            name = name.replace(old, new)
        out[name] = tensor
    return stack_attention_projections(out)
