"""cleanflush's benchmark suite: ``python -m benchmarks <study>`` (see __main__.py and
results/h200/README.md).  hostbound.py, beside it, is the duty-cycle diagnostic behind
docs/limits.md; harness_timing.py times each harness's own timer (docs/harnesses.md)."""
