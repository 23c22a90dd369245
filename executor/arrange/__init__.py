"""Arrangements: what a trace means (keys, since, upper, reader holds), how it is
stored (Spark batches in a spine, the driver's sorted mirror, value codes) and read.
"""
