"""Full-text's zero-row explanation, paired: the shipped statement against the one it
replaced (tsvector_to_array and every token compared with every lexeme), alternating
query by query in one process on SciFact (``ensure_scifact``), every explanation
compared. Run: PYTHONPATH=src:. python -m bench.fulltext_explain"""

from __future__ import annotations

import json
import os

from bench.common import connect, percentiles, table
from bench.lexical import ensure_scifact, scifact_queries
from pgbraid.strategies import fulltext

BEFORE = """
SELECT ARRAY(SELECT t FROM unnest(%(tokens)s::text[]) AS t WHERE t = ANY(l.lexemes)) AS present,
       count(*) AS fragments
FROM pgbraid.fragments f
     CROSS JOIN LATERAL (SELECT tsvector_to_array(f.tsv) AS lexemes OFFSET 0) AS l
WHERE {scope} AND f.tsv @@ %(any_token)s::tsquery
GROUP BY 1
"""


def main() -> None:
    shipped = fulltext._PATTERNS
    sides = {"shipped": shipped, "before (tsvector_to_array)": BEFORE}
    with connect() as client:
        pipeline = ensure_scifact(client)
        queries = [text for _, text in scifact_queries()[0]]
        ms: dict[str, list[float]] = {name: [] for name in sides}
        same = zero = 0
        for i, query in enumerate(queries):
            order = list(sides.items()) if i % 2 else list(sides.items())[::-1]
            details = {}
            for name, statement in order:
                fulltext._PATTERNS = statement
                leg = client.search(pipeline, query, type="fulltext").trace.retrievers[0]
                ms[name].append(leg.ms)
                details[name] = json.dumps(leg.details, sort_keys=True)
            fulltext._PATTERNS = shipped
            same += len(set(details.values())) == 1
            zero += "restricting_tokens" in details["shipped"]
        rows = [[name, *percentiles(values)] for name, values in ms.items()]
        table(f"fulltext on SciFact, {len(queries)} queries ({zero} with zero rows, explained); "
              f"identical details {same}/{len(queries)}; load {os.getloadavg()[0]:.1f}",
              ["statement", "trace ms p50", "p95"], rows)


if __name__ == "__main__":
    main()
