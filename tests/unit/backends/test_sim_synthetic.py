"""The sim's SYNTHETIC detections: off by default, seeded by the frame, valid boxes."""

from __future__ import annotations

import numpy as np

from npudure.backends.sim import SimBackend, synthetic_detections
from npudure.config import SimConfig
from npudure.vision.frames import synthetic_frame


def test_off_by_default() -> None:
    backend = SimBackend(1, SimConfig(time_scale=0.01))
    assert backend.contexts[0].run(synthetic_frame(1)).detections.shape == (0, 6)


def test_same_frame_same_boxes_other_frame_other_boxes() -> None:
    a, b = synthetic_frame(1), synthetic_frame(2)
    first = synthetic_detections(a, 10)
    assert np.array_equal(first, synthetic_detections(a.copy(), 10))
    assert not np.array_equal(first, synthetic_detections(b, 10))
    backend = SimBackend(2, SimConfig(time_scale=0.01, synthetic_detections=10, seed=5))
    assert np.array_equal(backend.contexts[1].run(a).detections, first)  # not the board's seed: the frame's


def test_boxes_are_valid_rows() -> None:
    for seed in range(20):
        dets = synthetic_detections(synthetic_frame(seed), 8)
        assert 1 <= len(dets) <= 8 and dets.dtype == np.float32
        x1, y1, x2, y2, score, cls = dets.T
        assert np.all((x1 >= 0) & (x1 < x2) & (x2 <= 640) & (y1 >= 0) & (y1 < y2) & (y2 <= 640))
        assert np.all((score >= 0.25) & (score < 0.95)) and np.all((cls >= 0) & (cls < 80))
        assert np.array_equal(cls, np.round(cls))


def test_a_users_model_keeps_its_size_and_names() -> None:
    """A sim board serving a user's export (its size and names from the config): frames of its side,
    detections inside it and of its classes only."""
    config = SimConfig(time_scale=0.01, synthetic_detections=8)
    backend = SimBackend(1, config, input_size=320, class_names=["cat", "dog", "plate"])
    assert (backend.input_size, backend.class_names) == (320, ("cat", "dog", "plate"))
    for seed in range(10):
        _, _, x2, y2, _, cls = backend.contexts[0].run(synthetic_frame(seed, 320)).detections.T
        assert np.all((x2 <= 320) & (y2 <= 320)) and np.all(cls < 3)
    plain = SimBackend(1, config)
    assert plain.input_size == 640 and len(plain.class_names) == 80
