"""Property-based fuzzing of request decoding and config validation: no crash, every rejection clear."""

from __future__ import annotations

import grpc
import numpy as np
from helpers.agent_frames import decode_as_the_agent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npudure import config as cfg
from npudure.proto import inference_pb2 as pb
from npudure.vision import frames

JPEG_HEAD = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"
encodings = st.sampled_from([pb.ENCODING_UNSPECIFIED, pb.ENCODING_RAW_RGB, pb.ENCODING_JPEG, 3, 99, -1])
payloads = st.one_of(
    st.binary(max_size=4096),
    st.binary(max_size=4096).map(lambda b: JPEG_HEAD + b),
    st.integers(0, 1_300_000).map(lambda n: b"\x07" * n),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(encoding=encodings, frame=payloads)
def test_decode_returns_a_frame_or_a_clear_error(encoding: int, frame: bytes) -> None:
    try:
        image = decode_as_the_agent(encoding, frame)
    except frames.FrameError as exc:
        assert exc.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert len(str(exc)) > 20
        return
    assert isinstance(image, np.ndarray) and image.shape == (640, 640, 3) and image.dtype == np.uint8


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 70000), st.floats(allow_nan=True), st.text(max_size=12)
)
field_names = st.sampled_from(
    [
        "node_name",
        "listen",
        "backend",
        "npu_cores",
        "contexts",
        "core_mask",
        "sim",
        "model",
        "queue_limit",
        "policy",
        "boards",
        "typo_field",
    ]
)
documents = st.dictionaries(
    field_names, st.one_of(scalars, st.dictionaries(st.text(max_size=8), scalars, max_size=3)), max_size=6
)


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(documents, scalars, st.lists(scalars, max_size=3)))
def test_config_validation_never_crashes(data: object) -> None:
    for model in (cfg.AgentConfig, cfg.SchedulerConfig):
        try:
            cfg.parse(model, data, "fuzz.yml")
        except cfg.ConfigError as exc:
            assert str(exc).startswith("fuzz.yml: ")
