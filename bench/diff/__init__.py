"""``torch-otel diff`` measured: its own cost, and how compile time varies between identical runs (docs/diff.md)."""
