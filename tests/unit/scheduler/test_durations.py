"""The duration predictor: nearest history, its ladder of keys, the interval's calibration,
and a running job's remaining time (docs/scheduling.md#predicted-run-times)."""

from __future__ import annotations

import math
import random

import pytest

from gpuyard.scheduler.durations import (
    MIN_SAMPLES,
    WINDOW,
    DurationPredictor,
    JobFeatures,
    name_pattern,
)

HOUR = 3600.0


def ada(name: str = "", *, gpus: int = 8, user: str = "ada", group: str = "vision") -> JobFeatures:
    return JobFeatures(user=user, group=group, name=name, command="python train.py", gpus=gpus)


def learn(predictor: DurationPredictor, job: JobFeatures, *seconds: float) -> None:
    for s in seconds:
        predictor.observe(job, s, told=predictor.predict(job))


def test_nothing_is_predicted_before_a_job_has_ended() -> None:
    predictor = DurationPredictor()
    assert predictor.predict(ada("resnet50-run1")) is None
    learn(predictor, ada("other", user="bob", group="nlp", gpus=1), *[60.0] * (MIN_SAMPLES - 1))
    assert predictor.predict(ada("resnet50-run1")) is None  # too few to say anything
    learn(predictor, ada("other", user="bob", group="nlp", gpus=1), 60.0)
    found = predictor.predict(ada("resnet50-run1"))
    assert found is not None and (found.level, found.seconds) == ("pool", 60.0)
    assert found.basis == f"{MIN_SAMPLES} earlier jobs in the pool"


def test_the_eleventh_run_of_a_name_is_predicted_from_the_ten_before() -> None:
    predictor = DurationPredictor()
    learn(predictor, ada("other", user="bob", gpus=8), *[10.0] * 20)  # someone else's: short
    for i in range(10):
        learn(predictor, ada(f"resnet50-run{i}"), HOUR * (1 + i / 100))
    found = predictor.predict(ada("resnet50-run10"))
    assert found is not None
    assert found.level == "name+gpus" and found.samples == 10
    assert HOUR <= found.seconds <= 1.1 * HOUR
    assert found.low <= found.seconds <= found.high
    assert found.basis == "10 earlier 8-GPU jobs of ada named resnet*-run*"
    assert found.describe().startswith("predicted 1h")
    # The same name on another size: the name's own history, not the size's.
    other = predictor.predict(ada("resnet50-run10", gpus=1))
    assert other is not None and other.level == "name" and other.seconds >= HOUR


@pytest.mark.parametrize(
    ("job", "level"),
    [
        (ada("new-experiment"), "command"),  # ada's own command, another name
        (JobFeatures("ada", "vision", gpus=8), "user+gpus"),
        (JobFeatures("ada", "vision", gpus=2), "user"),
        (JobFeatures("cyd", "vision", gpus=8), "group+gpus"),  # a new user: the group's
        (JobFeatures("cyd", "audio", gpus=8), "gpus"),
        (JobFeatures("cyd", "audio", gpus=3), "pool"),
    ],
)
def test_a_job_is_predicted_from_the_most_specific_history_that_has_enough(
    job: JobFeatures, level: str
) -> None:
    predictor = DurationPredictor()
    learn(predictor, ada("resnet50-run1"), 100.0, 110.0, 120.0)
    found = predictor.predict(job)
    assert found is not None and found.level == level


def test_a_running_job_is_predicted_given_how_long_it_has_run() -> None:
    predictor = DurationPredictor()
    learn(predictor, ada("sweep"), 60.0, 120.0, 600.0, 3600.0, 7200.0)
    job = ada("sweep")
    fresh = predictor.predict(job)
    assert fresh is not None and fresh.seconds == 600.0
    # Past ten minutes: of the runs longer than that, the median.
    later = predictor.predict(job, elapsed=900.0)
    assert later is not None and later.seconds == (3600.0 + 7200.0) / 2
    assert later.low >= 900.0
    # Longer than any run seen: as long again.
    beyond = predictor.predict(job, elapsed=10_000.0)
    assert beyond is not None and beyond.seconds == 20_000.0 and beyond.low >= 10_000.0


def test_old_habits_are_forgotten() -> None:
    predictor = DurationPredictor()
    learn(predictor, ada("train"), *[HOUR] * WINDOW)
    learn(predictor, ada("train"), *[60.0] * WINDOW)
    found = predictor.predict(ada("train"))
    assert found is not None and found.seconds == 60.0


