"""term-fl: tilted empirical risk minimization (TERM) for federated learning on Flower.

Li, Beirami, Sanjabi, Smith, "On Tilted Losses in Machine Learning:
Theory and Applications", JMLR 2023.
"""

__version__ = "0.3.0"

from term_fl import _moved

_moved.install()
