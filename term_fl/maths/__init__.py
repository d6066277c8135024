"""Layer 1, the maths: TERM's tilted objects, fairness statistics, loss risks, defences.

Pure numpy functions that read like their papers; no Flower, no torch, no I/O.
"""
