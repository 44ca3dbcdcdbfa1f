"""Keep the cyclic garbage collector off what a scheduling pass holds: :func:`frozen_heap`.

``decide()`` leaves the collector on: it allocates per job (a ``Wait`` for each waiting job, a
``Start`` and its allocations for each start), and the collector, which counts allocations,
runs hundreds of young collections during a pass over 100,000 jobs, and a full one once the
objects the pass has kept exceed a quarter of the old ones. A full collection walks every
object the process tracks, the snapshot of a million objects included, and finds nothing to
free there: the snapshot lives for the whole pass and makes no reference cycles. On
``bench/scheduler.py`` that walk is most of what the collector costs a cycle.

``gc.freeze()`` moves every object tracked at that moment into a permanent generation that no
collection walks; ``gc.unfreeze()`` moves them back into the oldest generation. The controller
wraps a pass in the pair::

    with frozen_heap() as freeze:
        snapshot = load_snapshot(session, now)
        freeze()  # the snapshot too, now that it is built
        decisions = decide(snapshot)

The trade-off, since both calls are process-wide:

* Objects alive at a freeze, whoever made them (the API's too), are skipped by collections
  until the pass ends. The collector is not switched off: what any thread allocates meanwhile
  is collected as usual.
* Cyclic garbage among the frozen objects (a cycle that was alive at the freeze and dies
  during the pass) waits for the end of the pass and the next full collection: memory held
  for a pass, not leaked. Objects freed by reference counting, most of them, are freed at
  once, frozen or not.
* At the end, the frozen objects join the oldest generation: the next full collection walks
  them once (and then frees the pass's snapshot, if nothing holds it).
* Passes may overlap (the controller's, and a prediction in an API thread): the objects are
  unfrozen when the last one ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["frozen_heap"]


class _Passes:
    """How many passes are inside :func:`frozen_heap` (process-wide, like the collector)."""

    lock = threading.Lock()
    open = 0


@contextmanager
def frozen_heap() -> Iterator[Callable[[], None]]:
    """Freeze what is alive now for the length of the ``with`` block; the value it gives
    freezes again (call it once the snapshot is built). See the module's docstring."""
    with _Passes.lock:
        _Passes.open += 1
        gc.freeze()
    try:
        yield gc.freeze
    finally:
        with _Passes.lock:
            _Passes.open -= 1
            if _Passes.open == 0:
                gc.unfreeze()
