"""Layer 1, learning: the torch models and local training, one device at a time or a cohort at once.

No Flower and no I/O: a client side (``term_fl.clientapp``) or an engine calls these functions.
"""
