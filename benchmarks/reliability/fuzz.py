"""fuzz: schemathesis against the live server's published OpenAPI schema (T3 of the test plan).

Every operation of ``/schema/openapi.json`` (core routes, the tool gateway, operator routes)
gets ``--max-examples`` generated requests per generation mode (schema-valid and invalid),
each sent with a tenant key and with an operator key (a case whose invalid part is its
headers goes as generated). Each answer must pass schemathesis's checks: no 5xx, a documented
status, content type, headers and body schema (the one error shape), and invalid data
rejected. ``--time-limit`` stops starting new operations.

The contract test (``tests/server/api/test_api_contract.py``) runs the same checks on the
in-process server and also demands that schema-valid requests be accepted, apart from the
documented semantic refusals; this scenario runs the real ``serve`` for longer.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.reporting import with_reporter
from schemathesis.core.parameters import ParameterLocation
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode

# the contract test's checks and query handling: both hold the server to one contract
from tests.server.api.test_api_contract import CHECKS, _null_as_text

from .report import Report
from .serve import OPERATOR_KEY, TENANT_KEY, start_serve

#: ``time_scale`` 0: generation is free; ``max_tokens_limit`` keeps generated calls small
SETTINGS = {"limits": {"max_tokens_limit": 256}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-examples", type=int, default=50, help="per operation and mode")
    parser.add_argument("--time-limit", type=float, default=900.0, help="seconds")


class Tally:
    """Requests, statuses and check failures by title (with one example each)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.examples: dict[str, str] = {}

    def exercise(self, case: Any, url: str) -> None:
        self.counts[f"{case.meta.generation.mode.value} cases"] += 1
        if case.query:  # requests drops None from a query; send what the case means: "null"
            case.query = {name: _null_as_text(value) for name, value in case.query.items()}
        header = case.meta.components.get(ParameterLocation.HEADER)
        negative_headers = header is not None and header.mode is GenerationMode.NEGATIVE
        for key in (None,) if negative_headers else (TENANT_KEY, OPERATOR_KEY):
            auth = {"Authorization": f"Bearer {key}"} if key else None
            response = case.call(base_url=url, headers=auth)
            self.counts["requests"] += 1
            self.counts[f"{response.status_code // 100}xx"] += 1
            try:
                case.validate_response(response, checks=CHECKS, headers=auth)
            except AssertionError as error:  # schemathesis's FailureGroup and Failure
                for failure in getattr(error, "exceptions", [error]):
                    title = str(getattr(failure, "title", type(failure).__name__))
                    self.failures[title] += 1
                    where = f"{case.operation.label} -> {response.status_code}"
                    self.examples.setdefault(title, where)


def _explore(operation: Any, mode: GenerationMode, examples: int, tally: Tally, url: str) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(operation.as_strategy(generation_mode=mode))
    def explore(case: Any) -> None:
        tally.exercise(case, url)

    explore()


def run(args: argparse.Namespace, command: str) -> Report:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="reliability-fuzz-"))
    server = start_serve(workdir / "fuzz.duckdb", SETTINGS, time_scale=0.0)
    tally, operations, skipped, empty, errors = Tally(), 0, 0, 0, Counter[str]()
    since = time.monotonic()
    try:
        config = schemathesis.Config.from_dict(
            {
                "generation": {"max-examples": args.max_examples, "allow-extra-parameters": False},
                "max-stream-events": 1,  # the event feed never ends: its first frame is enough
                "request-timeout": 20,
            }
        )
        schema = schemathesis.openapi.from_url(f"{server.url}/schema/openapi.json", config=config)
        for result in schema.get_all_operations():
            if not isinstance(result, Ok) or time.monotonic() - since > args.time_limit:
                skipped += 1
                continue
            operations += 1
            for mode in GenerationMode:
                try:
                    with with_reporter(lambda _: None):  # no "reproduce with @seed" lines
                        _explore(result.ok(), mode, args.max_examples, tally, server.url)
                except Unsatisfiable:  # nothing to make invalid (an operation without input)
                    empty += 1
                except Exception as error:  # a generation problem, not an answer's
                    errors[type(error).__name__] += 1
    finally:
        code = server.stop()
    report = Report("fuzz", command)
    f = report.figures
    f["operations (skipped)"] = f"{operations} ({skipped})"
    f["cases: valid / invalid"] = (
        f"{tally.counts['positive cases']} / {tally.counts['negative cases']}"
    )
    f["operation x mode with nothing to generate"] = empty
    f["requests (two keys each)"] = tally.counts["requests"]
    f["statuses"] = ", ".join(f"{k}: {tally.counts[k]}" for k in ("2xx", "4xx", "5xx"))
    f["seconds"] = round(time.monotonic() - since, 1)
    for title, n in tally.failures.most_common():
        f[f"failed check: {title}"] = f"{n} (e.g. {tally.examples[title]})"
    report.check("no 5xx", tally.counts["5xx"] == 0, tally.counts["5xx"])
    schema_failures = sum(tally.failures.values())
    report.check(
        "no schema violation (status, content type, headers, body, invalid data accepted)",
        schema_failures == 0,
        schema_failures,
    )
    report.check(
        "every operation explored",
        not skipped and not errors,
        f"{skipped} skipped, errors {dict(errors)}",
    )
    report.check("clean stop", code == 0, f"exit status {code}")
    return report
