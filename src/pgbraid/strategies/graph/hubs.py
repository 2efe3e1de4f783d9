"""Candidates that share only hubs with the seed: found, or proven absent, without
reading every hub's edges (a top-k set-similarity join with prefix and size filters,
as in AllPairs / PPJoin: Bayardo et al., WWW 2007; Xiao et al., WWW 2008).

Every candidate sharing a *non-hub* neighbour with the seed is scored exactly by
``walks.similar``. The others share only hubs: h of them, read smallest first (by
degree). After reading the lists of the first j hubs, a candidate not seen in them
shares at most r = h - j hubs, so it scores at most ``unseen(r)``:
    jaccard  r / |N(s)|            (|N(s) ∪ N(c)| >= |N(s)|, shared <= |N(c)|)
    cosine   sqrt(r / |N(s)|)      (shared <= |N(c)|)
    adamic-adar  the r unread hubs' weights 1 / ln(deg), the smallest of all
and a candidate seen in a of them (degree D) at most ``pair(min(a + r, D), D)``.
With t the k-th best exact score so far: once unseen(r) < t no unseen candidate can
enter the top k (pigeonhole: one sharing m hubs points at one of the h - m + 1
smallest), and a seen one needs pair(...) >= t to be worth its exact score. The
first round reads the smallest hub; every later one reads at least one hub more
and at least ``enough(t)``, the fewest lists after which unseen(r) < t (t only
rises, so that is never more than t needs), until the bound holds with every kept
candidate scored: the answer is then *certified exact*, or a work budget of hub
edges stops it, and the trace says it is not. A candidate is probed (its own
edges read) once: scored, or gone when its exact score is below t (it can never
enter the top k), and left out of every later round's tally.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SLACK = 1e-9        # a bound this close to t is kept: float rounding must not drop a tie
NEVER = 2**31 - 1   # "no shared count is enough" in a need table
TABLE = 4_096       # degrees with a need of their own; beyond, the loose bound


@dataclass
class Bound:
    """Upper bounds on a hub-only candidate's score, for one seed and measure.

    ``weights``: each hub's Adamic-Adar weight, in reading order (smallest hub first);
    ``exact``: a candidate's stored degree is its neighbour count (one edge type, one
    direction, no neighbour_type filter); otherwise it is only an upper bound on it.
    """

    measure: str
    size: int               # |N(seed)|
    weights: list[float]
    exact: bool

    def __post_init__(self) -> None:
        best, self._best = 0.0, [0.0]   # the x largest weights' sum, for x = 0..h
        for w in sorted(self.weights, reverse=True):
            best += w
            self._best.append(best)

    def pair(self, x: int, low: int) -> float:
        """The best score of a candidate sharing at most x hubs, with at least ``low``
        neighbours of its own."""
        if x <= 0:
            return 0.0
        low = max(low, x)
        if self.measure == "jaccard":
            return x / (self.size + low - x)
        if self.measure == "cosine":
            return x / math.sqrt(self.size * low)
        return self._best[min(x, len(self.weights))]

    def unseen(self, read: int) -> float:
        """The best score of a candidate in none of the first ``read`` hubs' lists."""
        if self.measure == "adamic-adar":
            return sum(self.weights[read:])
        r = len(self.weights) - read
        return self.pair(r, r)

    def enough(self, t: float | None) -> int:
        """The fewest hubs to read (smallest first) for ``unseen`` to fall below t."""
        if t is None:
            return 1
        floor = t * (1 - SLACK)
        return next((j for j in range(len(self.weights)) if self.unseen(j) < floor),
                    len(self.weights))

    def order(self, a: int, degree: int, unread: int) -> float:
        """The best score of a candidate seen in a of the lists read (its probing order)."""
        x = min(a + unread, degree)
        return self.pair(x, degree if self.exact else x)

    def need(self, t: float | None) -> tuple[list[int], int]:
        """The shared count a seen candidate must be able to reach, by its degree d:
        (need[d - 1] for d = 1..len(need), the need beyond), to score t or more."""
        if t is None or t <= 0:
            return [], 1
        h, floor = len(self.weights), t * (1 - SLACK)

        def least(degree: int | None) -> int:
            """The smallest x <= h (and <= degree) reaching t (x's own count as the
            candidate's degree when ``degree`` is None): the bounds grow with x."""
            top = h if degree is None else min(h, degree)
            low, high = 1, top + 1
            while low < high:
                mid = (low + high) // 2
                if self.pair(mid, mid if degree is None else degree) >= floor:
                    high = mid
                else:
                    low = mid + 1
            return low if low <= top else NEVER
        loose = least(None)   # valid for every degree: a candidate has >= x neighbours
        if not self.exact or self.measure == "adamic-adar" or loose == NEVER:
            return [NEVER] * (min(loose, h + 1) - 1), loose
        table = []
        while len(table) < TABLE and (len(table) < h or self.pair(h, len(table) + 1) >= floor):
            table.append(least(len(table) + 1))
        return table, NEVER if len(table) < TABLE else loose


