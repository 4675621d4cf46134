"""Each program's last context as the adapter saw it, and what a new prompt can reuse of it.

The adapter remembers, per program, the token ids of its last finished call (the prompt ids
SGLang tokenized, returned with ``return_prompt_token_ids``, plus the output ids) and its cache
salt. Two questions are answered from it, without asking the engine:

* **recompute**: of a call that just ran, how many prompt tokens this program had computed
  before and had to prefill again (the common prefix with its last context, minus what SGLang
  reported cached): they were evicted in between;
* **probe**: before a call is queued, how much of its prompt the program's last context
  covers, split by what the plugin last reported resident (``placement.json``);
* **shared**: for a program with no context yet (a new one, sized at the door), the longest
  prefix its prompt shares with another program's remembered context under the same cache
  salt that is still resident: a system prompt, tool schemas or a repository snapshot the
  tenant's other programs computed, which SGLang's radix cache serves to the new one too.

The shared lookup is bounded, and only a program without a context pays it: contexts are
indexed by their salt and first ``HEAD_TOKENS`` ids, and a prompt is compared with at most
the ``SHARED_CANDIDATES`` most recent contexts under its own head. A candidate is compared in
full only if it can beat the best found so far (long enough, resident enough, and agreeing
with the prompt at the best's length), so a namespace whose programs share one long prefix
costs about one full comparison (``common_prefix``: C-level slice compares, linear in the
shared prefix) plus constant work per other candidate. Prefixes shorter than ``HEAD_TOKENS``
are not seen, and neither are contexts beyond the candidates: an estimate, like the program's
own one (residency is as the last placement sweep reported it).

The last token of a context never has KV (it was sampled, not fed back), and SGLang always
prefills the last prompt token (it needs its logits), so neither counts as reusable. Bounded:
at most ``max_programs`` contexts and ``max_tokens`` token ids in all, least recent dropped.
Pure Python; no SGLang import.
"""

from __future__ import annotations

import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice

from agentconsole.scheduler.runtime import MAX_REMEMBERED_PROGRAMS

_MAX_TOKENS = 8_000_000  # 32 MB of int32 ids
#: leading ids a context is indexed by for the shared lookup: a shared prefix shorter than this
#: is too small to matter to the door, and a longer key would miss shorter system prompts
HEAD_TOKENS = 32
#: the most recent contexts under one head a new program's prompt is compared with: the
#: tenant's programs that share a prefix are usually many, and any recent one holds it
SHARED_CANDIDATES = 32


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of ``a`` and ``b`` (arrays: galloping slice compares in C,
    no per-token Python loop on long shared prefixes)."""
    n = min(len(a), len(b))
    lo, step = 0, 64
    while lo < n:
        hi = min(lo + step, n)
        if a[lo:hi] != b[lo:hi]:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if a[lo:mid] == b[lo:mid]:
                    lo = mid
                else:
                    hi = mid
            return lo  # the first index where they differ
        lo, step = hi, step * 2
    return n


@dataclass(frozen=True, slots=True)
class LastContext:
    salt: str
    ids: array[int]
    at: float  # wall clock it was remembered


#: a remembered program's context tokens resident as last reported (None: no report since the
#: context was remembered, taken as all still there)
ResidentOf = Callable[[str, LastContext], int | None]


@dataclass(frozen=True, slots=True)
class Reuse:
    """What a prompt can reuse of its program's last context."""

    prompt_tokens: int
    #: tokens the program computed before that the prompt starts with
    reusable: int = 0
    #: of those, resident on the device (as far as the adapter knows)
    resident: int = 0

    @property
    def lost(self) -> int:
        return max(self.reusable - self.resident, 0)


def as_ids(ids: Sequence[int]) -> array[int]:
    """Token ids as a compact ``array`` (int32 when they fit)."""
    if isinstance(ids, array):
        return ids
    try:
        return array("i", ids)
    except OverflowError:
        return array("q", ids)


