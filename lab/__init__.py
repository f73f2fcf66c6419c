"""lab: the project's own measuring and describing code, beside the kit (attn_kit) that a user's run needs.

It measures the plugin and the recipes and describes the project from what was measured: the benchmarks and the
prepared GPU check (bench), the sweep that chose the bundled run's settings (sweep), the tables of README.md and
docs/ made from the results files (readme_tables), the fault catalogue (faults), code statistics (code_stats), and
several fairseq-train runs for one import (fairseq_forks: the GPU check's trainings, the tests' commands).

Its rule: the lab imports the kit and the plugin; nothing in attn_kit or attn_plugin imports the lab
(tests/test_imports.py). Its entry points are scripts/*.py, benchmarks/*.py and ``python -m lab.MODULE``.
"""
