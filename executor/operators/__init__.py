"""The operator families, one folder each: its contract, its driver placement on array
kernels and its Spark placement side by side.
"""
