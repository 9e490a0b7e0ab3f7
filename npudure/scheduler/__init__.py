"""The scheduler: one gRPC front that hands each inference request to one board."""
