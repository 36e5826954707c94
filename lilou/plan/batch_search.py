"""A device's largest batch within its SLO(s), found exactly: the search both kinds of plan run without ``--batches``.

:func:`largest_batch` is a generator: it yields the batch it wants priced next and is sent that batch's
:class:`lilou.plan.planner.PlanPoint` (None where the batch could not be priced). An LLM plan drives one device's
search at a time (:func:`drive`); an ONNX plan drives every device's at once (:func:`drive_all`), pricing each batch
on all the devices that ask for it together, so that the graph work stays once per batch.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from lilou.plan.planner import PlanPoint

#: The ladder the search starts from: a batch between its rungs is found by interpolation, and each batch predicted
#: costs about as much as a rung, so rungs x4 apart give the same plans as x2 with fewer predictions (Llama-3.1-8B,
#: 115 devices: 477 against 607).
SEARCH_LADDER: tuple[int, ...] = (1, 4, 16, 64, 256)
#: The largest batch the search tries (as --batches takes): a small model fits far more.
MAX_SEARCH_BATCH = 65536
#: Guesses by interpolation before the search bisects (two usually settle it: the guess and the batch above).
INTERPOLATION_STEPS = 6

#: ``(bound of a point, its limit)``: a point meets when every bound is within its limit.
Limit = tuple[Callable[["PlanPoint"], float], float]
Search = Generator[int, "PlanPoint | None", None]
K = TypeVar("K")


def largest_batch(ladder: Sequence[int], limits: Sequence[Limit],
                  most: Callable[[], int | None] = lambda: None) -> Search:
    """The largest batch whose point meets every limit of ``limits``, exactly: the ``ladder`` up to its first batch
    that misses, doubling past its top while every batch meets (up to ``most()``, the largest batch memory holds,
    where known, and :data:`MAX_SEARCH_BATCH`), then between the last batch that meets and the first that does not
    (or ``most() + 1``) the line through their bounds guesses where the first limit they miss is crossed (regula
    falsi, Illinois rule; :data:`INTERPOLATION_STEPS` guesses, then bisection) until the two are adjacent. The bounds
    grow with the batch but for wiggles of about 1 % between neighbouring batches (Llama-3.1-8B's ITL on an L40S:
    batch 17 0.7 % below 16), so the batch found meets and the one above it does not, with every ladder batch below
    it meeting too. A point sent as None (not priced) misses."""
    at: dict[int, PlanPoint] = {}

    def meets(point: PlanPoint | None) -> bool:
        return point is not None and all(bound(point) <= limit for bound, limit in limits)

    def price(batch: int) -> Generator[int, PlanPoint | None, bool]:
        point = yield batch
        if point is not None:
            at[batch] = point
        return meets(point)

    low = high = None  # the largest batch that meets; the smallest above it that does not
    for batch in ladder:
        if not (yield from price(batch)):
            high = batch
            break
        low = batch
    if low is None:
        return
    while high is None and (most() is None or low < most()) and low < MAX_SEARCH_BATCH:
        batch = min(2 * low, MAX_SEARCH_BATCH, *([most()] if most() is not None else []))
        if (yield from price(batch)):
            low = batch
        else:
            high = batch
    if high is None:
        return
    if most() is not None:
        high = min(high, most() + 1)  # a batch above the largest memory holds does not fit
    steps, side, scale = 0, None, [1.0, 1.0]  # the side each guess fell on; each end's weight (Illinois rule)
    while high - low > 1:
        guess = _crossing(at, low, high, limits, scale, most()) if steps < INTERPOLATION_STEPS else (low + high) // 2
        steps += 1
        passed = yield from price(guess)
        if passed:
            low = guess
        else:
            high = guess if most() is None else min(guess, most() + 1)
        # two guesses on one side in a row: the other end counts half as far from its limit, so that a curved
        # bound (the line under it guessing low each time) does not creep towards the crossing a batch at a time
        if passed and side is True:
            scale = [1.0, scale[1] / 2]
        elif not passed and side is False:
            scale = [scale[0] / 2, 1.0]
        else:
            scale = [1.0, 1.0]
        side = passed


def drive(search: Search, price: Callable[[int], Any]) -> None:
    """Run one search to its end, ``price(batch)`` giving each point it asks for."""
    try:
        batch = next(search)
        while True:
            batch = search.send(price(batch))
    except StopIteration:
        return


def _crossing(at: dict[int, PlanPoint], low: int, high: int, limits: Sequence[Limit], scale: Sequence[float],
              most: int | None) -> int:
    """The batch strictly between ``low`` (meets) and ``high`` where the line through their bounds (each end's
    distance from its limit times its ``scale``) first crosses a limit that ``high`` misses; where ``high`` was not
    priced, ``high - 1`` when memory's bound ``most`` is known (``high`` is above it), else the middle."""
    below, above = at[low], at.get(high)
    if above is None:
        return high - 1 if most is not None else (low + high) // 2
    crossings = []
    for bound, limit in limits:
        under, over = (limit - bound(below)) * scale[0], (bound(above) - limit) * scale[1]
        if over > 0:
            crossings.append(low + under * (high - low) / (under + over))
    guess = math.floor(min(crossings)) if crossings else (low + high) // 2
    return min(max(guess, low + 1), high - 1)


def drive_all(searches: Mapping[K, Search], price: Callable[[int, list[K]], Mapping[K, Any]],
              allowed: Callable[[int], bool] = lambda batch: True, asked: Mapping[K, int] | None = None) -> dict[K, int]:
    """Run many searches together: the smallest batch any of them asks for next is priced once for all that ask for
    it, ``price(batch, keys)`` giving each key's point (a key left out: None), until every search has ended or
    paused at a batch not ``allowed``. Returns the paused searches' next batches, to resume them with ``asked``."""
    wanted: dict[K, int] = dict(asked or {})
    for key, search in searches.items():
        if key not in wanted:
            with contextlib.suppress(StopIteration):
                wanted[key] = next(search)
    paused: dict[K, int] = {}
    while True:
        for key in [key for key, batch in wanted.items() if not allowed(batch)]:
            paused[key] = wanted.pop(key)
        if not wanted:
            return paused
        batch = min(wanted.values())
        keys = [key for key, asked_for in wanted.items() if asked_for == batch]
        points = price(batch, keys)
        for key in keys:
            try:
                wanted[key] = searches[key].send(points.get(key))
            except StopIteration:
                del wanted[key]
