"""The reliability suite (docs/RELIABILITY.md): crash loop, soak, fuzz, slow clients and the
quota bypass, each against a real ``agentconsole serve --runtime sim`` subprocess on a loopback
port and a real DuckDB file, driven over real HTTP, bounded in count and time.

    .venv/bin/python -m benchmarks.reliability SCENARIO [options] [--json PATH]

Each scenario prints a table of its figures and PASS/FAIL per criterion, and exits 1 when a
criterion is missed. Modules import each other relatively: mypy checks ``benchmarks`` as a
folder of scripts, where this package is named ``reliability``.
"""
