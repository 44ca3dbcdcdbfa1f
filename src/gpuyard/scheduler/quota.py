"""Quotas per user and per group, per priority tier, in nodes (workers) and GPUs.

The HAI model (docs/accounts.md): "10 nodes at NORMAL" means a user's jobs at the normal tier may
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
        """What is held, for the keys that have a limit (no other is ever read)."""
        self._words: dict[tuple[QuotaKey, str, int, int], str] = {}
        self.users = {name for kind, name, _ in limits if kind == "user"}
        self.groups = {name for kind, name, _ in limits if kind == "group"}
        """Everyone a limit names, at some tier: anyone else has none (a quick test before
        the exact one, per job)."""
        if limits:
            for job in running:
                self._add(job.owner, job.group, job.priority, job.nodes, job.gpus)

    def _add(self, owner: str, group: str, tier: int, nodes: int, gpus: int) -> None:
        keys: list[QuotaKey] = []
        if owner in self.users:
            keys.append(("user", owner, tier))
        if group and group in self.groups:
            keys.append(("group", group, tier))
        for key in keys:
            if key in self.limits:
                used = self.used.setdefault(key, [0, 0])
                used[0] += nodes
                used[1] += gpus

    def applies(self, owner: str, group: str, tier: int) -> bool:
        """Whether a limit is set for the owner or the group at this tier."""
        return self.user_limited(owner, tier) or self.group_limited(group, tier)

    def user_limited(self, owner: str, tier: int) -> bool:
        return owner in self.users and ("user", owner, tier) in self.limits

    def group_limited(self, group: str, tier: int) -> bool:
        return group in self.groups and ("group", group, tier) in self.limits

    def check(self, owner: str, group: str, tier: int, request: Request) -> str | None:
        """None if ``request`` fits the owner's and the group's quotas; otherwise why not."""
        if not self.limits or (owner not in self.users and group not in self.groups):
            return None
        for key in (("user", owner, tier), ("group", group, tier)):
            limit = self.limits.get(key)
            if limit is None:
                continue
            nodes, gpus = self.used.get(key, (0, 0))
            if limit.nodes is not None and nodes + request.nodes > limit.nodes:
                return self._over(key, limit.nodes, "node(s)", nodes, request.nodes)
            if limit.gpus is not None and gpus + request.gpus > limit.gpus:
                return self._over(key, limit.gpus, "GPU(s)", gpus, request.gpus)
        return None

    def _over(self, key: QuotaKey, cap: int, what: str, holds: int, needs: int) -> str:
        """Why a job is over the quota of ``key``: the same words for every job of an owner
        that needs as much while the owner holds as much (one string, not one per job)."""
        words = (key, what, holds, needs)
        found = self._words.get(words)
        if found is None:
            found = self._words[words] = (
                f"over quota: {key[0]} {key[1]} may hold {cap} {what} at this tier, holds "
                f"{holds}, and this job needs {needs}"
            )
        return found

    def charge(self, owner: str, group: str, tier: int, request: Request) -> None:
        if self.limits and (owner in self.users or group in self.groups):
            self._add(owner, group, tier, request.nodes, request.gpus)
