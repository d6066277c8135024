"""sklearnapp: A Flower / sklearn app."""

import numpy as np
from sklearn.linear_model import LogisticRegression


def local_mnist(partition_id: int, size: int = 150):  # term-fl test: MNIST's shape, made here, in place of the download
    rng = np.random.default_rng(partition_id)  # term-fl test
    digits = np.random.default_rng(2024).integers(0, 256, size=(10, 28, 28))  # term-fl test: one pattern per digit
    skew = rng.choice(10, size=size - 20, p=rng.dirichlet(np.ones(10)))  # term-fl test: each partition its own mix
    label = rng.permutation(np.concatenate([np.arange(20) % 10, skew]))  # term-fl test: every digit at least twice
    noise = rng.integers(0, 128, size=(size, 28, 28))  # term-fl test
    image = np.clip(0.6 * digits[label] + noise, 0, 255).astype(np.uint8)  # term-fl test
    return {"image": image, "label": label.astype(np.int64)}  # term-fl test


def load_data(partition_id: int, num_partitions: int):
    """Load partition MNIST data."""
    dataset = local_mnist(partition_id)  # term-fl test: in place of Flower Datasets' MNIST partition

    X, y = dataset["image"].reshape((len(dataset["label"]), -1)), dataset["label"]  # term-fl test: len of a dict

    # Split the on edge data: 80% train, 20% test
    X_train, X_test = X[: int(0.8 * len(X))], X[int(0.8 * len(X)) :]
    y_train, y_test = y[: int(0.8 * len(y))], y[int(0.8 * len(y)) :]

    return X_train, X_test, y_train, y_test


def get_model(penalty: str, local_epochs: int):

    return LogisticRegression(
        penalty=penalty,
        max_iter=local_epochs,
        warm_start=True,
    )


def get_model_params(model):
    if model.fit_intercept:
        params = [
            model.coef_,
            model.intercept_,
        ]
    else:
        params = [model.coef_]
    return params


def set_model_params(model, params):
    model.coef_ = params[0]
    if model.fit_intercept:
        model.intercept_ = params[1]
    return model


def set_initial_params(model):
    n_classes = 10  # MNIST has 10 classes
    n_features = 784  # Number of features in dataset
    model.classes_ = np.array([i for i in range(10)])

    model.coef_ = np.zeros((n_classes, n_features))
    if model.fit_intercept:
        model.intercept_ = np.zeros((n_classes,))
