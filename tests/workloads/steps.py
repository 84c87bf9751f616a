"""A training job the test drives step by step through stdin, to put faults between its compiles.

Commands, one per line; each is answered with one line on stdout:

- ``compile N``: compile N new functions (``step_<k>``, each its own frame), answer ``compiled step_<a>..step_<b>``;
- ``exit``: answer ``bye`` and leave (the bridge flushes at exit).

Run with ``WITH_BRIDGE=1``.
"""

import os
import sys

if os.environ.get("WITH_BRIDGE") == "1":
    import torch_otel.auto  # noqa: F401

import torch

made = 0


def compile_new(n):
    global made
    first = made
    for _ in range(n):
        scope = {}
        exec(f"def step_{made}(x):\n    return x * {made} + 1\n", scope)  # a fresh code object: a new frame compile
        torch.compile(scope[f"step_{made}"], backend="eager")(torch.ones(2))
        made += 1
    return f"compiled step_{first}..step_{made - 1}"


print("ready", flush=True)
for line in sys.stdin:
    cmd, *arg = line.split()
    if cmd == "compile":
        print(compile_new(int(arg[0])), flush=True)
    elif cmd == "exit":
        print("bye", flush=True)
        break
