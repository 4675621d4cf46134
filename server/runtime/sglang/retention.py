"""Tool-wait KV decisions on SGLang's real radix cache: the ``agentconsole`` eviction strategy.

Mechanism (runs in the scheduler process, Python tree core only):

* :func:`install_strategy` registers an eviction strategy named ``agentconsole`` with SGLang
  (``_EVICTION_POLICY_FACTORIES``, a private dict, plus the public choices list), selected with
  ``--radix-eviction-policy agentconsole``. SGLang's default Rust tree core rejects unknown
  strategy names, so the adapter runs the engine with the Python core
  (``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python``).
* The strategy's victim order is ``(class, last_access_time)``: class 2 for nodes a program in
  tool wait keeps (until its retention deadline), 1 for ordinary nodes, 0 for nodes a
  ``recompute`` or ``offload`` decision marked. Without hints it is exactly LRU. Retention is
  *soft*: kept nodes are evicted last, but they are evicted when nothing else is left, and the
  mark decays at its deadline (the design's "priority that decays after the predicted wait").
* :func:`mark_context` applies a decision: it matches the program's last context (token ids
  recorded when its request ran) in the tree and marks the nodes on that path. ``keep`` marks
  the whole path (shared prefix included: the program needs it back); ``recompute``/``offload``
  mark only the program's exclusive suffix (below the deepest node other sequences branch
  from), so a shared system prompt is never pushed out by one program's decision. When the
  program's next call arrives the adapter sends ``release``: its marks end, a kept path or
  an evict-first suffix alike (else contexts of programs that moved on would stay protected
  until their deadline and crowd out active ones, or what survived of a dropped context would
  go first while the new call extends it); a program that ends releases only a ``keep``.

Why not ``--radix-eviction-policy priority`` with request priorities: a node's priority is the
maximum over the requests that inserted it, fixed when the request finishes, while the
tool-wait decision is taken *after* the call finished and must decay; and SGLang also reads
``Req.priority`` for preemption. ``offload`` on a GPU with HiCache: marked nodes are evicted
first, and eviction demotes backed-up nodes to host memory, so offload happens on demand.
Without HiCache (always on CPU) there is no host tier and ``offload`` behaves as ``recompute``.
The hints' actions are :class:`CacheAction` values plus :data:`RELEASE`, written by the adapter
(``live_control.py``) and read here from ``control.json``: anything else is a bug on one side,
so :func:`mark_for` raises rather than guess (a guess of "evict first" would silently lose a
context).
"""

from __future__ import annotations

import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, assert_never

from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sglang import symbols
from agentconsole.server.runtime.sglang.control import RetentionHint

STRATEGY_NAME = "agentconsole"
#: attribute the plugin sets on Python tree-core nodes: wall-clock retention deadline
UNTIL_ATTR = "_agentconsole_until"
#: attribute with each program's own mark of the node (``UNTIL_ATTR`` is what they add up
#: to): a path two programs share keeps one's ``keep`` whatever the other drops or releases
MARKS_ATTR = "_agentconsole_marks"
DROPPED = float("-inf")
CLASS_DROPPED, CLASS_NORMAL, CLASS_KEPT = 0, 1, 2


def node_class(until: float | None, now: float) -> int:
    """Eviction class of a node with retention mark ``until`` at wall time ``now``."""
    if until is None:
        return CLASS_NORMAL
    if until == DROPPED:
        return CLASS_DROPPED
    return CLASS_KEPT if until > now else CLASS_NORMAL


#: the hint that ends a program's marks when it is back or ended: not a tool-wait decision, so
#: not a ``CacheAction``; its context becomes ordinary LRU cache again
RELEASE: Final = "release"


def mark_for(action: str, until: float) -> float | None:
    """The node mark of a hint: its deadline ``until`` for ``keep``, ``DROPPED`` (evicted
    first) for ``offload`` and ``recompute``, None (ordinary LRU) for :data:`RELEASE`.
    ``ValueError`` for any other action."""
    decision = _decision(action)
    if decision is None:
        return None
    match decision:
        case CacheAction.KEEP:
            return until
        case CacheAction.OFFLOAD | CacheAction.RECOMPUTE:
            return DROPPED
        case _:
            assert_never(decision)


