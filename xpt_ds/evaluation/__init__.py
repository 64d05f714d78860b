"""Scoring a trained model: ``intrinsic`` (002 Table 2's metrics on held-out shards, the unigram baseline) and
``probe`` (where the source language goes, 000 §4.4).
"""
