"""Predicted run times, learnt from the jobs that ended (docs/scheduling.md#predicted-run-times).

Pure: :class:`DurationPredictor` is told of each job that ends (:meth:`~DurationPredictor.
observe`) and asked about others (:meth:`~DurationPredictor.predict`); no I/O, no clock.

The model is *nearest history*, the way Helios' QSSF estimates a job from its user's and its
name's past jobs. Each ended job is filed under a ladder of keys, from the most specific (its
user, its name's pattern and its GPUs) to the least (the whole pool). A job is predicted from
the most specific key that holds at least :data:`MIN_SAMPLES` earlier jobs: the median of
their last :data:`WINDOW` run times. Its interval is split-conformal: every ended job first
scores the prediction it got (or would have got) against what it really ran, as the absolute
log ratio; the interval is the median multiplied and divided by e to the
:data:`SCORE_QUANTILE` quantile of those scores (the user's own once they have
:data:`MIN_SCORES`, else those of the key's level). So the interval holds about
:data:`COVERAGE` of the jobs as they come, whatever the workload, and a user whose jobs are
erratic gets wider ones.

A running job's remaining time is the same history taken *given how long it has run*: the
median of the earlier run times longer than that; when it has outlived every one, it is
expected to run as long again.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from gpuyard.quantities import format_duration

__all__ = [
    "COVERAGE",
    "MIN_SAMPLES",
    "WINDOW",
    "Accuracy",
    "DurationPredictor",
    "JobFeatures",
    "Prediction",
    "name_pattern",
    "start_range",
]

WINDOW = 64
"""Run times kept per key: the most recent, so that a user's habits may change."""
MIN_SAMPLES = 3
"""Earlier jobs a key needs before it predicts; below it, the next key down the ladder."""
COVERAGE = 0.8
"""The share of jobs the interval is meant to hold."""
SCORE_QUANTILE = 0.84
"""The quantile of recent scores that sizes the interval. Above :data:`COVERAGE` because the
scores drift (a user's work changes under the window): replayed on the Helios Venus trace,
the 0.80 quantile held 77 % of the jobs, this one 81 %."""
MIN_SCORES = 20
"""Scored predictions a user needs before their interval is sized by their own scores."""
SCORES = 512
"""Scores kept per level (and :data:`USER_SCORES` per user) for the interval."""
USER_SCORES = 64
DEFAULT_SPREAD = math.log(4.0)
"""The interval's half-width (log) before any score: from a quarter to four times."""
MAX_KEYS = 200_000
"""Keys kept at most; past it, those learnt from least recently go. Names are the user's to
choose: a user who gives every job a new one must not grow the controller's memory without
end."""
BIAS_JOBS = 16
"""A user's recent jobs whose bias (running longer than told) raises their predictions."""
BIAS_FLOOR = math.log(2.0)
"""A bias below this (half of the user's recent jobs ran less than twice as long as told)
is the model's ordinary error, not a habit: it raises nothing."""
SHORTEST = 1.0
"""Run times are taken as at least a second (a log ratio needs a positive time)."""

_DIGITS = re.compile(r"\d+")
_SPACES = re.compile(r"\s+")


def name_pattern(name: str) -> str:
    """A job name with its numbers replaced by ``*``: ``resnet50-run3`` → ``resnet*-run*``.
    Runs of one experiment differ mostly in their numbers (seeds, steps, dates)."""
    return _DIGITS.sub("*", name.strip().lower())


def command_pattern(command: str) -> str:
    """The command the same way, its spaces collapsed (its first 200 characters)."""
    return _SPACES.sub(" ", _DIGITS.sub("*", command.strip()))[:200]


@dataclass(frozen=True, slots=True)
class JobFeatures:
    """What the predictor knows of a job before it runs."""

    user: str
    group: str = ""
    name: str = ""
    command: str = ""
    gpus: int = 0
    nodes: int = 1
    image: str = ""


@dataclass(frozen=True, slots=True)
class Prediction:
    """A job's predicted run time (seconds, in all) and its interval."""

    seconds: float
    low: float
    high: float
    samples: int
    """Earlier jobs it rests on."""
    level: str
    """Which key of the ladder answered (``name+gpus`` … ``pool``)."""
    basis: str
    """Where it came from, in words: ``14 earlier jobs of ada named resnet*-run*``."""
    raised: float = 1.0
    """The factor its history's median was raised by, the user's jobs having run longer
    than told (see :meth:`DurationPredictor._under`)."""

    def describe(self) -> str:
        """``predicted 2h10m (1h20m–3h30m) from 14 earlier jobs of ada named resnet*-*``."""
        return (
            f"predicted {format_duration(self.seconds)} ({format_duration(self.low)}–"
            f"{format_duration(self.high)}) from {self.basis}"
        )

    def holds(self, seconds: float) -> bool:
        return self.low <= seconds <= self.high


