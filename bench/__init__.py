"""pgbraid benchmarks: `./run bench [lexical|fuzzy|all]`. Timings live here, not in tests."""
