"""Binary joins of arrangements: dA x (B_old + dB) + A_old x dB, on the driver placement
(driver.py) and on Spark (spark.py).
"""