def marks_whole_path(action: str) -> bool:
    """Whether a hint marks the program's whole cached path (``keep``, :data:`RELEASE`) or only
    its exclusive suffix (``offload``, ``recompute``: a shared prefix is not pushed out by one
    program's decision). ``ValueError`` for an unknown action."""
    return _decision(action) in (None, CacheAction.KEEP)


def _decision(action: str) -> CacheAction | None:
    """The decision ``action`` names (None for :data:`RELEASE`)."""
    if action == RELEASE:
        return None
    try:
        return CacheAction(action)
    except ValueError:
        known = ", ".join([*CacheAction, RELEASE])
        raise ValueError(f"unknown retention action {action!r} (known: {known})") from None


def install_strategy(clock: Callable[[], float] = time.time) -> bool:
    """Register the ``agentconsole`` eviction strategy with SGLang (idempotent).

    Changes SGLang's strategy table and choices list in this process. Returns False when the
    symbols are missing (another SGLang version): the engine then refuses the policy name at
    start-up, which the adapter reports.
    """
    try:
        base = symbols.load(symbols.EVICTION_STRATEGY)
        factories = symbols.load(symbols.EVICTION_FACTORIES)
        choices = symbols.load(symbols.EVICTION_CHOICES)
    except (ImportError, AttributeError):
        return False

    class RetentionStrategy(base):  # type: ignore[misc,valid-type]  # SGLang's ABC, typed Any
        def get_priority(self, node: Any) -> tuple[int, float]:
            until = getattr(node, UNTIL_ATTR, None)
            return (node_class(until, clock()), node.last_access_time)

    factories[STRATEGY_NAME] = RetentionStrategy
    if STRATEGY_NAME not in choices:
        choices.append(STRATEGY_NAME)
    return True


@dataclass(slots=True)
class Context:
    """The token ids and cache namespace of a program's most recent request (by reference:
    SGLang appends decoded tokens to ``output`` in place)."""

    origin: Any
    output: Any
    extra_key: str | None
    cache_salt: str | None

    def token_ids(self) -> Any:
        ids = array("q", self.origin)
        ids.extend(self.output)
        return ids


def radix_key(ctx: Context) -> Any:
    """SGLang's radix key of ``ctx`` (its tokens in its cache namespace)."""
    return radix_key_of(ctx.token_ids(), ctx)


def radix_key_of(token_ids: Any, ctx: Context) -> Any:
    """SGLang's radix key of ``token_ids`` (``ctx``'s, already built) in ``ctx``'s namespace."""
    key_cls = symbols.load(symbols.RADIX_KEY)
    return key_cls(token_ids=token_ids, extra_key=ctx.extra_key, cache_salt=ctx.cache_salt)


def set_mark(node: Any, owner: str, until: float | None) -> None:
    """Record ``owner``'s mark ``until`` on ``node`` (None: it has none now) and set the
    node's eviction mark to what the programs' marks add up to: the latest ``keep`` deadline
    when any program keeps it; ``DROPPED`` when programs mark it and none keeps it; None when
    no program marks it."""
    marks: dict[str, float] | None = getattr(node, MARKS_ATTR, None)
    if marks is None:
        marks = {}
        setattr(node, MARKS_ATTR, marks)
    if until is None:
        marks.pop(owner, None)
    else:
        marks[owner] = until
    kept = max(marks.values(), default=None)
    setattr(node, UNTIL_ATTR, kept)


