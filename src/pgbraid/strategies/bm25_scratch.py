"""Dense score arrays kept from one query to the next.

Scoring every posting adds into one float64 per ordinal: 8 MB at a million
fragments. Allocated afresh for each query (what ``np.bincount`` does), that is
memory the process maps anew and the kernel faults in page by page, zeroing each
(and compacting for huge pages): in a process holding a large postings cache
the allocation cost more than the additions (docs/benchmarks.md). So a ranking
takes a zeroed array from here and gives it back when it is done, zeroing what
it wrote; an array never given back is simply garbage, and nothing is shared
while a ranking holds it.
"""

from __future__ import annotations

import threading

import numpy as np

KEEP = 4
"""Arrays kept (searches running at once, or pipelines of different sizes)..."""
KEEP_BYTES = 256 << 20
"""...and their bytes at most (four arrays of 8M fragments; none above 32M)."""
_SLACK = 1.25
"""An array serves sizes down to 1 / _SLACK of its own."""

_lock = threading.Lock()
_free: list[np.ndarray] = []


def take(size: int) -> np.ndarray:
    """A zeroed float64 array of ``size``, the caller's alone until it gives it back."""
    with _lock:
        fits = [i for i, a in enumerate(_free) if size <= len(a) <= size * _SLACK]
        if fits:  # by position: list.remove would compare arrays element by element
            return _free.pop(min(fits, key=lambda i: len(_free[i])))[:size]
    return np.zeros(size, dtype=np.float64)


def give_back(array: np.ndarray, touched: tuple[np.ndarray | slice, ...] | None = None) -> None:
    """Zero ``array`` (at the indices and ranges ``touched`` holds when it says where it
    was written, else all of it) and keep it. ``array`` is what ``take`` returned;
    nothing may read it afterwards."""
    scattered = sum(len(t) for t in touched if not isinstance(t, slice)) if touched else 0
    if touched is not None and scattered * 16 < len(array):  # a range costs no more than fill
        for at in touched:
            array[at] = 0.0
    else:
        array.fill(0.0)
    base = array if array.base is None else array.base
    if not isinstance(base, np.ndarray) or base.dtype != np.float64 or base.ndim != 1:
        return
    with _lock:
        if any(a is base for a in _free):
            return
        _free.append(base)
        while len(_free) > KEEP or sum(a.nbytes for a in _free) > KEEP_BYTES:
            _free.pop(0)  # the oldest first (the one just given back last)
