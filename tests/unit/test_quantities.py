from __future__ import annotations

import pytest

from gpuyard.quantities import (
    counted,
    format_bytes,
    format_duration,
    format_resources,
    parse_bytes,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1.5h", 5400),
        (" 2 h ", 7200),
        (30, 30),
        (0.5, 0.5),
    ],
)
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "2x", "h", "-5s", "1h-"])
def test_parse_duration_rejects_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 90s, 15m, 2h"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512", 512),
        ("1K", 1024),
        ("512M", 512 << 20),
        ("4G", 4 << 30),
        ("4Gi", 4 << 30),
        ("4GiB", 4 << 30),
        ("4gb", 4 << 30),
        ("1.5G", 3 << 29),
        ("1T", 1 << 40),
        (7, 7),
    ],
)
def test_parse_bytes(text: str | int, size: int) -> None:
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "G", "4X", "-1G", "four"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 512M, 4G"):
        parse_bytes(text)


def test_formatting() -> None:
    assert [format_bytes(n) for n in (0, 1023, 1024, 4 << 30, 3 << 29, 5 << 40)] == [
        "0",
        "1023",
        "1Ki",
        "4Gi",
        "1.5Gi",
        "5Ti",
    ]
    assert [format_duration(s) for s in (5, 65, 3700, 90000)] == ["5s", "1m05s", "1h01m", "1d01h"]


@pytest.mark.parametrize(
    ("gpus", "cpus", "memory", "written"),
    [
        (1, 1, 0, "1 GPU, 1 CPU"),  # a request that names no memory says nothing of it
        (0, 2, 16 * 1024**3, "0 GPUs, 2 CPUs, 16Gi memory"),
        (8, 0.5, 1024**2, "8 GPUs, 0.5 CPUs, 1Mi memory"),
    ],
)
def test_a_size_is_written_in_english(gpus: int, cpus: float, memory: int, written: str) -> None:
    assert format_resources(gpus, cpus, memory) == written
    assert counted(1, "node") == "1 node" and counted(3, "node") == "3 nodes"
