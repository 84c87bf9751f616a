"""What a workload writes of torch's own record, for a test to compare the bridge with: ``OUT/torch.json``.

``write(out, fields)``, at the end of a workload run with the bridge on: the bridge flushed, then each of torch's
``CompilationMetrics`` (``torch._dynamo.utils.get_compilation_metrics()``) with ``id`` (its compile id) and the named
fields (``forward``: its ``is_forward``), under ``records``, beside any ``extra`` parts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_RENAMED = {"id": "compile_id", "forward": "is_forward"}


def write(out: Path, fields: tuple[str, ...], **extra: Any) -> None:
    from torch._dynamo.utils import get_compilation_metrics

    import torch_otel

    torch_otel.force_flush()
    records = [{f: getattr(m, _RENAMED.get(f, f)) for f in ("id", *fields)} for m in get_compilation_metrics()]
    (out / "torch.json").write_text(json.dumps({"records": records, **extra}))
