"""Quotas per user and per group, per priority tier, in nodes (workers) and GPUs.

The HAI model (reference 003): "10 nodes at NORMAL" means a user's jobs at the normal tier may
hold at most 10 nodes at once. A job whose start would take its owner or its group past a limit
waits, with a reason that names the limit; it does not block anyone else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuyard.scheduler.snapshot import Limit, QuotaKey, Request, RunningJob

__all__ = ["QuotaBook"]


class QuotaBook:
    def __init__(self, limits: Mapping[QuotaKey, Limit], running: Iterable[RunningJob]) -> None:
        self.limits = limits
        self.used: dict[QuotaKey, list[int]] = {}
        if limits:
            for job in running:
                self._add(job.owner, job.group, job.priority, job.nodes, job.gpus)

    def _keys(self, owner: str, group: str, tier: int) -> list[QuotaKey]:
        keys: list[QuotaKey] = [("user", owner, tier)]
        if group:
            keys.append(("group", group, tier))
        return keys

    def _add(self, owner: str, group: str, tier: int, nodes: int, gpus: int) -> None:
        for key in self._keys(owner, group, tier):
            used = self.used.setdefault(key, [0, 0])
            used[0] += nodes
            used[1] += gpus

    def check(self, owner: str, group: str, tier: int, request: Request) -> str | None:
        """None if ``request`` fits the owner's and the group's quotas; otherwise why not."""
        if not self.limits:
            return None
        for key in (("user", owner, tier), ("group", group, tier)):
            limit = self.limits.get(key)
            if limit is None:
                continue
            nodes, gpus = self.used.get(key, (0, 0))
            who = f"{key[0]} {key[1]}"
            if limit.nodes is not None and nodes + request.nodes > limit.nodes:
                return (
                    f"over quota: {who} may hold {limit.nodes} node(s) at this tier, holds "
                    f"{nodes}, and this job needs {request.nodes}"
                )
            if limit.gpus is not None and gpus + request.gpus > limit.gpus:
                return (
                    f"over quota: {who} may hold {limit.gpus} GPU(s) at this tier, holds "
                    f"{gpus}, and this job needs {request.gpus}"
                )
        return None

    def charge(self, owner: str, group: str, tier: int, request: Request) -> None:
        if self.limits:
            self._add(owner, group, tier, request.nodes, request.gpus)
