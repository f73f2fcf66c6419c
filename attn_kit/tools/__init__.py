"""Development and benchmarking tools that a recipe never imports: the benchmarks (bench), the
side-by-side comparison with stock fairseq (compare, pairs), README's generated tables
(readme_tables), code statistics, the fault catalogue (faults), several fairseq-train runs for one
import (fairseq_forks)."""
