"""Live fetch: what a live source costs a search, paired and interleaved in one process.

Two pipelines hold the same CISA KEV records (the first 1,000 of the catalogue;
text = id, vendor, product and description): ``plain`` has no live source,
``live`` has one pointing at a server on loopback answering the other records.
Every query runs on both in turn, the order rotating. Three kinds of query:

- a CVE id the corpus holds (the held check runs, nothing is fetched);
- a question without an identifier (nothing to check);
- a CVE id the corpus lacks (``live`` fetches, stores, searches again; ``plain``
  answers from the corpus), each id once: its second search is the held case.

    python -m bench.live [--queries 150]
"""

from __future__ import annotations

import argparse
import gzip
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from .common import DATA, connect, percentiles, table

KEV = DATA / "cisa_kev" / "known_exploited_vulnerabilities.json.gz"
HELD = 1000


def _records() -> list[dict]:
    return json.load(gzip.open(KEV))["vulnerabilities"]


def _server(remote: dict[str, dict]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            record = remote.get(unquote(self.path.rsplit("/", 1)[-1]))
            body = json.dumps({"vulnerabilities": [record] if record else []}).encode()
            self.send_response(200 if record else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def run(queries: int = 150) -> None:
    records = _records()
    held, remote = records[:HELD], {r["cveID"]: r for r in records[HELD:]}
    httpd = _server(remote)
    live = {"url": f"http://127.0.0.1:{httpd.server_port}/kev/{{identifier}}",
            "allow_hosts": ["127.0.0.1"], "rate_limit": 10_000, "records": "vulnerabilities",
            "fields": {"id": "cveID", "title": "vulnerabilityName", "text": "shortDescription"}}
    suffix = uuid.uuid4().hex[:6]
    names = {"plain": f"bench-kev-plain-{suffix}", "live": f"bench-kev-live-{suffix}"}
    docs = [{"id": r["cveID"], "title": r["vulnerabilityName"],
             "text": f"{r['cveID']} ({r['vendorProject']} {r['product']}): {r['shortDescription']}"}
            for r in held]
    with connect() as client:
        client.create_pipeline(names["plain"], embedder="none")
        client.create_pipeline(names["live"], embedder="none", live=live)
        for name in names.values():
            client.ingest(name, docs)
        try:
            kinds = {
                "held CVE id": [r["cveID"] for r in held[:queries]],
                "question, no identifier": [f"which {r['vendorProject']} product is exploited?"
                                            for r in held[:queries]],
                "missing CVE id (fetched)": list(remote)[:queries],
            }
            rows = []
            for kind, texts in kinds.items():
                samples = {"plain": [], "live": []}
                for i, text in enumerate(texts):
                    for which in (("plain", "live") if i % 2 == 0 else ("live", "plain")):
                        began = time.perf_counter()
                        client.search(names[which], text, type="auto")
                        samples[which].append((time.perf_counter() - began) * 1000)
                plain, fetched = percentiles(samples["plain"]), percentiles(samples["live"])
                rows.append([kind, len(texts), *plain, *fetched, fetched[0] / plain[0]])
            table("live fetch: search latency, ms (paired, interleaved)",
                  ["query", "n", "plain p50", "plain p95", "live p50", "live p95",
                   "live / plain (p50)"], rows)
        finally:
            for name in names.values():
                client.delete_pipeline(name)
            httpd.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.live")
    parser.add_argument("--queries", type=int, default=150)
    run(parser.parse_args().queries)


if __name__ == "__main__":
    main()
