"""The fairseq layer: the plugin imported from the kit's commands, models built as fairseq-train
builds them, every fairseq command line the kit runs (fairseq_commands), fairseq's logs, binarized
data and checkpoints read back, checkpoint averaging, training curves, CPU data parallel."""
