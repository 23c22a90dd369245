"""Iteration to a fixed point over product times. The driver placement's rounds are in
executor/host.py `_iterate`; the Spark placement's are spark.py.
"""
