"""Benchmarks: measures grouped in suites over one harness (``benchmarks/harness.py``).

Run from the repository root: ``python -m benchmarks SUITE`` for a suite's quick run,
``python -m benchmarks.NAME --help`` for one benchmark and its options. Every one prints
one JSON line per measure. Results and the commands behind them are in BENCHMARKS.md.
"""