def start_range(start: float, now: float, ends: Iterable[Prediction]) -> tuple[float, float] | None:
    """The range of a predicted start that waits on these predicted ends (each one's
    interval around its median): the widest interval sets each side, since the start moves
    with the end that frees its room. None when it waits on no predicted end."""
    down = up = 0.0
    predicted = False
    for end in ends:
        predicted = True
        down = max(down, end.seconds - end.low)
        up = max(up, end.high - end.seconds)
    return (max(now, start - down), start + up) if predicted else None


@dataclass(frozen=True, slots=True)
class _Level:
    name: str
    key: Callable[[JobFeatures], Hashable | None]
    words: Callable[[JobFeatures], str]


def _gpus(f: JobFeatures) -> str:
    return "CPU-only" if f.gpus == 0 else f"{f.gpus}-GPU"


LEVELS: tuple[_Level, ...] = (
    _Level(
        "name+gpus",
        lambda f: ("n", f.user, name_pattern(f.name), f.gpus, f.nodes) if f.name else None,
        lambda f: f"earlier {_gpus(f)} jobs of {f.user} named {name_pattern(f.name)}",
    ),
    _Level(
        "name",
        lambda f: ("n", f.user, name_pattern(f.name)) if f.name else None,
        lambda f: f"earlier jobs of {f.user} named {name_pattern(f.name)}",
    ),
    _Level(
        "command",
        lambda f: ("c", f.user, command_pattern(f.command), f.image, f.gpus) if f.command else None,
        lambda f: f"earlier {_gpus(f)} jobs of {f.user} with the same command",
    ),
    _Level(
        "user+gpus",
        lambda f: ("u", f.user, f.gpus, f.nodes),
        lambda f: f"earlier {_gpus(f)} jobs of {f.user}",
    ),
    _Level("user", lambda f: ("u", f.user), lambda f: f"earlier jobs of {f.user}"),
    _Level(
        "group+gpus",
        lambda f: ("g", f.group, f.gpus) if f.group else None,
        lambda f: f"earlier {_gpus(f)} jobs of group {f.group}",
    ),
    _Level("gpus", lambda f: ("s", f.gpus), lambda f: f"earlier {_gpus(f)} jobs in the pool"),
    _Level("pool", lambda f: ("p",), lambda f: "earlier jobs in the pool"),
)
"""The ladder, most specific first. A user's own levels come before anyone else's: a user
with no history of their own is predicted from their group's, then the pool's (the
cold-start rule)."""
LEVEL_NAMES = tuple(level.name for level in LEVELS)


class _History:
    """One key's last :data:`WINDOW` run times, in arrival order and sorted."""

    __slots__ = ("ordered", "recent")

    def __init__(self) -> None:
        self.recent: deque[float] = deque()
        self.ordered: list[float] = []

    def add(self, seconds: float) -> None:
        self.recent.append(seconds)
        bisect.insort(self.ordered, seconds)
        if len(self.recent) > WINDOW:
            old = self.recent.popleft()
            del self.ordered[bisect.bisect_left(self.ordered, old)]

    def given(self, elapsed: float) -> float:
        """The median run time of those longer than ``elapsed``; as long again if none."""
        ordered = self.ordered
        first = bisect.bisect_right(ordered, elapsed) if elapsed > 0 else 0
        longer = len(ordered) - first
        if longer == 0:
            return 2.0 * elapsed
        mid = first + longer // 2
        if longer % 2:
            return ordered[mid]
        return (ordered[mid - 1] + ordered[mid]) / 2.0


class _Scores:
    """Recent absolute log ratios of predictions against outcomes, and their hits."""

    __slots__ = ("ordered", "scores")

    def __init__(self, keep: int) -> None:
        self.scores: deque[float] = deque(maxlen=keep)
        self.ordered: list[float] = []

    def add(self, score: float) -> None:
        if len(self.scores) == self.scores.maxlen:
            old = self.scores[0]
            del self.ordered[bisect.bisect_left(self.ordered, old)]
        self.scores.append(score)
        bisect.insort(self.ordered, score)

    def quantile(self, q: float) -> float:
        """The conformal quantile: the ceil((n + 1) q)-th smallest of n scores."""
        ordered = self.ordered
        return ordered[min(len(ordered) - 1, math.ceil(q * (len(ordered) + 1)) - 1)]

    def __len__(self) -> int:
        return len(self.scores)


