"""cleanflush's benchmark suite: ``python -m benchmarks <study>`` (see __main__.py and
results/h200/README.md).  hostbound.py, beside it, is the duty-cycle diagnostic behind
README's Limits; the session-1 diagnostics were removed (results/h200/README.md says which
commit produced each of their result files)."""