def test_the_interval_holds_about_its_share_of_jobs() -> None:
    rng = random.Random(7)
    predictor = DurationPredictor()
    users = [(f"u{i}", math.exp(rng.uniform(4, 10)), rng.uniform(0.2, 1.5)) for i in range(12)]
    for _ in range(3000):
        user, typical, spread = rng.choice(users)
        predictor.observe(
            JobFeatures(user, gpus=1),
            typical * math.exp(rng.gauss(0, spread)),
            told=predictor.predict(JobFeatures(user, gpus=1)),
        )
    coverage = predictor.accuracy.coverage
    assert coverage is not None and 0.72 <= coverage <= 0.88
    assert set(predictor.by_user) == {u for u, _, _ in users}
    # An erratic user gets wider intervals than a regular one.
    steady = min(users, key=lambda u: u[2])[0]
    erratic = max(users, key=lambda u: u[2])[0]
    widths = {}
    for user in (steady, erratic):
        found = predictor.predict(JobFeatures(user, gpus=1))
        assert found is not None
        widths[user] = found.high / found.low
    assert widths[erratic] > widths[steady]


def test_scores_are_of_what_the_job_was_told() -> None:
    predictor = DurationPredictor()
    learn(predictor, ada("a"), 100.0, 100.0, 100.0)
    told = predictor.predict(ada("a"))
    learn(predictor, ada("a"), *[1000.0] * 10)  # the history moves on while it runs
    predictor.observe(ada("a"), 100.0, told=told)  # scored on 100 s, what it was told
    assert predictor.by_user["ada"].jobs == 11
    predictor.observe(ada("a"), 100.0, told=None)  # told nothing: learnt, not scored
    assert predictor.by_user["ada"].jobs == 11 and predictor.observed == 15


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("resnet50-run3", "resnet*-run*"),
        ("  BERT_lr0.001_seed42 ", "bert_lr*.*_seed*"),
        ("train", "train"),
    ],
)
def test_names_are_matched_without_their_numbers(name: str, pattern: str) -> None:
    assert name_pattern(name) == pattern


def test_a_user_whose_jobs_outrun_their_predictions_gets_longer_ones() -> None:
    """Gaming: three one-minute jobs of a name, then long ones of that name. The first long
    one is predicted a minute (and may backfill where it does not fit); once a few have
    ended, that user's predictions are raised by what their jobs outran, and only theirs."""
    predictor = DurationPredictor()
    learn(predictor, ada("x"), 60.0, 60.0, 60.0)
    learn(predictor, ada("y", user="bob"), 60.0, 60.0, 60.0)
    first = predictor.predict(ada("x"))
    assert first is not None and first.seconds == 60.0 and first.raised == 1.0
    learn(predictor, ada("x"), HOUR, HOUR, HOUR)  # each told a minute or so, ran an hour
    raised = predictor.predict(ada("x-other"))
    assert raised is not None and raised.raised > 2.0 and raised.seconds > 120.0
    assert "ada's jobs ran longer" in raised.basis
    bob = predictor.predict(ada("y", user="bob"))
    assert bob is not None and (bob.seconds, bob.raised) == (60.0, 1.0)


def test_ordinary_error_raises_nothing() -> None:
    """Jobs that run a little over or under their prediction, as any do."""
    predictor = DurationPredictor()
    learn(predictor, ada("x"), *[100.0 * (1.5 if i % 2 else 0.8) for i in range(40)])
    found = predictor.predict(ada("x"))
    assert found is not None and found.raised == 1.0


def test_a_user_who_names_every_job_anew_cannot_grow_the_history_without_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuyard.scheduler import durations

    monkeypatch.setattr(durations, "MAX_KEYS", 50)
    predictor = DurationPredictor()
    learn(predictor, ada("steady"), 100.0, 100.0, 100.0)
    for i in range(200):
        learn(predictor, ada(f"run-{chr(97 + i % 26)}{chr(97 + i // 26)}"), 60.0)
        learn(predictor, ada("steady"), 100.0)  # learnt from again: kept
    assert len(predictor._histories) == 50
    found = predictor.predict(ada("steady"))
    assert found is not None and found.level == "name+gpus"
