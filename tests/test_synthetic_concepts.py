"""Synthetic data with two shared concepts and equal device sizes: the embedded default's candidates.

Each property is checked against an independent computation from the
generator's documented draws (docs/data.md, term_fl/data/synthetic.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from term_fl.common.seeding import CONCEPT_TAG, MINORITY_TAG, dataset_rng
from term_fl.data.synthetic import NUM_CLASSES, NUM_FEATURES, SyntheticGenerator


def generator(**kwargs):
    base = dict(seed=3, num_devices=12, alpha=1.0, beta=1.0, max_samples=1000)
    return SyntheticGenerator(**{**base, **kwargs})


def test_alpha_does_not_change_the_labels_as_fedprox_defines_it():
    """u_k adds the same number to every class's logit: the argmax ignores it."""
    for k in range(12):
        for got, want in zip(generator(alpha=0.0).device(k), generator(alpha=9.0).device(k), strict=True):
            np.testing.assert_array_equal(got, want)


def test_without_the_new_options_the_devices_are_the_fedprox_generators():
    """minority = 0 and no samples_per_device draw exactly what the plain generator draws."""
    plain, explicit = generator(), generator(minority=0, concept_noise=0.0, samples_per_device=None)
    np.testing.assert_array_equal(plain.sizes, explicit.sizes)
    for k in (0, 7):
        for a, b in zip(plain.device(k), explicit.device(k), strict=True):
            np.testing.assert_array_equal(a, b)


def test_equal_sizes_give_every_device_the_same_number_of_samples_uncapped():
    g = generator(samples_per_device=150, max_samples=100)
    assert g.sizes.tolist() == [150] * 12
    assert len(g.device(4)[0]) == 150


def test_the_minority_devices_are_drawn_from_their_own_stream():
    g = generator(minority=3)
    expected = np.sort(dataset_rng(3, MINORITY_TAG).choice(12, size=3, replace=False))
    np.testing.assert_array_equal(g.minority_devices, expected)
    assert generator().minority_devices.size == 0


def test_without_concept_noise_each_device_is_labelled_by_its_concept():
    """Majority devices by (W_A, b_A), minority ones by (W_B, b_B), both N(0, 1) from the concept stream."""
    g = generator(minority=4, samples_per_device=60)
    rng = dataset_rng(3, CONCEPT_TAG)
    concepts = [(rng.standard_normal((NUM_CLASSES, NUM_FEATURES)), rng.standard_normal(NUM_CLASSES)) for _ in range(2)]
    minority = set(g.minority_devices.tolist())
    for k in range(12):
        x, y = g.device(k)
        w, b = concepts[k in minority]
        np.testing.assert_array_equal(y, np.argmax(x.astype(np.float64) @ w.T + b, axis=1))


def test_concept_noise_moves_devices_away_from_their_concept():
    """With noise the labels of a device depart from its concept's, more as the noise grows."""
    def disagreement(noise):
        g = generator(minority=4, concept_noise=noise, samples_per_device=200)
        rng = dataset_rng(3, CONCEPT_TAG)
        w, b = rng.standard_normal((NUM_CLASSES, NUM_FEATURES)), rng.standard_normal(NUM_CLASSES)
        majority = [k for k in range(12) if k not in set(g.minority_devices.tolist())]
        return np.mean([np.mean(g.device(k)[1] != np.argmax(g.device(k)[0].astype(np.float64) @ w.T + b, axis=1))
                        for k in majority])

    assert disagreement(0.0) == 0.0
    assert 0.0 < disagreement(0.5) < disagreement(3.0)


def test_the_features_do_not_depend_on_the_concepts():
    """Two concepts change the labels only: the same draws give the same features."""
    plain, concepts = generator(samples_per_device=80), generator(samples_per_device=80, minority=2)
    for k in range(12):
        np.testing.assert_array_equal(plain.device(k)[0], concepts.device(k)[0])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(minority=12), r"minority must be 0 \(one concept per device\) or 1..11"),
        (dict(minority=-1), r"minority must be 0"),
        (dict(minority=True), r"minority must be 0"),
        (dict(concept_noise=float("inf")), r"concept_noise must be a finite number >= 0"),
        (dict(concept_noise=-0.1), r"concept_noise must be a finite number >= 0"),
        (dict(samples_per_device=2), r"samples_per_device must be None or an integer >= 3, got 2"),
    ],
)
def test_bad_two_concept_settings_are_refused_naming_the_setting(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generator(**kwargs)


def test_the_metadata_says_which_devices_follow_the_minority_concept():
    meta = generator(minority=2, concept_noise=0.5, samples_per_device=90).metadata()
    assert meta["sizes"] == "90 samples per device"
    assert meta["concepts"] == {"minority_devices": generator(minority=2).minority_devices.tolist(),
                                "concept_noise": 0.5}
    assert "concepts" not in generator().metadata()
