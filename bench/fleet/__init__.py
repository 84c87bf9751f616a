"""A job of thousands of ranks, simulated, against real metrics pipelines (Prometheus, VictoriaMetrics) and the
shipped traces pipeline (docs/benchmarks.md, docs/distributed.md). ``metrics`` and ``traces`` are the commands; the
other modules are their parts."""
