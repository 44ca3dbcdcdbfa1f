"""Why a request can never fit, in words (issue 29, point 4): "1 GPU", not "1 GPUs"; what a
worker does not ask for is left out; the largest node is named whole."""

from __future__ import annotations

import pytest

from gpuyard.models.request import Member, Request
from gpuyard.scheduler.placement import Ledger
from gpuyard.scheduler.snapshot import NodeCapacity

GiB = 1 << 30
SMALL = [NodeCapacity(f"node{i}", gpus=4, cpus=1.0, memory=12 * GiB) for i in range(2)]


@pytest.mark.parametrize(
    ("member", "says"),
    [
        (
            Member(gpus=1, cpus=2.0),
            "no node has 1 GPU and 2 CPUs (largest: 4 GPUs, 1 CPU, 12Gi memory)",
        ),
        (Member(gpus=0, cpus=3.0), "no node has 3 CPUs (largest: 4 GPUs, 1 CPU, 12Gi memory)"),
        (Member(gpus=5, cpus=1.0), "no node has 5 GPUs and 1 CPU (largest:"),
        (
            Member(gpus=2, cpus=1.0, memory=16 * GiB),
            "no node has 2 GPUs, 1 CPU and 16Gi memory (largest:",
        ),
    ],
)
def test_the_reason_names_what_was_asked_for_in_plain_words(member: Member, says: str) -> None:
    never = Ledger(SMALL).could_ever_fit(Request((member,)))
    assert never is not None and never.startswith(says), never
    assert "0 memory" not in never and "1 GPUs" not in never and "1 CPUs" not in never
