"""The reduce family (count, sum, min, max, distinct, threshold, top_k, user reduce):
running totals, re-evaluated keys, ranked indexes, and reductions inside iterate scopes.
"""
