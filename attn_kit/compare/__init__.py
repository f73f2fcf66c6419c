"""Train attn_plugin's Transformer and its stock fairseq counterpart the same way, and compare them.

    python scripts/compare_baselines.py --bundled --train-minutes 5
    python scripts/compare_baselines.py data-bin/wmt14_en_de --arch big --ngpus 8 --max-update 20000
    python scripts/compare_baselines.py --bundled --max-update 300 --seeds 1 2 3   # seed-to-seed noise

The pairs (attn_kit.pairs): --arch base trains attn_paper_base and fairseq's
transformer_wmt_en_de; --arch big trains attn_paper_big and
transformer_vaswani_wmt_en_de_big. Both get the same data, batch (--max-tokens,
--update-freq, GPUs), Adam (0.9, 0.98, 1e-9), learning-rate values, label
smoothing 0.1, seed, model sizes and update budget; each side uses its own
criterion and schedule flags:

  plugin: --user-dir attn_plugin --criterion attn_label_smoothed_cross_entropy
          --lr-scheduler attn_inverse_sqrt --warmup-updates W --lr-scale S
  stock:  --criterion label_smoothed_cross_entropy --share-all-embeddings
          --lr-scheduler inverse_sqrt --warmup-updates W
          --lr P --warmup-init-lr P/W   with P = S * d_model^-0.5 * W^-0.5, the peak of eq. 3

fairseq's inverse_sqrt warms up linearly from --warmup-init-lr to --lr over W
updates, then decays as lr * sqrt(W / updates done). With these values its
first update uses eq. 3's lrate(1) = P/W, and every later update a rate within
1/W of eq. 3's (0.25% at W = 400); with --warmup-init-lr 0 it would run one
update behind eq. 3 (its first update at rate 0, 5% behind at update 20).

The two trainings run one after the other, never together, so their speeds
compare; with several seeds the order alternates. Budget: --max-update N
(each model N updates) or --train-minutes M (the two trainings share M minutes of
training time: M/2 each, per seed; validation counts, evaluation comes on top).
Validation runs every --validate-every updates at the same updates for both,
so curves compare at equal updates whatever the budget.

Evaluation, the same for both: the unsmoothed valid nll_loss (base 2) and
perplexity 2^nll_loss that fairseq logs (the smoothed losses differ between
the two criteria), the last logged train nll_loss, and BLEU of beam-4 search
(GNMT length penalty 0.6, Sec. 6.1) with the last checkpoint on --gen-subset,
scored by sacreBLEU on the tokenized, BPE-removed output (tokenize=none).

Precision (attn_kit.fairseq_commands.used_precision): --precision auto (the
default) trains in bf16 on GPUs that support it, fp16 on older GPUs, fp32 on
CPU; bf16 is bf16 autocast with fp32 master weights and no loss scaling, through
attn_plugin's task (--task attn_translation --bf16-autocast) for both models,
since stock fairseq 0.12 has no bf16 path on GPUs (its --bf16 means TPU); fp16
is fairseq's fp16 mixed precision. The report names the precision used.

Writes WORKDIR/comparison.md (the table printed at the end), comparison.json
(settings, commands, every run's numbers and validation curves) and
comparison.png (the unsmoothed valid loss against updates and against training
time; needs matplotlib). --bundled prepares the repo's bundled EN-DE data with the
bundled recipe (recipes/wmt14_en_de.sh, stages download..binarize, about 80 s once;
it reuses a finished --bundled-workdir).

Modules: cli (the command line and the run), commands (both fairseq command
lines), worker (fairseq-train in-process with timing and memory:
``python -m attn_kit.compare.worker``), run (data, the runs, BLEU), stats
(means, the noise verdict), report (markdown, JSON, plot).
"""
