"""Linear operators (map, filter, flat_map, join_function, temporal filters): fused
chains of stages, as Spark SQL expressions, Arrow-compiled expressions or array kernels.
"""