def mark_context(
    tree_cache: Any, ctx: Context, until: float | None, *, whole_path: bool, owner: str = ""
) -> int:
    """Mark the cached path of ``ctx`` with deadline ``until`` (``DROPPED`` = evict first,
    None = ordinary) as ``owner``'s mark (:func:`set_mark`); returns the tokens of the
    context's exclusive suffix, which only it holds (0 when nothing of it is cached).

    Requires the Python tree core (nodes are Python objects that accept an attribute).
    ``whole_path=False`` stops below the deepest node another sequence continues from, so only
    the exclusive suffix is marked. The count is that suffix either way: a shared prefix kept
    by many programs is one copy in memory, and the simulator counts a ``keep`` by the
    program's private blocks alike (``kvstate.retained_tokens``); summing whole paths counted
    a system prompt once per program that kept it.
    """
    params = symbols.load(symbols.MATCH_PARAMS)
    result = tree_cache.match_prefix(params(key=radix_key(ctx)))
    if not result.device_prefix_len:
        return 0
    node = tree_cache.resolve_node_handle(result.last_device_node)
    path = []
    while node is not None and node.parent is not None:
        path.append(node)
        node = node.parent
    # a node other sequences continue from is shared: it and everything above it are not
    # this context's alone
    exclusive = next(
        (i for i, n in enumerate(path) if len(n.children) > (0 if i == 0 else 1)), len(path)
    )
    for n in path if whole_path else path[:exclusive]:
        set_mark(n, owner, until)
    return sum(len(n.key) for n in path[:exclusive] if n.key is not None)


class RetentionBook:
    """Each tracked program's last context, and the tool-wait hints applied to it.

    ``note`` records a program's context when its request runs (the newest ``limit``
    programs are kept); ``apply`` marks the radix tree for every hint not applied yet;
    ``kept_tokens`` reports what ``keep`` hints hold.
    """

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self.contexts: OrderedDict[str, Context] = OrderedDict()
        self._seq: dict[str, int] = {}  # program -> the hint seq applied
        self._kept: dict[str, tuple[int, float]] = {}  # program -> (tokens, until)

    def note(self, program: str, ctx: Context) -> None:
        """Make ``ctx`` the program's last context (dropping the least recent over limit)."""
        self.contexts[program] = ctx
        self.contexts.move_to_end(program)
        while len(self.contexts) > self.limit:
            self.contexts.popitem(last=False)

    def apply(self, tree: Any, hints: Mapping[str, RetentionHint]) -> None:
        """Mark ``tree`` for every hint in ``hints`` not applied yet, and forget the hints
        the adapter dropped (changes the nodes' marks, see ``mark_context``). ``ValueError``,
        once the rest are applied, when a hint names an unknown action (nothing marked for
        it)."""
        for program in [p for p in self._seq if p not in hints]:
            del self._seq[program]
            self._kept.pop(program, None)
            ctx = self.contexts.get(program)
            if ctx is not None and tree is not None:
                # its marks go with its hint: a node keeps no entry per program it ever
                # had, and a forgotten drop no longer weighs on the node
                mark_context(tree, ctx, None, whole_path=True, owner=program)
        unknown: list[str] = []
        for program, hint in hints.items():
            if self._seq.get(program) == hint.seq:
                continue
            # recorded before the action is read: a bad hint is reported once, not each pass
            self._seq[program] = hint.seq
            try:
                until, whole = mark_for(hint.action, hint.until), marks_whole_path(hint.action)
            except ValueError as err:
                unknown.append(f"{program}: {err}")
                continue
            ctx = self.contexts.get(program)
            if ctx is None or tree is None:
                continue
            if not whole and program in self._kept:
                # a keep marked its whole path, the shared prefix too; a drop or offload
                # marks only its own suffix, so the keep's marks above it go first (else the
                # shared prefix stayed kept, unreported, until the keep's deadline)
                mark_context(tree, ctx, None, whole_path=True, owner=program)
            tokens = mark_context(tree, ctx, until, whole_path=whole, owner=program)
            if hint.action == CacheAction.KEEP:
                self._kept[program] = (tokens, hint.until)
            else:
                self._kept.pop(program, None)
        if unknown:
            # after the others are applied: one bad hint does not hold theirs back (the
            # plugin's hook guard logs the error and counts it in ``status.json``)
            raise ValueError("; ".join(unknown))

    def kept_tokens(self, wall: float) -> dict[str, int]:
        """Tokens each program's ``keep`` hint still holds at ``wall``."""
        return {p: n for p, (n, until) in self._kept.items() if until > wall}
