"""A script that sets up its own logging after importing torch, as many applications do, in one of two ways (``MODE``):

- ``dict_config``: ``logging.config.dictConfig``, whose default ``disable_existing_loggers=True`` disables every logger
  that exists when it runs: torch's (its graph-break loggers, made by ``import torch._dynamo``; ``torch.__trace``) and
  the bridge's own;
- ``disable``: ``logging.disable(logging.WARNING)``, which holds every logger at WARNING and below (debug records,
  torch's graph breaks among them, are never made).

Then a function with a graph break is compiled, forward and backward. ``python user_logging.py MODE OUT``: torch's own
count of graph breaks goes to ``OUT`` (JSON).
"""

import json
import logging.config
import sys
from pathlib import Path

import torch
import torch._dynamo  # as libraries do at their import: torch's graph-break loggers now exist

import torch_otel.auto  # noqa: F401  (the bridge, as torch-otel run turns it on)

if sys.argv[1] == "dict_config":
    logging.config.dictConfig(
        {
            "version": 1,
            "handlers": {"stderr": {"class": "logging.StreamHandler"}},
            "root": {"handlers": ["stderr"], "level": "WARNING"},
        }
    )
else:
    logging.disable(logging.WARNING)


def f(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()


torch.compile(f, backend="aot_eager")(torch.randn(4, requires_grad=True)).sum().backward()

from torch._dynamo.utils import counters  # noqa: E402

import torch_otel  # noqa: E402

torch_otel.force_flush()
Path(sys.argv[2]).write_text(json.dumps({"graph_breaks": sum(counters["graph_break"].values())}))
