"""The cluster held for one benchmark session: the admin channel, the scheduler lease, and the guard
that puts every changed setting back. It exists only once the lease is ours."""

from __future__ import annotations

from dataclasses import dataclass

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.cluster import ClusterAdmin, ClusterGuard
from npudure_workshop.bench.lease import LeaseKeeper


@dataclass
class ClusterHold:
    admin: ClusterAdmin
    lease: LeaseKeeper
    guard: ClusterGuard
    status_at_start: pb.ClusterStatus

    @classmethod
    def take(cls, target: str, holder: str, lease_ttl_s: float) -> ClusterHold:
        """Take the lease of the scheduler at ``target`` (LeaseRefused names whoever has it)."""
        admin = ClusterAdmin(target)
        try:
            status = admin.status()
            lease = LeaseKeeper(admin, holder, lease_ttl_s)
            lease.acquire()
        except BaseException:
            admin.close()
            raise
        try:
            return cls(admin, lease, ClusterGuard(admin), status)
        except BaseException:
            lease.release()
            admin.close()
            raise

    def release(self) -> list[str]:
        """Restore the cluster, release the lease, close the channel; what could not be restored."""
        try:
            return self.guard.restore()
        finally:
            self.lease.release()
            self.admin.close()
