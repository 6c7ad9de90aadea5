"""An ordered, bounded map over worker processes.

Results come back in input order (so the output does not depend on the number of workers or
their timing), and at most ``window`` batches are in flight, so a fast reader never piles the
whole input up in memory waiting for slow workers. With ``workers=0`` everything runs in this
process (debugging, tiny inputs).
"""

import collections
import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def ordered_map(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    workers: int,
    initializer: Callable[..., None],
    initargs: tuple = (),
    window: int | None = None,
) -> Iterator[Any]:
    """``fn(item)`` for each item, in order, on ``workers`` processes set up by ``initializer``."""
    if workers <= 0:
        initializer(*initargs)
        for item in items:
            yield fn(item)
        return
    window = window or 4 * workers
    pending: collections.deque = collections.deque()
    iterator = iter(items)
    with ProcessPoolExecutor(workers, mp_context=_context(), initializer=initializer,
                             initargs=initargs) as pool:
        try:
            for item in iterator:
                pending.append(pool.submit(fn, item))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
