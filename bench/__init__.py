"""Benchmark harness for the catalog server: ``python -m bench`` (see bench/README.md)."""
