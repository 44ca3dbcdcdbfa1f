"""Usage charts as inline SVG: a line per series, drawn from numbers only (no chart library,
no script). The markup is built from floats and fixed strings, so it is safe to mark up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from gpuyard.models.usage import UsagePoint
from gpuyard.quantities import format_bytes

__all__ = ["Chart", "usage_charts"]

WIDTH, HEIGHT, PAD = 320, 90, 4


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    latest: str
    svg: Markup
    scale: str = ""
    """What the top of the chart stands for."""


def _line(values: Sequence[tuple[float, float | None]], t0: float, t1: float, top: float) -> str:
    span = max(t1 - t0, 1e-9)
    points = []
    for t, v in values:
        if v is None:
            continue
        x = PAD + (WIDTH - 2 * PAD) * (t - t0) / span
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * (v / top if top else 0)
        points.append(f"{x:.1f},{y:.1f}")
    return " ".join(points)


def _svg(title: str, series: Sequence[tuple[float, float | None]], top: float) -> Markup:
    times = [t for t, _ in series]
    t0, t1 = (min(times), max(times)) if times else (0.0, 1.0)
    line = _line(series, t0, t1, top)
    label = escape(title)
    # Numbers and fixed text, with the one string escaped: safe to mark up.
    return Markup(  # noqa: S704
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}" '
        f'preserveAspectRatio="none"><rect class="chart-bg" x="0" y="0" width="{WIDTH}" '
        f'height="{HEIGHT}"/><polyline class="chart-line" fill="none" points="{line}"/></svg>'
    )


def usage_charts(points: Sequence[UsagePoint]) -> list[Chart]:
    """CPU, memory, GPU utilisation and GPU memory charts of one worker's points."""

    def at(p: UsagePoint) -> float:
        return p.time.timestamp()

    cpu = [(at(p), p.cpu) for p in points]
    mem = [(at(p), None if p.memory is None else float(p.memory)) for p in points]
    gpu = [(at(p), p.gpu_util) for p in points]
    gmem = [(at(p), None if p.gpu_memory is None else float(p.gpu_memory)) for p in points]

    def top(values: Sequence[tuple[float, float | None]], floor: float) -> float:
        # The chart's top: its largest value and a fifth (the shape shows), never below
        # ``floor`` (an idle worker's line does not fill the chart).
        return max([floor, *[v * 1.2 for _, v in values if v is not None]])

    def last(values: Sequence[tuple[float, float | None]]) -> float | None:
        found = [v for _, v in values if v is not None]
        return found[-1] if found else None

    def size(v: float | None) -> str:
        return "–" if v is None else format_bytes(int(v))

    c, m, g, gm = last(cpu), last(mem), last(gpu), last(gmem)
    cpu_top, mem_top, gmem_top = top(cpu, 0.1), top(mem, 1 << 20), top(gmem, 1 << 20)
    charts = [
        Chart(
            "CPU",
            "cores",
            "–" if c is None else f"{c:.2f} cores",
            _svg("CPU", cpu, cpu_top),
            f"{cpu_top:.2g} cores",
        ),
        Chart("Memory", "bytes", size(m), _svg("Memory", mem, mem_top), size(mem_top)),
    ]
    if any(v is not None for _, v in gpu):
        charts.append(
            Chart("GPU", "%", "–" if g is None else f"{g:.0f} %", _svg("GPU", gpu, 100), "100 %")
        )
        charts.append(
            Chart(
                "GPU memory", "bytes", size(gm), _svg("GPU memory", gmem, gmem_top), size(gmem_top)
            )
        )
    return charts
