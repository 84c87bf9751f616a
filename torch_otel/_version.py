__version__ = "0.1.0"

# The torch releases this version supports: pyproject's `instruments` extra says the same (tests/test_package.py checks).
SUPPORTED_TORCH = "torch >= 2.13, < 2.14"
