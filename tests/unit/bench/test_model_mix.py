"""`npudure bench --model/--mix`: the frames name their model in the asked ratio, and a bad mix is one
clear line."""

from __future__ import annotations

from collections import Counter

import pytest

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.payloads import FrameSourceError, make_frame_set, parse_mix, with_models


def test_a_mix_names_the_models_in_its_ratio_over_every_frame() -> None:
    frames = make_frame_set("jpeg", 6, seed=2)
    mixed = with_models(frames, parse_mix("general=3,plates=1"))
    requests = [pb.InferRequest.FromString(r) for r in mixed.requests]
    assert len(requests) == 12  # lcm(6 frames, pattern of 4): every frame, the exact ratio
    assert Counter(r.model for r in requests) == {"general": 9, "plates": 3}
    assert {r.frame for r in requests} == {pb.InferRequest.FromString(r).frame for r in frames.requests}
    assert "models general x3, plates x1" in mixed.source


def test_one_model_is_a_mix_of_one() -> None:
    frames = with_models(make_frame_set("jpeg", 4), parse_mix("plates"))
    assert {pb.InferRequest.FromString(r).model for r in frames.requests} == {"plates"}
    assert len(frames.requests) == 4


@pytest.mark.parametrize("text", ["general=x", "general=0", "=3", "general=1,general=2", ""])
def test_a_bad_mix_is_refused_in_words(text: str) -> None:
    with pytest.raises(FrameSourceError, match="--mix"):
        parse_mix(text)
