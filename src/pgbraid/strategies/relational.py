"""relational: the documented no-op. It returns nothing and sends nothing.

Kept so that a caller (or a cascade) can name it: relational questions are
answered by the user's own SQL, not by a retrieval strategy.
"""

from __future__ import annotations

import psycopg

from ..models import SearchRequest
from ..pipelines import Pipeline
from ..scope import Scope
from .base import Context, Outcome, Strategy

NO_OP = "relational is a documented no-op: it returns nothing and touches nothing"


class Relational(Strategy):
    name = "relational"
    description = NO_OP
    touches_database = False

    def run(self, conn: psycopg.Connection | None, pipeline: Pipeline | None,
            request: SearchRequest, scope: Scope | None, k: int, context: Context) -> Outcome:
        return Outcome([], {"explanation": NO_OP})
