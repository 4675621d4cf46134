"""Every SGLang 0.5.23 symbol agentconsole uses, in one list, and how to load one.

SGLang's internals churn between releases (``HiRadixCache`` vanished in 0.5.21), so the
project pins the version and names each dependency here exactly once. The adapter and the
plugin load symbols through :func:`load` (or hook them by :func:`dotted` name), and the
contract test imports the whole list, so an upgrade fails in one obvious place.

Names are ``module:qualified.name``. ``PRIVATE`` marks the few that are not public API.
"""

from __future__ import annotations

import importlib
from typing import Any

SGLANG_VERSION = "0.5.23"

# -- server process (adapter) ------------------------------------------------------------------
ENGINE = "sglang.srt.entrypoints.engine:Engine"
ENGINE_SHUTDOWN = "sglang.srt.entrypoints.engine:Engine.shutdown"
ENGINE_CHILD_PIDS = "sglang.srt.entrypoints.engine:Engine.get_all_child_pids"
ENGINE_FLUSH_CACHE = "sglang.srt.entrypoints.engine:Engine.flush_cache"
GENERATE_REQ = "sglang.srt.managers.io_struct:GenerateReqInput"
PAUSE_REQ = "sglang.srt.managers.io_struct:PauseGenerationReqInput"
CONTINUE_REQ = "sglang.srt.managers.io_struct:ContinueGenerationReqInput"
TM = "sglang.srt.managers.tokenizer_manager:TokenizerManager"
TM_GENERATE = "sglang.srt.managers.tokenizer_manager:TokenizerManager.generate_request"
TM_ABORT = "sglang.srt.managers.tokenizer_manager:TokenizerManager.abort_request"
TM_PAUSE = "sglang.srt.managers.tokenizer_manager:TokenizerManager.pause_generation"
TM_CONTINUE = "sglang.srt.managers.tokenizer_manager:TokenizerManager.continue_generation"
TM_FLUSH = "sglang.srt.managers.tokenizer_manager:TokenizerManager.flush_cache"
TM_HANDLE_LOOP = "sglang.srt.managers.tokenizer_manager:TokenizerManager.auto_create_handle_loop"

# -- scheduler process (plugin) ----------------------------------------------------------------
HOOK_REGISTRY = "sglang.srt.plugins.hook_registry:HookRegistry"
HOOK_TYPE = "sglang.srt.plugins.hook_registry:HookType"
SCHEDULE_POLICY = "sglang.srt.managers.schedule_policy:SchedulePolicy"
CALC_PRIORITY = "sglang.srt.managers.schedule_policy:SchedulePolicy.calc_priority"
PREFILL_ADDER = "sglang.srt.managers.schedule_policy:PrefillAdder"
PREEMPT_TO_SCHEDULE = "sglang.srt.managers.schedule_policy:PrefillAdder.preempt_to_schedule"
ADD_ONE_REQ = "sglang.srt.managers.schedule_policy:PrefillAdder.add_one_req"
ADD_REQ_RESULT = "sglang.srt.managers.schedule_policy:AddReqResult"
NEXT_BATCH = "sglang.srt.managers.scheduler:Scheduler.get_next_batch_to_run"
#: asked each pass before a prefill batch is built (SGLang's ``prefill_decode_interval``):
#: True runs the running batch's decode step instead
DEFER_PREFILL = "sglang.srt.managers.scheduler:Scheduler._should_defer_prefill"
#: the cap on an in-flight chunked prefill's next chunk (room for waiting requests)
CHUNK_LIMIT = "sglang.srt.managers.schedule_policy:SchedulePolicy.shortest_prefill_chunk_limit"
#: the decode tokens SGLang's admission reserves per request at most, and the KV budget its
#: ``PrefillAdder`` starts a pass with: what a pass can admit (``composition.admission_room``)
CLIP_MAX_NEW_TOKENS = "sglang.srt.managers.schedule_policy:CLIP_MAX_NEW_TOKENS"
PREFILL_BUDGET = (
    "sglang.srt.mem_cache.allocator.base:BaseTokenToKVPoolAllocator.create_prefill_budget"
)
PREFILL_BUDGET_REMAINING = "sglang.srt.mem_cache.prefill_budget:PrefillBudget.remaining_total"
NEW_TOKEN_RATIO = (
    "sglang.srt.managers.scheduler_components.new_token_ratio_tracker:NewTokenRatioTracker.current"
)
#: how a waiting request would be admitted (whole or chunked), before anything is allocated
SELECT_ADMISSION = "sglang.srt.managers.schedule_policy:PrefillAdder._select_prefill_admission"
RUN_BATCH = "sglang.srt.managers.scheduler:Scheduler.run_batch"
PROCESS_RESULT = "sglang.srt.managers.scheduler:Scheduler.process_batch_result"
REQ = "sglang.srt.managers.schedule_batch:Req"
EVICTION_STRATEGY = "sglang.srt.mem_cache.evict_policy:EvictionStrategy"
EVICTION_FACTORIES = "sglang.srt.mem_cache.utils:_EVICTION_POLICY_FACTORIES"
EVICTION_CHOICES = "sglang.srt.arg_groups.choices:RADIX_EVICTION_POLICY_CHOICES"
RADIX_KEY = "sglang.srt.mem_cache.radix_cache:RadixKey"
MATCH_PARAMS = "sglang.srt.mem_cache.base_prefix_cache:MatchPrefixParams"
URC_MATCH = "sglang.srt.mem_cache.unified_radix_cache:UnifiedRadixCache.match_prefix"
URC_RESOLVE = "sglang.srt.mem_cache.unified_radix_cache:UnifiedRadixCache.resolve_node_handle"
URC_EVICTABLE = "sglang.srt.mem_cache.unified_radix_cache:UnifiedRadixCache.evictable_size"
TOUCH_WAITING = "sglang.srt.mem_cache.common:touch_waiting_prefix"
#: called once per eviction pass with the device tokens it freed (both tree caches): telemetry
EVICTION_METRICS = "sglang.srt.mem_cache.base_prefix_cache:BasePrefixCache.update_eviction_metrics"
#: this process's parallel placement (``dp_rank``: its data-parallel rank, None without DP)
PARALLEL = "sglang.srt.runtime_context:get_parallel"
#: read-only device match (no split, no LRU touch): placement of a program's context
DEVICE_MATCH = (
    "sglang.srt.mem_cache.unified_cache.unified_tree_core:UnifiedTreeCore.match_full_device_prefix"
)