def passes(a: int, degree: int, unread: int, need: list[int], beyond: int) -> bool:
    """What the engines' tally keeps (native.py says the same in SQL)."""
    required = need[degree - 1] if 0 < degree <= len(need) else beyond
    return min(a + unread, degree) >= required


def window(need: list[int], beyond: int, unread: int) -> tuple[int, int] | None:
    """The degrees a candidate seen in one hub list only (a = 1) may have, (low, high)
    (low > high: none), or None when that range has no end."""
    if beyond <= 1 + unread:
        return None
    fits = [d for d, x in enumerate(need, start=1) if x <= 1 + unread]
    return (fits[0], fits[-1]) if fits else (1, 0)


@dataclass
class Ask:
    """One round's question to an engine's ``probe``: the candidates in the ``hubs``' lists
    (those in ``done`` left out: scored, or known to fall short) kept by ``need``, read
    whole when their degrees add up to ``afford`` edges at most, else the ``quota`` most
    promising (``Bound.order``; within ``afford``); a probed candidate comes back scored
    when its exact shared count meets ``keep`` (the k-th best so far) and its score is
    not below the ``want``-th best of the round's own, else as gone."""

    hubs: list[int]
    unread: int
    need: tuple[list[int], int]
    keep: tuple[list[int], int]
    afford: int
    quota: int
    done: set[int]
    among: set[int]
    of_type: str | None
    bound: "Bound"
    want: int           # k: a probed candidate below k others probed with it is gone too


@dataclass
class Probed:
    """What ``probe`` found: c -> (a, D, N(c) & among) for the scored; the gone (probed
    but short of keep, or not of the candidate type); the edges the probes read; how
    many kept candidates were not probed."""

    kept: dict[int, tuple[int, int, set[int]]]
    gone: set[int]
    edges: int
    remaining: int


@dataclass
class HubSearch:
    """The state of one seed's hub rounds: what was read, what it cost, the verdict.

    ``edges_read`` counts every edge a round reads: the hub lists (each round reads its
    prefix again) and the kept candidates' own edges (their exact scores)."""

    order: list[int]                 # hubs, smallest first
    budget: int
    degrees: dict[int, int]
    read: int = 0                    # hubs whose lists the last round read
    edges_read: int = 0
    hub_edges_read: int = 0
    rounds: int = 0
    pending: bool = False            # the last round's candidates are not all scored
    certified: bool = False
    stopped: str = ""
    threshold: float | None = None
    bound: float | None = None
    verified: int = 0
    tallied: int | None = None       # candidates in the lists (the packed path: tally.py)
    packed: bool = False             # every list read at once, packed (tally.py)

    def prefix(self, read: int) -> int:
        return sum(self.degrees[z] for z in self.order[:read])

    def start(self, read: int) -> int | None:
        """Begin a round over the ``read`` smallest hubs: the most edges its candidates
        may cost to score (else the round only tallies, and the next reads one hub
        more: that costs less than scoring so many), or None when the budget does not allow the round."""
        cost = self.prefix(read)
        if self.edges_read + cost > self.budget:
            self.stopped = (f"the budget of {self.budget:,} edges read would be exceeded by "
                            f"reading the {read} smallest hubs ({cost:,} edges) after "
                            f"{self.edges_read:,}")
            return None
        self.edges_read += cost
        self.hub_edges_read += cost
        self.rounds += 1
        self.read = read
        left = self.budget - self.edges_read
        if read == len(self.order) or self.edges_read + self.prefix(read + 1) > self.budget:
            return left
        # scoring may cost what the next round would read again, or a quarter of what is left
        return min(left, max(self.prefix(read + 1), left // 2))

    def probed(self, edges: int, remaining: int) -> None:
        """The round probed candidates at ``edges`` edges; ``remaining`` kept ones were not."""
        self.pending = remaining > 0
        self.edges_read += edges

    def scored(self, cost: int | None) -> None:
        """The round's candidates were scored at ``cost`` edges (None: they would cost more
        than it could afford, and were not)."""
        self.pending = cost is None
        self.edges_read += cost or 0
