"""Binary joins of arrangements: dA x (B_old + dB) + A_old x dB. The driver placement's
join is in executor/host.py `_join`; the Spark placement's is spark.py.
"""
