"""Exit 0 when a gRPC server answers grpc.health.v1 ``Check`` with SERVING, 1 otherwise.

Installed by the npudure roles into /opt/npudure/libexec and run with the virtualenv's Python as
``python -I health_check.py HOST:PORT [SERVICE]`` (-I keeps the script's folder off sys.path, where a
stray file could shadow a package). Prints the status, or why there is none, so a failed check in a
playbook says what it saw. With mutual TLS on, the client certificate comes from NPUDURE_TLS_CA,
NPUDURE_TLS_CERT and NPUDURE_TLS_KEY (npudure.security.access), as for every npudure client.
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npudure.security import access as security


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: health_check.py HOST:PORT [SERVICE]", file=sys.stderr)
        return 2
    target, service = argv[1], argv[2] if len(argv) == 3 else ""
    try:
        channel = security.channel(target)
    except security.SecurityError as exc:
        print(f"{target}: {exc}")
        return 1
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=3
            )
        except grpc.RpcError as exc:
            print(f"{target}: {exc.code().name}: {exc.details()}")
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{target}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
