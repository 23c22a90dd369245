"""Example plan files: each defines `build(flow)` for `python -m executor run|explain`."""
