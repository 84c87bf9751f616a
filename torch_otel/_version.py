__version__ = "0.2.0"

# The torch releases this version was tested with, oldest first: the release matrix (noxfile.py) runs each.
TESTED_TORCH = ("2.10", "2.11", "2.12", "2.13", "2.14", "2.15")
# The same range as pyproject's `instruments` extra (tests/test_package.py checks). A newer torch is captured on a
# best-effort basis, with one line saying so (torch_otel._capture.sources.release_line).
SUPPORTED_TORCH = "torch >= 2.10, < 2.16"


def torch_version() -> str:
    """The running torch's own ``torch.__version__`` (``2.15.0+cu132``: the build tag included, as torch logs it in
    ``TORCH_TRACE``), or the installed distribution's version when torch is not imported; ``"unknown"`` without torch.
    """
    import sys

    torch = sys.modules.get("torch")
    found = getattr(torch, "__version__", None)
    if found:
        return str(found)
    try:  # torch/version.py states the build ("+cu128") the distribution's metadata leaves out: read, not imported
        import importlib.util
        import os
        import re

        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.origin:
            with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as f:
                m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
            if m:
                return m.group(1)
    except Exception:  # noqa: BLE001 - the metadata below
        pass
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:  # noqa: BLE001 - replay needs no torch
        return "unknown"
