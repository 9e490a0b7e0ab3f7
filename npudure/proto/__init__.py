"""The npudure.v1 wire protocol: `inference.proto` and the stubs generated from it.

Use ``from npudure.proto import inference_pb2 as pb, inference_pb2_grpc as rpc``; the names and channel
option sets every peer must agree on are in ``npudure.proto.contract``.
"""
