"""The recipe pipeline: stages and their runner, downloads and the local mirror,
text processing around the Moses and subword-nmt tools, and how fairseq-train is launched."""
