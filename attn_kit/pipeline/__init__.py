"""The recipe pipeline: stages and their runner, downloads and the local mirror,
text processing around the Moses and subword-nmt tools. It knows nothing of fairseq
(the kit's fairseq layer: attn_kit.fairseq_layer.fairseq_commands, attn_kit.fairseq_layer.fairseq_log)."""
