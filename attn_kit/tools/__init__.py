"""A user's tools that a recipe never imports: the side-by-side comparison with stock fairseq
(compare, scripts/compare_baselines.py) and the plugin/stock model pairs it builds (pairs, which the
lab's benchmarks build too). The project's own measuring and describing code is the package ``lab``."""
