"""The conversion check judges what changes a model's answers (issue #44): detections per class with a
95% interval over frames, and the outputs that set boxes or class scores; the zoo's score sum is
reported, never judged. A failure names the likely cause and the next step. Fast: ONNX Runtime
outputs stand in for the simulator's, with the damage done by hand (no toolkit)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npudure_workshop.model import photos, simcheck
from npudure_workshop.model.convert import CHECK_FRAMES, ConvertError, check_frames_for

SCORE_SUM_OUTPUTS = (2, 5, 8)  # the zoo layout's third output per stride
CLS_S16 = 4


@pytest.fixture(scope="module")
def onnx_ref(model_cache):
    from npudure_workshop.model.build import ensure_model

    frames = check_frames_for(None, 6).frames
    return simcheck.onnx_outputs(ensure_model(layout="zoo").path, frames)


def _noisy(ref, sigma: float = 0.002):
    rng = np.random.default_rng(1)
    return [[o + rng.normal(0, sigma, o.shape).astype(np.float32) for o in f] for f in ref]


def test_a_spoiled_score_sum_is_reported_but_does_not_fail(onnx_ref) -> None:
    got = _noisy(onnx_ref)
    rng = np.random.default_rng(2)
    for f in got:
        for j in SCORE_SUM_OUTPUTS:
            f[j] = rng.uniform(0, 1, f[j].shape).astype(np.float32)  # nothing left of the sum
    result = simcheck.compare(onnx_ref, got)
    sums = [o for o in result.outputs if o.role == simcheck.SCORE_SUM]
    assert [o.index for o in sums] == list(SCORE_SUM_OUTPUTS) and all(o.cosine < 0.9 for o in sums)
    assert result.passed and result.match_rate > 0.9
    assert sum("not judged: npudure takes scores" in line for line in result.lines()) == 3


def test_a_spoiled_class_score_output_fails_and_names_the_layer(onnx_ref) -> None:
    got = _noisy(onnx_ref)
    rng = np.random.default_rng(3)
    for f in got:
        f[CLS_S16] = np.clip(f[CLS_S16] + rng.normal(0, 0.05, f[CLS_S16].shape), 0, 1).astype(np.float32)
    names = [f"out{j}" for j in range(9)]
    result = simcheck.compare(onnx_ref, got, output_names=names)
    spoiled = result.outputs[CLS_S16]
    assert (spoiled.role, spoiled.stride) == (simcheck.SCORES, 16) and spoiled.failed
    assert not result.passed
    assert any("INT8 spoils output 4 out4 (class scores, stride 16)" in r for r in result.reasons())
    advice = result.advice()
    assert "layers feeding out4" in advice[0] and "hybrid" in advice[0]
    assert any("--images DIR" in a for a in advice)  # not the user's scenes: say so
    assert any(line.startswith("next    ") for line in result.lines())


def _result(frames: list[dict[int, tuple[int, int, int]]]) -> simcheck.CheckResult:
    result = simcheck.CheckResult(frames=len(frames), score_threshold=0.25, names=("Normal", "Fall"))
    result.outputs = [simcheck.OutputError(0, (1, 64, 40, 40), 0.99, 0.1, 1.0, simcheck.BOXES, 16)]
    for frame in frames:
        result.per_frame.append(frame)
        for cid, counts in frame.items():
            total = result.per_class.setdefault(cid, [0, 0, 0])
            for k in range(3):
                total[k] += counts[k]
    result.onnx_detections = sum(v[0] for v in result.per_class.values())
    result.rknn_detections = sum(v[1] for v in result.per_class.values())
    result.matched = sum(v[2] for v in result.per_class.values())
    return result


def test_one_class_that_disagrees_fails_the_check_even_when_the_total_passes() -> None:
    # 'Normal' is common and agrees; 'Fall' is rarer and the NPU loses most of it.
    frames = [{0: (8, 8, 8), 1: (1, 1, 0)} for _ in range(30)]
    result = _result(frames)
    assert result.match_rate > simcheck.MIN_MATCH_RATE
    assert result.failing_classes() == [1] and not result.passed
    assert "class 1 'Fall' disagrees (0.0%, interval up to 0.0% < 50%)" in result.reasons()
    # Under the bar by chance only (the interval reaches it): reported, not failed.
    close = _result([{0: (8, 8, 8), 1: (1, 1, i % 2)} for i in range(30)] + [{1: (1, 1, 0)}] * 2)
    assert close.class_rate(1) < simcheck.MIN_MATCH_RATE <= close.interval(1)[1]
    assert close.failing_classes() == []
    # A class seen fewer than MIN_CLASS_DETECTIONS times is reported, not judged.
    few = _result([{0: (8, 8, 8), 1: (1, 1, 0)} for _ in range(5)])
    assert few.failing_classes() == [] and few.passed
    assert any("fewer than 10, not judged" in line for line in few.lines())
    assert any("only 5 frames (fewer than 50)" in line for line in few.lines())


def test_the_interval_comes_from_frames_and_narrows_with_more_of_them() -> None:
    rng = np.random.default_rng(4)

    def frames(n: int) -> list[dict[int, tuple[int, int, int]]]:
        out = []
        for _ in range(n):
            a = int(rng.integers(2, 10))
            out.append({0: (a, a, int(rng.integers(0, a + 1)))})
        return out

    small, large = _result(frames(10)), _result(frames(200))
    for r in (small, large):
        lo, hi = r.interval()
        assert lo <= r.match_rate <= hi
        assert r.interval() == (lo, hi)  # seeded: the same report every run
    assert large.interval()[1] - large.interval()[0] < small.interval()[1] - small.interval()[0]
    same = _result([{0: (4, 4, 3)}] * 20)  # no frame-to-frame variation: no width
    assert same.interval() == pytest.approx((0.75, 0.75))


@pytest.mark.skipif(photos.version() is None, reason="scikit-image (npudure[onnx]) is not installed")
def test_without_images_the_check_takes_50_distinct_generic_frames_and_says_so() -> None:
    check = check_frames_for(None, None, 320)
    assert len(check.frames) == CHECK_FRAMES >= simcheck.ENOUGH_FRAMES
    assert len({f.tobytes() for f in check.frames}) == CHECK_FRAMES
    assert not check.users_scenes and "generic photographs" in check.source and "--images DIR" in check.source
    assert np.array_equal(check.frames, check_frames_for(None, None, 320).frames)  # seeded


def test_with_images_the_check_takes_all_of_them(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    for i in range(7):
        Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(tmp_path / f"cam-{i:03d}.png")
    check = check_frames_for(tmp_path, None, 320)
    assert check.users_scenes and len(check.frames) == 7 and check.frames.shape[1:] == (320, 320, 3)
    assert check.source == f"7 of your images (--images {tmp_path})"
    spread = check_frames_for(tmp_path, 3, 320)
    assert "spread over 7" in spread.source and spread.key != check.key
    np.testing.assert_array_equal(spread.frames[[0, -1]], check.frames[[0, -1]])  # first and last
    with pytest.raises(ConvertError, match="no such folder"):
        check_frames_for(tmp_path / "nope", None)
