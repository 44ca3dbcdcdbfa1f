"""What a job's nodes hold already: the tie-break of placement, and the copy a prediction
counts (docs/datasets.md, "Data preparation"; docs/images.md#placement).

Two pure rules, each written here once:

- :func:`preferred`: among nodes that are otherwise equally good (the same fit under the
  placement rules), a job takes the one that holds the most of what it needs. A node's score
  is (bytes of the job's prepared dataset versions it holds a copy of, whether it holds the
  job's image), compared in that order, larger is better: prepared data is what is too large
  to read from shared storage, while an image's layers are mostly shared with others. The
  score never makes a worse fit win: :class:`~gpuyard.scheduler.placement.Ledger` asks it
  only between equals.
- :func:`copy_seconds`: how long a placed job's data takes to copy before its workers
  start: its nodes copy at once, so the bytes the most lacking node is missing, over the
  copy rate.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence

from gpuyard.scheduler.snapshot import COPY_RATE, DataNeed

__all__ = ["NOTHING_PREFERRED", "Preferred", "Score", "copy_seconds", "preferred"]

Score = tuple[int, int]
"""(bytes of the job's prepared data a node holds, 1 if it holds the job's image else 0)."""
_NONE: Score = (0, 0)


class Preferred:
    """The nodes (by index) that hold something a job needs, with their :data:`Score`; a
    node not named holds nothing of it."""

    __slots__ = ("scores", "top")

    def __init__(self, scores: dict[int, Score]) -> None:
        self.scores = scores
        self.top: Score = max(scores.values(), default=_NONE)
        """The best score of any node."""

    def score(self, index: int) -> Score:
        return self.scores.get(index, _NONE)

    def rank(self, index: int) -> Score:
        """A sort key: the better a node, the smaller."""
        data, image = self.scores.get(index, _NONE)
        return (-data, -image)

    def __bool__(self) -> bool:
        return bool(self.scores)

    def __len__(self) -> int:
        return len(self.scores)

    def __contains__(self, index: object) -> bool:
        return index in self.scores

    def __iter__(self) -> Iterator[int]:
        return iter(self.scores)


NOTHING_PREFERRED = Preferred({})
"""What a job with neither an image nor prepared data prefers."""


def preferred(
    image_nodes: Collection[int], data_nodes: Iterable[tuple[Collection[int], int]]
) -> Preferred:
    """The score of each node: ``image_nodes`` hold the job's image; ``data_nodes`` gives,
    for each prepared dataset version of the job, the nodes holding a copy and its bytes."""
    held: dict[int, int] = {}
    for nodes, size in data_nodes:
        for index in nodes:
            held[index] = held.get(index, 0) + size
    scores = {i: (held.get(i, 0), int(i in image_nodes)) for i in (*held, *image_nodes)}
    return Preferred({i: s for i, s in scores.items() if s != _NONE})


def copy_seconds(
    needs: Sequence[DataNeed], held: Iterable[Collection[int]], rate: float = COPY_RATE
) -> float:
    """Seconds the copies of ``needs`` take on nodes holding the versions ``held`` (one
    collection of version ids per node of the placement): they copy at once, each at
    ``rate`` bytes a second, so the most bytes a node lacks sets the time."""
    if not needs:
        return 0.0
    lacking = max(
        (sum(d.size for d in needs if d.version not in versions) for versions in held), default=0
    )
    return lacking / (rate if rate > 0 else COPY_RATE)