@dataclass(slots=True)
class Accuracy:
    """How well predictions matched what jobs ran: the median absolute log ratio (0 is exact;
    0.69 is off by a factor of two) and the share that fell inside their interval."""

    jobs: int = 0
    inside: int = 0
    _ratios: list[float] | None = None

    def add(self, prediction: Prediction, seconds: float) -> None:
        self.jobs += 1
        self.inside += prediction.holds(seconds)
        if self._ratios is None:
            self._ratios = []
        self._ratios.append(abs(math.log(max(seconds, SHORTEST) / prediction.seconds)))

    @property
    def median_log_ratio(self) -> float | None:
        if not self._ratios:
            return None
        ratios, n = sorted(self._ratios), len(self._ratios)
        return ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2.0

    @property
    def coverage(self) -> float | None:
        return self.inside / self.jobs if self.jobs else None


class DurationPredictor:
    """Learns run times from ended jobs (:meth:`observe`); predicts others' (:meth:`predict`)."""

    def __init__(self) -> None:
        self._histories: dict[Hashable, _History] = {}
        self._level_scores = {name: _Scores(SCORES) for name in LEVEL_NAMES}
        self._user_scores: dict[str, _Scores] = {}
        self._signed: dict[str, deque[float]] = {}
        """Each user's last signed log ratios (ran / told): their jobs' bias."""
        self.accuracy = Accuracy()
        """Over every scored job."""
        self.by_user: dict[str, Accuracy] = {}
        self.observed = 0

    def predict(self, job: JobFeatures, *, elapsed: float = 0.0) -> Prediction | None:
        """The job's run time in all, given that it has run ``elapsed`` seconds (0: not
        started); None while the pool has no ended job to learn from."""
        for level in LEVELS:
            key = level.key(job)
            if key is None:
                continue
            history = self._histories.get(key)
            if history is None or len(history.recent) < MIN_SAMPLES:
                continue
            median = max(history.given(elapsed), SHORTEST)
            basis = f"{len(history.recent)} {level.words(job)}"
            under = self._under(job.user)
            if under > 0.0:
                median *= math.exp(under)
                basis += f", raised {math.exp(under):.1f}x: {job.user}'s jobs ran longer"
            spread = math.exp(self._spread(level.name, job.user))
            low = max(median / spread, elapsed)
            return Prediction(
                seconds=median,
                low=low,
                high=max(median * spread, low),
                samples=len(history.recent),
                level=level.name,
                basis=basis,
                raised=math.exp(under),
            )
        return None

    def _under(self, user: str) -> float:
        """How much the user's recent jobs outran their predictions (the median signed log
        ratio of their last :data:`BIAS_JOBS`), when they did; 0 otherwise. A prediction can
        be gamed (a few short jobs of a name, then a long one of that name backfills where
        it does not fit): once the long one has ended, that user's next predictions are
        raised by what it outran, and only ever raised."""
        recent = self._signed.get(user)
        if recent is None or len(recent) < MIN_SAMPLES:
            return 0.0
        ordered = sorted(recent)
        n = len(ordered)
        mid = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2.0
        return mid if mid > BIAS_FLOOR else 0.0

    def observe(self, job: JobFeatures, seconds: float, *, told: Prediction | None) -> None:
        """Learn that ``job`` ran ``seconds`` in all. ``told``: what it was predicted to run
        when it was submitted, scored for the intervals (None: it was told nothing)."""
        seconds = max(seconds, SHORTEST)
        prior = told
        if prior is not None:
            score = abs(math.log(seconds / prior.seconds))
            signed = math.log(seconds * prior.raised / prior.seconds)  # against its history
            recent = self._signed.get(job.user)
            if recent is None:
                recent = self._signed[job.user] = deque(maxlen=BIAS_JOBS)
            recent.append(signed)
            self._level_scores[prior.level].add(score)
            mine = self._user_scores.get(job.user)
            if mine is None:
                mine = self._user_scores[job.user] = _Scores(USER_SCORES)
            mine.add(score)
            self.accuracy.add(prior, seconds)
            accuracy = self.by_user.get(job.user)
            if accuracy is None:
                accuracy = self.by_user[job.user] = Accuracy()
            accuracy.add(prior, seconds)
        for level in LEVELS:
            key = level.key(job)
            if key is not None:
                # Moved to the end: the dict's order is least recently learnt first.
                history = self._histories.pop(key, None) or _History()
                self._histories[key] = history
                history.add(seconds)
        while len(self._histories) > MAX_KEYS:
            del self._histories[next(iter(self._histories))]
        self.observed += 1

    def _spread(self, level: str, user: str) -> float:
        mine = self._user_scores.get(user)
        if mine is not None and len(mine) >= MIN_SCORES:
            return mine.quantile(SCORE_QUANTILE)
        scores = self._level_scores[level]
        if len(scores) >= MIN_SCORES:
            return scores.quantile(SCORE_QUANTILE)
        return DEFAULT_SPREAD
