"""What the bridge costs: a compile, a process's start-up, a training step, memory, the rank sampler, counting graph
calls, divergence detection (docs/benchmarks.md)."""
