"""The board agent: a gRPC server that runs the model on this board's NPU cores."""
