"""numpyapp: A Flower / NumPy app."""

import numpy as np


def get_dummy_model():
    return [np.ones((1, 1))]


def load_data(partition_id: int):  # term-fl test: local data, so that the model has a loss (the template has none)
    rng = np.random.default_rng(partition_id)  # term-fl test
    x = rng.normal(size=(20, 1))  # term-fl test
    return x, (partition_id + 1.0) * x[:, 0] + 0.1 * rng.normal(size=20)  # term-fl test: y = (p + 1) x + noise


def loss_fn(params, x, y):  # term-fl test: the squared error of each sample under the 1x1 linear model
    return np.square(x @ params[0] - y[:, None])[:, 0]  # term-fl test
