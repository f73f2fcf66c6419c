"""When beam search stops: the plugin's one rule, which its task applies (attn_plugin.tasks.attn_translation)
and attn_kit's recipes read before they decode (loaded by path, without importing fairseq:
attn_kit.fairseq_layer.plugin.standalone). No imports, so that it loads alone.

t2t is tensor2tensor's stop_early, as the paper's code decoded (attn_plugin/beam_search.py); it bounds
the scores with GNMT's length penalty, so it needs that penalty. fairseq is fairseq's rule, the one rule
with fairseq's --lenpen.
"""
RULES = ("t2t", "fairseq")


def stop_rule(asked, gnmt_penalty: bool) -> str:
    """The rule beam search runs with: ``asked``, else t2t with GNMT's length penalty and fairseq's rule
    without it; ValueError for t2t without the penalty."""
    if asked == "t2t" and not gnmt_penalty:
        raise ValueError("the paper's stopping rule bounds scores with its length penalty")
    return asked or ("t2t" if gnmt_penalty else "fairseq")
