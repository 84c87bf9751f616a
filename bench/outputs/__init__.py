"""Whether a change leaves what users see alone: this tree's outputs against a git ref's (``same_output``), and
PyTorch's own logging tests with the bridge on and off (``torch_logging_suite``)."""
