"""A tiny single-node training job for `make run`: linear regression by gradient descent.

Pure Python (no torch), so it runs anywhere. It reads the gpuyard env contract, prints the
loss as it falls, and writes the learned weights to $GPUYARD_OUTPUT_DIR.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path


def main() -> None:
    rng = random.Random(0)
    true_w, true_b = 3.0, -1.0
    data = [
        (x, true_w * x + true_b + rng.gauss(0, 0.1))
        for x in (rng.uniform(-1, 1) for _ in range(256))
    ]
    w, b, lr = 0.0, 0.0, 0.1
    env = os.environ
    print(f"job {env.get('GPUYARD_JOB_ID')} attempt {env.get('GPUYARD_ATTEMPT')}", flush=True)
    for step in range(1, 201):
        gw = sum(2 * (w * x + b - y) * x for x, y in data) / len(data)
        gb = sum(2 * (w * x + b - y) for x, y in data) / len(data)
        w, b = w - lr * gw, b - lr * gb
        if step % 25 == 0:
            loss = sum((w * x + b - y) ** 2 for x, y in data) / len(data)
            print(f"step {step:4d}  loss {loss:.5f}  w {w:.3f}  b {b:.3f}", flush=True)
    out = Path(os.environ.get("GPUYARD_OUTPUT_DIR", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "weights.json").write_text(json.dumps({"w": w, "b": b}))
    print(f"saved weights to {out / 'weights.json'}")


if __name__ == "__main__":
    main()
