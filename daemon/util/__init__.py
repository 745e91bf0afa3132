"""Leaf helpers: the clock and ids, credential scrubbing, per-key locks, heap trimming.

Nothing here imports from the rest of ponder, so every layer may use them.
"""
