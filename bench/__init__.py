"""The relay's benchmark: `python -m bench` from the project root (see docs/benchmarks.md)."""
