"""The stub server's state: canned programs, their JSON projections, actions and a live tick.

Every method returns exactly the JSON shapes of ``docs/API.md``. A :class:`StubWorld` is
deterministic for a given seed: :meth:`tick` advances a virtual clock and the same
``random.Random``, so two worlds built and ticked alike are equal. Thread-safe (one lock).
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from tests.ui.stub_gen import (
    BASE_T,
    TENANTS,
    StubProgram,
    critical_path,
    grow,
    history,
    make_program,
)

CAPACITY = {"hbm": 1_200_000, "dram": 8_000_000, "disk": 64_000_000}
BYTES_PER_TOKEN = 131_072  # Llama-3.1-8B, bf16: 2 x 32 layers x 8 KV heads x 128 x 2 bytes
BIG_PROGRAM = "prog-0001"
#: what ``serve --runtime sim --demo`` serves (``DEMO_SIM_MODELS``): each model's KV capacity
#: per tier, in tokens, as the simulator reports them (it has no disk tier)
DEMO_MODELS: dict[str, dict[str, int]] = {
    "llama-3.1-70b": {"hbm": 1_225_616, "dram": 2_516_582},
    "llama-3.1-8b": {"hbm": 912_619, "dram": 1_572_864},
}
#: the stub's opaque cursors: the program whose row ended the page
CURSOR_PREFIX = "after-"
#: the boost a server applies when the body names no amount (``BoostIn``)
BOOST_DEFAULT_S = 10.0
#: the names the stub's policy switch takes (a few of the server's registries')
POLICIES = ("cp-cache", "fcfs", "sjf")
KV_POLICIES = ("adaptive", "keep", "offload")


def infer_tool_ids(prog: StubProgram) -> None:
    """Rename ``prog``'s tool nodes as the server names the tool calls it infers for an agent on
    plain OpenAI tool calls (``tool-`` and 24 hex digits, ``server/live/toolcalls.py``)."""
    renamed = {
        node.node_id: "tool-" + hashlib.blake2b(node.node_id.encode(), digest_size=12).hexdigest()
        for node in prog.nodes
        if node.kind == "tool"
    }
    for node in prog.nodes:
        node.node_id = renamed.get(node.node_id, node.node_id)
        node.parents = [renamed.get(parent, parent) for parent in node.parents]


def demo_program_ids(world: StubWorld) -> None:
    """Rename ``world``'s programs as ``serve --demo`` names its agents' programs
    (``demo-4ade7d-0-seed-mix-s0-00008``: 31 characters, told apart by their tail)."""
    renamed = {}
    for index, prog in enumerate(world.programs.values()):
        prog.program_id = f"demo-4ade7d-0-seed-mix-s0-{index:05d}"
        renamed[prog.program_id] = prog
    world.programs = renamed
    world.pinned = set()


class StubWorld:
    """Programs, events and audit rows behind the stub server."""

    def __init__(
        self,
        programs: int = 40,
        *,
        seed: int = 7,
        big_nodes: int = 240,
        all_running: bool = False,
        models: dict[str, dict[str, int]] | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self.rng = random.Random(seed)
        self.now = BASE_T + 60.0
        self.programs: dict[str, StubProgram] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=20_000)
        self.seq = 0
        self.audit: list[dict[str, Any]] = []
        #: the operator routes refused to the tenant key (each an audit row on the server)
        self.refused_paths: list[str] = []
        #: False: ``/v1/whoami`` answers 404, as a server from before it (the consoles then
        #: learn a tenant's key from its first 403)
        self.publishes_whoami = True
        self.migrations = 37
        self.recomputes = 12
        self.draining = False
        self.policy = "cp-cache"
        self.kv_policy = "adaptive"
        #: several models served (:data:`DEMO_MODELS`): their capacities per tier; the tiers
        #: are then shown as the server merges them (``server/runtime/fleet/merge.py``)
        self.models = models
        # programs the live tick leaves alone (tests act on them; the big one stays big)
        self.pinned: set[str] = {BIG_PROGRAM}
        #: called with the ids of each program page served (tests change the world between
        #: two page reads of one listing, as programs ending and starting do)
        self.on_page: Callable[[list[str]], None] | None = None
        #: answer as a server older than the cursor does: no ``next_cursor``, offset only
        self.cursorless = False
        #: the ids of each listing served, in the order served, repeats kept: a listing starts
        #: with a page asked for without a cursor or an offset and goes on through the pages
        #: that continue it (whether paging served a row twice is read here, not from a
        #: console's rows, which are keyed by id)
        self.listings: list[list[str]] = []
        #: the gateway's tool intents (``GET /v1/operator/tool-calls`` rows): none in doubt
        #: unless a test puts some here
        self.tool_calls: list[dict[str, Any]] = []
        past: list[tuple[float, str, StubProgram, str, dict[str, Any]]] = []
        for index in range(programs):
            size = big_nodes if index == 1 else None
            forced = "running" if size or all_running else None
            prog = make_program(self.rng, index, size=size, state=forced)
            self.programs[prog.program_id] = prog
            past.extend(history(prog))
        past.sort(key=lambda item: item[0])
        for t, kind, prog, node_id, data in past:
            self._emit(kind, prog, node_id, data, t=t)
        self._record("system", "set_policy", "scheduler", {"policy": "cp-cache"}, "ok")

    # -- events and audit ------------------------------------------------------------
    def _emit(
        self,
        kind: str,
        prog: StubProgram,
        node_id: str,
        data: dict[str, Any],
        *,
        t: float | None = None,
    ) -> None:
        self.seq += 1
        self.events.append(
            {
                "seq": self.seq,
                "t": round(self.now if t is None else t, 3),
                "kind": kind,
                "program_id": prog.program_id,
                "node_id": node_id,
                "attempt": 1,
                "tenant": prog.tenant,
                "data": data,
            }
        )

    def _record(self, actor: str, action: str, target: str, args: Any, result: Any) -> None:
        self.audit.append(
            {
                "ts": round(self.now, 3),
                "actor": actor,
                "action": action,
                "target": target,
                "args": args,
                "result": result,
            }
        )

    def events_after(self, since: int | None, limit: int = 500) -> tuple[int, list[Any]]:
        """Events with ``seq > since`` (the last ``limit`` when ``since`` is None)."""
        with self._lock:
            if since is None:
                return self.seq, []
            out = [e for e in self.events if e["seq"] > since][:limit]
            return (out[-1]["seq"] if out else since), out

    # -- projections -----------------------------------------------------------------
    def summary(self, prog: StubProgram) -> dict[str, Any]:
        """The API's ``ProgramSummary``."""
        done = sum(1 for n in prog.nodes if n.state == "done")
        service = sum(n.seconds("prefill", "decode") for n in prog.nodes)
        path = set(critical_path(prog))
        idle = sum(n.seconds("queue", "kv") for n in prog.nodes if n.node_id in path)
        end = prog.finished_at or self.now
        slack = None
        if prog.deadline is not None and prog.state == "running":
            slack = round(prog.deadline - end - (prog.planned - done) * 1.5, 3)
        tokens = sum(n.prompt_tokens - n.cached_tokens + n.output_tokens for n in prog.nodes)
        return {
            "program_id": prog.program_id,
            "tenant": prog.tenant,
            "state": prog.state,
            "created_at": prog.created_at,
            "finished_at": prog.finished_at,
            "deadline": prog.deadline,
            "labels": {"workload": prog.workload},
            "nodes_done": done,
            "nodes_known": len(prog.nodes),
            "attained_service_s": round(service, 3),
            "priority_key": [0 if prog.boost else 1, round(service - prog.boost, 3)],
            "critical_path_idle_s": round(idle, 3),
            "deadline_slack_s": slack,
            "tokens_used": tokens,
            "tool_calls": sum(1 for n in prog.nodes if n.kind == "tool"),
            "branches": 1,
        }

    def timeline_now(self) -> float:
        """The moment the programs' timelines reach (every span, open ones as far as the stub
        ran them): a console's "now" for drawing open spans as the stub recorded them. The
        world's :attr:`now` stays the summaries' clock (slack, rates), as it always was."""
        with self._lock:
            return max(n.end() for p in self.programs.values() for n in p.nodes)

    def program_json(self, program_id: str) -> dict[str, Any] | None:
        """The API's ``Program`` or None if unknown."""
        with self._lock:
            prog = self.programs.get(program_id)
            if prog is None:
                return None
            body = self.summary(prog)
            edges = [[p, n.node_id] for n in prog.nodes for p in n.parents]
            body.update(
                quotas={"wall_time_s": 600, "tokens": 2_000_000, "tool_calls": 200, "branches": 4},
                nodes=[n.to_json() for n in prog.nodes],
                edges=edges,
                critical_path=critical_path(prog),
                kv=self._placement(prog, full=True),
            )
            return body

    def list_json(
        self,
        state: str | None,
        tenant: str | None,
        limit: int,
        offset: int,
        cursor: str | None = None,
    ) -> Any:
        """``GET /v1/programs``, in the order programs were made (the stub's sort key), paged
        by keyset like the server: ``cursor`` continues strictly after the program it names,
        so programs that end or start between reads shift nothing. ``ValueError`` for a
        cursor this stub did not write. :attr:`on_page` sees each page's ids as served."""
        with self._lock:
            rows = [
                p
                for p in self.programs.values()
                if (state is None or p.state == state) and (tenant is None or p.tenant == tenant)
            ]
            total = len(rows)
            if cursor is not None:
                after = cursor.removeprefix(CURSOR_PREFIX)
                if not cursor.startswith(CURSOR_PREFIX) or after not in self.programs:
                    raise ValueError(f"not a cursor of this stub: {cursor!r}")
                # programs are never removed from the world: the named one keeps its place
                # even once it left the filter
                position = {pid: i for i, pid in enumerate(self.programs)}
                rows = [p for p in rows if position[p.program_id] > position[after]]
            page = rows[offset : offset + limit]
            more = len(rows) > offset + limit
            next_cursor = CURSOR_PREFIX + page[-1].program_id if page and more else None
            body = {
                "programs": [self.summary(p) for p in page],
                "total": total,
                "next_cursor": next_cursor,
            }
            if self.cursorless:
                del body["next_cursor"]
            served = [p.program_id for p in page]
            if (cursor is None and offset == 0) or not self.listings:
                self.listings.append([])
            self.listings[-1].extend(served)
            if self.on_page is not None:
                self.on_page(served)
            return body

    def touch(self, program_id: str) -> None:
        """Emit news of ``program_id`` that changes none of its rows (a busy program's next
        call scheduled): the feed carries it as it carries any of the program's events."""
        with self._lock:
            self._emit("call.scheduled", self.programs[program_id], "n0", {})

    def start_program(self) -> str:
        """Make a new running program (as a real agent would between two reads); its id."""
        with self._lock:
            prog = make_program(self.rng, len(self.programs), state="running")
            self.programs[prog.program_id] = prog
            self._emit("program.created", prog, "", {})
            return prog.program_id

    def _placement(self, prog: StubProgram, *, full: bool = False) -> dict[str, int]:
        tiers = {"hbm": 0, "dram": 0, "disk": 0}
        for node in prog.nodes:
            if node.kv_tier and prog.state == "running":
                tiers[node.kv_tier] += node.prompt_tokens // 4
        if full:
            return {f"{tier}_tokens": tokens for tier, tokens in tiers.items()}
        return {tier: tokens for tier, tokens in tiers.items() if tokens}

    def tiers_json(self) -> dict[str, Any]:
        """Occupancy per tier."""
        used = {"hbm": 0, "dram": 0, "disk": 0}
        for prog in self.programs.values():
            for tier, tokens in self._placement(prog).items():
                used[tier] += tokens
        if self.models:
            return self._model_tiers(used)
        return {
            tier: {
                "used_tokens": min(used[tier], CAPACITY[tier]),
                "capacity_tokens": CAPACITY[tier],
                "used_bytes": min(used[tier], CAPACITY[tier]) * BYTES_PER_TOKEN,
            }
            for tier in CAPACITY
        }

    def _model_tiers(self, used: dict[str, int]) -> dict[str, Any]:
        """The tiers of several models as the server merges them: each model's own under
        ``<tier>.<model>`` and each tier summed over the models. Every program runs on the last
        model (the demo's agents all ask the small one) while the others stay empty; under load
        its HBM is full (its prefix cache keeps what fits until evicted), as the operator saw:
        the sum reads 43% with the one model in use at 100%."""
        assert self.models
        busy = list(self.models)[-1]
        out: dict[str, Any] = {}
        summed: dict[str, dict[str, int]] = {}
        for model, capacities in self.models.items():
            for tier, capacity in capacities.items():
                tokens = 0
                if model == busy:
                    tokens = capacity if tier == "hbm" else min(used[tier], capacity)
                usage = {
                    "used_tokens": tokens,
                    "capacity_tokens": capacity,
                    "used_bytes": tokens * BYTES_PER_TOKEN,
                }
                out[f"{tier}.{model}"] = usage
                total = summed.setdefault(tier, dict.fromkeys(usage, 0))
                for key, value in usage.items():
                    total[key] += value
        return {**out, **summed}

    def overview_json(self) -> dict[str, Any]:
        """``GET /v1/overview``."""
        with self._lock:
            counts = {"running": 0, "finished": 0, "failed": 0, "cancelled": 0}
            durations = []
            for prog in self.programs.values():
                counts[prog.state] = counts.get(prog.state, 0) + 1
                if prog.finished_at is not None:
                    durations.append(prog.finished_at - prog.created_at)
            durations.sort()
            elapsed = max(1.0, self.now - BASE_T)

            def pct(q: float) -> float | None:
                return round(durations[int(q * (len(durations) - 1))], 3) if durations else None

            running = [p for p in self.programs.values() if p.state == "running"]
            return {
                "policy": self.policy,
                "kv_policy": self.kv_policy,
                "runtime": "sim:H200-141GB/llama-3.1-8b",
                "draining": self.draining,
                "programs": counts,
                "throughput_programs_per_s": round(
                    (counts["finished"] + counts["failed"]) / elapsed, 3
                ),
                "goodput_programs_per_s": round(counts["finished"] / elapsed, 3),
                "e2e_p50_s": pct(0.5),
                "e2e_p95_s": pct(0.95),
                "e2e_p99_s": pct(0.99),
                "queue_depth": sum(1 for p in running for n in p.nodes if n.state == "ready"),
                "running_calls": sum(
                    1 for p in running for n in p.nodes if n.state == "running" and n.kind == "llm"
                ),
                "kv": self.tiers_json(),
                "prefix_hit_tokens": sum(
                    n.cached_tokens for p in self.programs.values() for n in p.nodes
                ),
                "ghost_tokens": 0,
            }

    def tenants_json(self) -> dict[str, Any]:
        """``GET /v1/tenants``."""
        with self._lock:
            rows = []
            for index, tenant in enumerate(TENANTS):
                progs = [p for p in self.programs.values() if p.tenant == tenant]
                tokens = sum(self.summary(p)["tokens_used"] for p in progs)
                waits = [n.seconds("queue") for p in progs for n in p.nodes]
                rows.append(
                    {
                        "tenant": tenant,
                        "programs": len(progs),
                        "running": sum(1 for p in progs if p.state == "running"),
                        "slowdown": round(1.2 + 0.45 * index, 2),
                        "starvation": round(0.05 + 0.11 * index, 3),
                        "max_queue_wait_s": round(max(waits, default=0.0), 3),
                        "tokens_used": tokens,
                        "quota_use": {
                            "tokens": round(min(1.0, tokens / 5e7), 3),
                            "tool_calls": 0.1 * (index + 1),
                        },
                        "limits": {
                            "tokens_per_minute": 200_000 if index == 0 else None,
                            "concurrent_programs": None,
                            "stored_bytes": None,
                        },
                        "tokens_last_minute": 12_000 * (index + 1),
                        "stored_bytes": 3_500_000 * (index + 1),
                    }
                )
            return {"tenants": rows}

    def door_json(self) -> dict[str, Any]:
        """``GET /v1/operator/door``: each tenant's kinds' runs and peaks (a tenant's peak
        grows with its place, so a row showing another tenant's peak is caught)."""
        kinds = {"coding": (240.0, 61_500.0), "chat": (12.5, 3_200.0)}
        return {
            "enabled": True,
            "order": "shortest-first",
            "budget_tokens": 1_200_000,
            "reserved_tokens": 150_000,
            "predicted_tokens": 950_000,
            "held_tokens": 880_000,
            "waiting": 3,
            "waited_total": 17,
            "boundary_parks": 2,
            "runs": [
                {"tenant": tenant, "kind": kind, "expected_run_s": run * (1 + 0.2 * index)}
                for index, tenant in enumerate(TENANTS)
                for kind, (run, _) in kinds.items()
            ],
            "peaks": [
                {"tenant": tenant, "kind": kind, "peak_private_tokens": peak * (1 + index)}
                for index, tenant in enumerate(TENANTS)
                for kind, (_, peak) in kinds.items()
            ],
        }

    def kv_json(self) -> dict[str, Any]:
        """``GET /v1/kv``."""
        with self._lock:
            retained = []
            placement = {}
            for prog in self.programs.values():
                spots = self._placement(prog)
                if spots:
                    placement[prog.program_id] = spots
                last = prog.nodes[-1] if prog.nodes else None
                if prog.state == "running" and last is not None and last.kind == "tool":
                    tier, tokens = max(spots.items(), key=lambda kv: kv[1], default=("hbm", 0))
                    retained.append(
                        {
                            "program_id": prog.program_id,
                            "tenant": prog.tenant,
                            "tokens": tokens,
                            "tier": tier,
                            "until": round(last.end() + 2.0, 3),
                        }
                    )
            return {
                "tiers": self.tiers_json(),
                "retained": retained,
                "migrations": self.migrations,
                "recomputes": self.recomputes,
                "placement": placement,
            }

    def audit_json(self, limit: int) -> dict[str, Any]:
        """``GET /v1/operator/audit``, newest first."""
        with self._lock:
            return {"actions": list(reversed(self.audit))[:limit]}

    def tool_calls_json(self, state: str | None, limit: int = 100) -> dict[str, Any]:
        """``GET /v1/operator/tool-calls``: the intents in ``state``, most recently changed
        first."""
        with self._lock:
            rows = [c for c in self.tool_calls if state is None or c["state"] == state]
            rows.sort(key=lambda c: -float(c["updated_at"]))
            return {"tool_calls": rows[:limit]}

    # -- actions -----------------------------------------------------------------------
    def act(self, action: str, program_id: str, args: dict[str, Any]) -> tuple[int, Any]:
        """Apply an operator action; returns (HTTP status, body)."""
        with self._lock:
            prog = self.programs.get(program_id)
            if prog is None:
                return 404, {"error": {"type": "not_found", "message": f"no program {program_id}"}}
            if prog.state != "running":
                message = f"program {program_id} is {prog.state}"
                return 409, {"error": {"type": "conflict", "message": message}}
            active = [n for n in prog.nodes if n.state in ("running", "ready")]
            if action == "cancel":
                prog.state = "cancelled"
                prog.finished_at = self.now
                for node in active:
                    node.state = "cancelled"
                    node.kv_tier = None
                self._emit("program.cancelled", prog, "", {"by": "operator"})
                result: dict[str, Any] = {
                    "program_id": program_id,
                    "state": "cancelled",
                    "aborted_calls": [n.node_id for n in active if n.kind == "llm"],
                    "interrupted_tools": [n.node_id for n in active if n.kind == "tool"],
                    "flagged_tools": [],
                    "running_tools": [],
                }
            elif action == "preempt":
                calls = [n for n in active if n.kind == "llm" and n.state == "running"]
                for node in calls:
                    node.state = "ready"
                    self._emit("call.preempted", prog, node.node_id, {"by": "operator"})
                result = {"program_id": program_id, "preempted_calls": [n.node_id for n in calls]}
            else:
                # as the server: 10 s of policy key by default, the amount applied answered
                amount = float(args.get("amount", BOOST_DEFAULT_S))
                prog.boost += amount
                queued = [n.node_id for n in active if n.kind == "llm" and n.state == "ready"]
                result = {"program_id": program_id, "boost": amount, "reranked_calls": queued}
            self._record("operator", action, program_id, args, "ok")
            return 200, result

    def cancel_node(
        self, program_id: str, node_id: str, *, operator: bool = True
    ) -> tuple[int, Any]:
        """``POST /v1/programs/{id}/nodes/{node_id}/cancel`` as the server answers it: the node
        and its descendants not yet ended are cancelled and ``withdrawn`` (a ``node.cancelled``
        each), the program runs on; an operator's is audited as ``cancel_node``. 404 for an
        unknown program or node, 409 for an ended program or a node that ended otherwise; a
        node cancelled so already answers 200 listing nothing."""
        with self._lock:
            prog = self.programs.get(program_id)
            node = (
                None
                if prog is None
                else next((n for n in prog.nodes if n.node_id == node_id), None)
            )
            if prog is None or node is None:
                what = f"program {program_id!r}" if prog is None else f"node {node_id!r}"
                return 404, {"error": {"type": "not_found", "message": f"{what} not found"}}
            if prog.state != "running":
                message = f"program {program_id!r} is {prog.state}"
                return 409, {"error": {"type": "conflict", "message": message}}
            if node.state in ("done", "failed", "cancelled") and not node.withdrawn:
                message = f"node {node_id!r} is {node.state}"
                return 409, {"error": {"type": "conflict", "message": message}}
            below = {node_id}
            for other in prog.nodes:  # creation order is topological: parents come first
                if set(other.parents) & below:
                    below.add(other.node_id)
            ended = ("done", "failed", "cancelled")
            changed = (
                []
                if node.withdrawn
                else [n for n in prog.nodes if n.node_id in below and n.state not in ended]
            )
            active = [n for n in changed if n.state in ("running", "ready")]
            for each in changed:
                each.state = "cancelled"
                each.withdrawn = True
                each.kv_tier = None
                data = {
                    "reason": "cancelled",
                    "withdrawn": True,
                    "by": "operator" if operator else "user",
                }
                self._emit("node.cancelled", prog, each.node_id, data)
            result: dict[str, Any] = {
                "program_id": program_id,
                "node_id": node_id,
                "state": "cancelled",
                "program_state": prog.state,
                "cancelled_nodes": [n.node_id for n in changed],
                "aborted_calls": [
                    f"{program_id}/{n.node_id}/{n.attempts:04d}" for n in active if n.kind == "llm"
                ],
                "interrupted_tools": [n.node_id for n in active if n.kind == "tool"],
                "flagged_tools": [],
                "running_tools": [],
            }
            if operator:
                self._record("operator", "cancel_node", program_id, {"node_id": node_id}, "ok")
            return 200, result

    def policy_choices_json(self) -> dict[str, Any]:
        """``GET /v1/operator/policy``: the names in force and those the switch accepts."""
        with self._lock:
            return {
                "policy": self.policy,
                "kv_policy": self.kv_policy,
                "policies": list(POLICIES),
                "kv_policies": list(KV_POLICIES),
            }

    def note_refusal(self, path: str) -> None:
        """An operator route refused to the tenant key: the server writes an audit row for it."""
        with self._lock:
            self.refused_paths.append(path)

    def set_policy(self, args: dict[str, Any]) -> tuple[int, Any]:
        """``POST /v1/operator/policy``: as the server, an unknown name is refused (422) with
        the names it knows, before anything is switched; the answer is the names in force."""
        with self._lock:
            for field, known, what in (
                ("policy", POLICIES, "policy"),
                ("kv_policy", KV_POLICIES, "tool-wait policy"),
            ):
                name = args.get(field)
                if name is not None and name not in known:
                    message = f"unknown {what} {name!r}; choose from {', '.join(known)}"
                    error = {"type": "invalid_request", "message": message, "field": field}
                    return 422, {"error": error}
            self.policy = args.get("policy") or self.policy
            self.kv_policy = args.get("kv_policy") or self.kv_policy
            self._record("operator", "policy", "", args, "ok")
            return 200, {"policy": self.policy, "kv_policy": self.kv_policy}

    # -- live ------------------------------------------------------------------------
    def tick(self, dt: float = 0.1, steps: int = 5) -> None:
        """Advance the clock by ``dt`` and move ``steps`` running programs one step on."""
        with self._lock:
            self.now += dt
            running = [
                p
                for p in self.programs.values()
                if p.state == "running" and p.program_id not in self.pinned
            ]
            for prog in self.rng.sample(running, min(steps, len(running))):
                for node in prog.nodes:
                    if node.state in ("running", "ready"):
                        node.state = "done"
                        kind = "call.finished" if node.kind == "llm" else "tool.finished"
                        self._emit(kind, prog, node.node_id, {"tokens": node.output_tokens})
                if len(prog.nodes) >= prog.planned:
                    prog.state = "finished"
                    prog.finished_at = self.now
                    self._emit("program.finished", prog, "", {"ok": True})
                    replacement = make_program(self.rng, len(self.programs), state="running")
                    self.programs[replacement.program_id] = replacement
                    self._emit("program.created", replacement, "", {})
                    continue
                grow(self.rng, prog, finish=False)
                node = prog.nodes[-1]
                kind = "call.scheduled" if node.kind == "llm" else "tool.started"
                self._emit(kind, prog, node.node_id, {"tool": node.tool or ""})
