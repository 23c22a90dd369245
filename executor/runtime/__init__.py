"""The runtime around the engine: the Spark session, configuration, limits and the
errors users see.
"""
