"""Layer 3, term-fl's own ClientApp: a message's data, model and training, and the partition query.

Users' own ClientApps need none of this: the helpers they add are in :mod:`term_fl.plugin`.
"""
