"""Applications built on the library, outside its core: the command line (cli.py, with
`python -m executor` and the `diffspark` script), the events demo, the `triangles` verb and
the flagship stream, and `gpu-check`. They use the public API (plans.Dataflow,
executor.Runner) and the library's input readers and config; the core never imports them.
"""
