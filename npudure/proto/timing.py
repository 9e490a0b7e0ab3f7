"""A request's stage timing (``StageTiming``) as the JSON the HTTP API and the zmq reply header carry,
and back: one field list for the scheduler that writes it and the bench that reads it.

Not ``json_format.MessageToDict``: it writes uint64 fields as strings, and clients read numbers.
"""

from __future__ import annotations

from npudure.proto import inference_pb2 as pb

FIELDS = tuple(f.name for f in pb.StageTiming.DESCRIPTOR.fields)


def as_dict(timing: pb.StageTiming) -> dict[str, int]:
    """Every stage in microseconds, by its field name."""
    return {name: getattr(timing, name) for name in FIELDS}


def from_dict(raw: object) -> pb.StageTiming:
    """The stages a JSON answer gives (unknown keys and a missing or malformed table are left out)."""
    if not isinstance(raw, dict):
        return pb.StageTiming()
    return pb.StageTiming(**{k: int(v) for k, v in raw.items() if k in FIELDS})
