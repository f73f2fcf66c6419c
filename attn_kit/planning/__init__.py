"""Planning before anything runs: the paper's numbers (paper), named model sizes (sizes), analytic
FLOPs and GPUs (cost), the step-time model fitted to GPU runs (step_model), what a training run
costs (training_cost), tokens per update under fairseq's batching, and the data stages' projected
time and memory (prep_cost)."""
