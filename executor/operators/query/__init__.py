"""Conjunctive queries as worst-case optimal delta rules: the rules on array kernels,
value codes for constants, and the Spark placement's lookups.
"""
