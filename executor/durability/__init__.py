"""Durable state: each step committed to a directory (frames, manifest, history),
and resumed from it after a crash.
"""
