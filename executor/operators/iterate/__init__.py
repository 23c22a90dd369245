"""Iteration to a fixed point over product times: the rounds on the driver placement
(driver.py) and on Spark (spark.py), one rule.
"""