class ProgramContexts:
    """The last context of each program (see the module docstring)."""

    def __init__(
        self, max_programs: int = MAX_REMEMBERED_PROGRAMS, max_tokens: int = _MAX_TOKENS
    ) -> None:
        self.max_programs = max_programs
        self.max_tokens = max_tokens
        self._last: OrderedDict[str, LastContext] = OrderedDict()
        self._tokens = 0
        #: (salt, first ``HEAD_TOKENS`` ids) -> the programs whose context starts so, least
        #: recent first (only contexts longer than the head: shorter ones share too little)
        self._by_head: dict[tuple[str, tuple[int, ...]], OrderedDict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._last)

    def get(self, program_id: str) -> LastContext | None:
        return self._last.get(program_id)

    def remember(
        self, program_id: str, salt: str, prompt: Sequence[int], output: Sequence[int]
    ) -> None:
        """Record the program's last context (prompt then output ids); drops the least recent
        ones beyond the bounds."""
        ids, out = as_ids(prompt), as_ids(output)
        if ids.typecode != out.typecode:
            ids, out = array("q", ids), array("q", out)
        ids = ids + out  # a new array: never the caller's
        self.forget(program_id)
        last = LastContext(salt, ids, time.time())
        self._last[program_id] = last
        self._tokens += len(ids)
        self._index(program_id, last)
        while len(self._last) > self.max_programs or (
            self._tokens > self.max_tokens and len(self._last) > 1
        ):
            self.forget(next(iter(self._last)))

    def forget(self, program_id: str) -> None:
        old = self._last.pop(program_id, None)
        if old is not None:
            self._tokens -= len(old.ids)
            self._unindex(program_id, old)

    def _index(self, program_id: str, last: LastContext) -> None:
        if len(last.ids) > HEAD_TOKENS:
            self._by_head.setdefault(_head(last.salt, last.ids), OrderedDict())[program_id] = None

    def _unindex(self, program_id: str, last: LastContext) -> None:
        if len(last.ids) <= HEAD_TOKENS:
            return
        key = _head(last.salt, last.ids)
        programs = self._by_head.get(key)
        if programs is not None:
            programs.pop(program_id, None)
            if not programs:
                del self._by_head[key]

    def reusable(self, program_id: str, salt: str, prompt: Sequence[int]) -> int:
        """Prompt tokens the program's last context computed (0 without one, or across cache
        namespaces, which SGLang never shares)."""
        last = self._last.get(program_id)
        if last is None or last.salt != salt or not prompt:
            return 0
        ids = as_ids(prompt)
        if ids.typecode != last.ids.typecode:
            ids = array(last.ids.typecode, ids)
        return max(min(common_prefix(ids, last.ids), len(last.ids) - 1, len(ids) - 1), 0)

    def recomputed(self, program_id: str, salt: str, prompt: Sequence[int], cached: int) -> int:
        """Tokens of the program's earlier context a call with ``prompt`` prefilled again,
        given that SGLang served ``cached`` prompt tokens from cache."""
        return max(self.reusable(program_id, salt, prompt) - cached, 0)

    def reuse(
        self, program_id: str, salt: str, prompt: Sequence[int], resident: int | None
    ) -> Reuse:
        """What ``prompt`` can reuse; ``resident`` is the program's resident context tokens
        as last reported (None: not reported since the context was remembered, taken as all
        still there; a report lags by up to a second)."""
        reusable = self.reusable(program_id, salt, prompt)
        held = reusable if resident is None else min(reusable, resident)
        return Reuse(len(prompt), reusable, held)

    def shared(self, salt: str, prompt: Sequence[int], resident: ResidentOf) -> int:
        """Prompt tokens another program's remembered context under ``salt`` computed and
        still holds resident (``resident``, the same rule as a program's own context): the
        longest such prefix, over the most recent contexts that start like ``prompt`` (see
        the module docstring for the bound). For a program with no context of its own."""
        ids = as_ids(prompt)
        if len(ids) <= HEAD_TOKENS:
            return 0
        programs = self._by_head.get(_head(salt, ids))
        if not programs:
            return 0
        most = len(ids) - 1  # SGLang always prefills the last prompt token
        best = 0
        for program in islice(reversed(programs), SHARED_CANDIDATES):
            last = self._last[program]
            limit = min(len(last.ids) - 1, most)
            held = resident(program, last)
            if held is not None:
                limit = min(limit, held)
            if limit <= best or last.ids[best] != ids[best]:
                continue  # cannot beat the best: too short, evicted, or diverges before it
            theirs = ids if ids.typecode == last.ids.typecode else array(last.ids.typecode, ids)
            best = max(best, min(common_prefix(theirs, last.ids), limit))
            if best >= most:
                break
        return best


def _head(salt: str, ids: Sequence[int]) -> tuple[str, tuple[int, ...]]:
    """The index key of a context (or prompt): its salt and first ``HEAD_TOKENS`` ids."""
    return salt, tuple(ids[:HEAD_TOKENS])
