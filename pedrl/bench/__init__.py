"""Benchmarks: `python -m pedrl.bench.NAME`; each prints ratios against a peer run in the same process."""
