"""term_fl.plugin.sklearn_loss: an estimator's loss on the training data, against scikit-learn's metrics and by hand."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn", reason="scikit-learn: run scripts/plugin_apps.sh")

from sklearn.linear_model import LinearRegression, LogisticRegression, SGDClassifier  # noqa: E402
from sklearn.metrics import hinge_loss, log_loss, mean_squared_error  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from term_fl.plugin import PreTrainingLoss  # noqa: E402
from term_fl.plugin.sklearn_loss import pre_training_loss  # noqa: E402


def classification(n: int = 40, classes: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = rng.integers(0, classes, size=n)
    X[np.arange(n), y] += 2.0
    return X, y


def fitted_logreg(classes: int = 3) -> LogisticRegression:
    X, y = classification(classes=classes, seed=1)
    return LogisticRegression(max_iter=200).fit(X, y)


def test_a_classifier_s_loss_is_its_log_loss_by_hand_and_by_sklearn():
    model = fitted_logreg()
    X, y = classification(seed=2)
    proba = model.predict_proba(X)
    by_hand = -np.mean(np.log(proba[np.arange(len(y)), y]))
    value = pre_training_loss(model, X, y)
    assert value == pytest.approx(by_hand, rel=1e-12)
    assert value == pytest.approx(log_loss(y, proba), rel=1e-12)


def test_labels_a_client_lacks_are_still_the_estimators_classes():
    model = fitted_logreg(classes=3)
    X, y = classification(seed=3)
    X, y = X[y < 2], y[y < 2]  # this client has no sample of class 2
    proba = model.predict_proba(X)
    assert pre_training_loss(model, X, y) == pytest.approx(-np.mean(np.log(proba[np.arange(len(y)), y])), rel=1e-12)


def test_the_flower_template_s_received_model_gives_log_of_the_class_count():
    """Flower's scikit-learn template: zero coef_ and intercept_ set by hand, never fitted: uniform probabilities."""
    model = LogisticRegression(max_iter=1, warm_start=True)
    model.classes_ = np.arange(10)
    model.coef_, model.intercept_ = np.zeros((10, 784)), np.zeros(10)
    X = np.random.default_rng(0).integers(0, 256, size=(30, 784)).astype(np.uint8)
    y = np.arange(30) % 10
    assert pre_training_loss(model, X, y) == pytest.approx(np.log(10), rel=1e-12)


def test_a_regressor_s_loss_is_its_squared_error_multi_output_included():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(25, 3))
    for y in (X @ [1.0, -2.0, 0.5] + rng.normal(size=25),
              np.stack([X[:, 0] + rng.normal(size=25), X[:, 1] * 3], axis=1)):
        model = LinearRegression().fit(X[:10], y[:10])
        assert pre_training_loss(model, X, y) == pytest.approx(mean_squared_error(y, model.predict(X)), rel=1e-12)


def test_a_pipeline_is_an_estimator_like_any_other():
    X, y = classification(seed=5)
    pipeline = make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y)
    assert pre_training_loss(pipeline, X, y) == pytest.approx(log_loss(y, pipeline.predict_proba(X)), rel=1e-12)


def test_a_given_loss_reads_the_response_it_names():
    X, y = classification(classes=2, seed=6)
    model = SGDClassifier(loss="hinge", random_state=0).fit(X, y)
    value = pre_training_loss(model, X, y, loss=hinge_loss, response="decision_function")
    margins = (2 * y - 1) * model.decision_function(X)
    assert value == pytest.approx(np.mean(np.maximum(0.0, 1.0 - margins)), rel=1e-12)
    per_sample = pre_training_loss(model, X, y, loss=lambda t, p: (t != p).astype(float), with_sum=True)
    assert per_sample.total == float(np.sum(model.predict(X) != y))


def test_with_sum_gives_mean_total_and_samples():
    model = fitted_logreg()
    X, y = classification(seed=7)
    result = pre_training_loss(model, X, y, with_sum=True)
    assert isinstance(result, PreTrainingLoss) and result.num_examples == len(y)
    assert result.total == pytest.approx(log_loss(y, model.predict_proba(X), normalize=False), rel=1e-12)
    assert result.mean == pytest.approx(result.total / len(y), rel=1e-15)


def test_the_estimator_is_neither_fitted_nor_changed():
    model = fitted_logreg()
    before = copy.deepcopy(model)
    X, y = classification(seed=8)
    pre_training_loss(model, X, y)
    np.testing.assert_array_equal(model.coef_, before.coef_)
    np.testing.assert_array_equal(model.intercept_, before.intercept_)
    assert model.n_iter_ == before.n_iter_


def test_an_estimator_without_a_default_loss_asks_for_one():
    X, y = classification(classes=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SGDClassifier(loss="hinge", max_iter=5, random_state=0).fit(X, y)
    with pytest.raises(TypeError, match=r"SGDClassifier is neither.*pass its loss, e\.g\. loss=sklearn\.metrics\.hinge_loss"):
        pre_training_loss(model, X, y)


def test_no_sample_and_an_unknown_response_are_clear_errors():
    model = fitted_logreg()
    X, y = classification()
    with pytest.raises(ValueError, match="no sample"):
        pre_training_loss(model, X[:0], y[:0])
    with pytest.raises(ValueError, match="response must be 'predict', 'predict_proba' or 'decision_function'"):
        pre_training_loss(model, X, y, loss=log_loss, response="score")
