"""Layer 0, shared names: message keys, seeded generators, JSON values, input checks, extras, errors.

Every other layer may import these modules; they import nothing of term-fl's.
"""