#: environment variable selecting SGLang's radix tree core (the eviction plugin needs "python")
TREE_CORE_ENV = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"
#: SGLang's plugin whitelist (a name that matches no plugin disables ours)
PLUGINS_ENV = "SGLANG_PLUGINS"

SYMBOLS: tuple[str, ...] = (
    ENGINE,
    ENGINE_SHUTDOWN,
    ENGINE_CHILD_PIDS,
    ENGINE_FLUSH_CACHE,
    GENERATE_REQ,
    PAUSE_REQ,
    CONTINUE_REQ,
    TM,
    TM_GENERATE,
    TM_ABORT,
    TM_PAUSE,
    TM_CONTINUE,
    TM_FLUSH,
    TM_HANDLE_LOOP,
    HOOK_REGISTRY,
    HOOK_TYPE,
    SCHEDULE_POLICY,
    CALC_PRIORITY,
    PREFILL_ADDER,
    PREEMPT_TO_SCHEDULE,
    ADD_ONE_REQ,
    ADD_REQ_RESULT,
    NEXT_BATCH,
    DEFER_PREFILL,
    CHUNK_LIMIT,
    CLIP_MAX_NEW_TOKENS,
    PREFILL_BUDGET,
    PREFILL_BUDGET_REMAINING,
    NEW_TOKEN_RATIO,
    SELECT_ADMISSION,
    RUN_BATCH,
    PROCESS_RESULT,
    REQ,
    EVICTION_STRATEGY,
    EVICTION_FACTORIES,
    EVICTION_CHOICES,
    RADIX_KEY,
    MATCH_PARAMS,
    URC_MATCH,
    URC_RESOLVE,
    URC_EVICTABLE,
    TOUCH_WAITING,
    EVICTION_METRICS,
    DEVICE_MATCH,
    PARALLEL,
)
PRIVATE: frozenset[str] = frozenset({EVICTION_FACTORIES, DEFER_PREFILL, SELECT_ADMISSION})


def load(symbol: str) -> Any:
    """Import ``module:qualified.name`` and return the object; ``ImportError`` or
    ``AttributeError`` name the missing part."""
    module_name, _, qualname = symbol.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def dotted(symbol: str) -> str:
    """The ``HookRegistry`` target path of ``symbol`` (``module.qualified.name``)."""
    return symbol.replace(":", ".")


def missing() -> list[str]:
    """The symbols of :data:`SYMBOLS` that do not resolve, with the reason."""
    out = []
    for symbol in SYMBOLS:
        try:
            load(symbol)
        except (ImportError, AttributeError) as err:
            out.append(f"{symbol}: {err}")
    return out
