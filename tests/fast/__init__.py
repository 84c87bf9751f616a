"""The fast tier: the assembler, the parser, the pipeline and the features driven by synthetic events; no torch (docs/testing.md)."""
