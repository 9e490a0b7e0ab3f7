"""The pieces of ``benchmarks/forwarding.py`` (the frame's path: scheduler vs nginx vs proxyless vs direct).

``meter`` (process CPU, run-queue waits and pinning), ``generator`` (the load generator in its own
process), ``nginx`` (the peer proxy), ``routing`` (the routing decision microbenchmark), ``phases``
(the capacity and latency runs and their summary) and ``report`` (the printed figures). The script
itself parses the arguments, starts the cluster and wires these together.
"""
