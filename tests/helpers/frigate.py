"""Frigate's zmq detector client, as the tests use it (it lives in the package: the benchmarks use it too)."""

from npudure.bench.frigate import ZEROS, FrigateDetector

__all__ = ["ZEROS", "FrigateDetector"]
