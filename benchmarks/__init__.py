"""cleanflush's benchmark suite: ``python -m benchmarks <study>`` (see __main__.py and
results/h200/README.md).  The loose scripts beside it (policy_gap.py, placement.py,
host_cost.py) are the diagnostics behind benchmarks/notes.md."""
