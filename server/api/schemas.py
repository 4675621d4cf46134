"""Request bodies of the API (pydantic, validated at the edge; 422 names the bad field).

The chat request follows OpenAI's (unknown OpenAI fields such as ``seed``, ``user`` or
``prediction`` are accepted and ignored: docs/API.md says what each loses;
``reasoning_effort``, one of OpenAI's levels, reaches the model's chat template); what the
server reads but cannot honour is refused, never ignored (422 naming the
field, as ``n`` above 1): a ``response_format`` other than ``text``,
``logprobs``/``top_logprobs``, content parts other than text, the legacy
``functions``/``function_call``, ``audio``, ``modalities`` other than text and
``web_search_options``. What the engine can do is honoured: ``frequency_penalty``,
``presence_penalty`` and ``logit_bias`` (within OpenAI's bounds; a ``logit_bias`` token id the
served model's vocabulary does not have is refused by the intake, which knows the model).
Every agentconsole body is strict (unknown fields are refused). Every body is validated in
strict mode (no string or boolean where a number is expected, no float where an integer is)
and every number is bounded.
The published OpenAPI schema is these models' own JSON Schema (``contract.py``), so what the
schema allows is what the server accepts; the one rule a JSON Schema cannot say (a named
``tool_choice`` must be among ``tools``) is a 422 naming ``tool_choice``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from litestar.params import PathParameter
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from agentconsole.server.live.chatml import message_text
from agentconsole.server.live.errors import InvalidRequest


def _integral(value: object) -> object:
    """A JSON number with no fraction is an integer (JSON Schema's rule): ``5.0`` -> 5."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True, slots=True)
class Unsupported:
    """``Annotated`` metadata of a field the server reads but cannot honour: the ``accepted``
    values pass (by identity: ``False`` is not ``0``), any other is refused (422) with
    ``reason`` before the field's type is checked; the JSON Schema allows the accepted values
    only, so the published contract says the same."""

    reason: str
    accepted: tuple[object, ...] = (None,)

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        values = list(self.accepted)
        return {"const": values[0]} if len(values) == 1 else {"enum": values}

    def _check(self, value: object) -> object:
        if any(value is ok for ok in self.accepted):
            return value
        # ``reason`` is pydantic's message template, so it is ours, never a client's text
        raise PydanticCustomError("unsupported", self.reason)


def _text_format(value: object) -> object:
    """A ``response_format`` other than text is refused: the server does not constrain the
    model's output, and free text where JSON was asked fails the client's parse later (or
    worse, passes it)."""
    kind = value.get("type") if isinstance(value, dict) else None
    if isinstance(kind, str) and kind != "text":
        raise PydanticCustomError(
            "unsupported",
            "type '{kind}' is not supported: this server does not constrain output to JSON or"
            " a schema (send type 'text' or leave response_format out)",
            {"kind": kind[:64]},  # echoed back: bounded
        )
    return value


def _text_parts(content: object) -> object:
    """Content parts other than text (``image_url``, ``input_audio``, ``file``, ...) are
    refused here, naming the content, before anything runs: the served models read text only,
    and dropping them would answer a prompt the client did not send (an image alone: an empty
    one). What is text is the prompt formats' own reading (``chatml.message_text``, the one
    place that refuses the rest), so the edge refuses exactly what a prompt would."""
    try:
        message_text(content)
    except InvalidRequest as refused:
        raise PydanticCustomError("unsupported", "{reason}", {"reason": str(refused)}) from None
    return content


#: integers in strict mode (no string, boolean or fraction), ``5.0`` accepted as 5; the
#: bounds come before the validator, so the JSON Schema carries them
Integral = BeforeValidator(_integral)
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
#: a value the server echoes in a response header (``X-Request-Id``): visible ASCII only
HEADER_VALUE_PATTERN = r"^[!-~]{1,128}$"
Id = Annotated[str, Field(pattern=ID_PATTERN)]
#: the path parameters naming a program and a node (``/v1/programs/...`` and the operator's
#: routes), one definition so both routers refuse the same ids
ProgramId = Annotated[str, PathParameter(pattern=ID_PATTERN, description="Program id")]
NodeId = Annotated[str, PathParameter(pattern=ID_PATTERN, description="Node id")]
#: the most parents one call names (``agentconsole.parent_ids``, the ``X-Parent-Ids`` header)
MAX_PARENT_IDS = 256
Label = Annotated[str, Field(min_length=1, max_length=128)]
Labels = Annotated[dict[Label, Annotated[str, Field(max_length=256)]], Field(max_length=32)]
RequestId = Annotated[str, Field(pattern=HEADER_VALUE_PATTERN)]
#: bounds of ``max_tokens`` in the models; the server's own limit (``limits.max_tokens_limit``)
#: is checked by the handler and published as the schema's maximum
MAX_TOKENS_BOUND = 1 << 30
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS_BOUND), Integral]
Priority = Annotated[int, Field(ge=-1000, le=1000), Integral]
Seconds = Annotated[float, Field(gt=0, le=86_400 * 7)]
Temperature = Annotated[float, Field(ge=0, le=2)]
#: OpenAI accepts 0 (only the likeliest token: greedy); the SGLang adapter sends it as
#: greedy decoding, since SGLang itself wants ``0 < top_p`` (``wire.sampling_params``)
TopP = Annotated[float, Field(ge=0, le=1)]
One = Annotated[int, Field(ge=1, le=1), Integral]
#: OpenAI's ``frequency_penalty`` and ``presence_penalty`` (SGLang's bounds too)
Penalty = Annotated[float, Field(ge=-2, le=2)]
#: OpenAI's bounds of ``logit_bias``: at most this many token ids, each biased by -100..100
MAX_LOGIT_BIAS_ENTRIES = 300
#: a token id as a ``logit_bias`` key: decimal digits (JSON object keys are strings) in the
#: canonical form (no leading zero: ``"07"`` and ``"7"`` would be one id twice); the bound on
#: its length keeps the number small, the model's vocabulary is checked by the intake
TokenIdKey = Annotated[str, Field(pattern=r"^(0|[1-9][0-9]{0,9})$")]
LogitBias = Annotated[
    dict[TokenIdKey, Annotated[float, Field(ge=-100, le=100)]],
    # the schema's ``patternProperties`` alone would allow any other key: published closed
    Field(max_length=MAX_LOGIT_BIAS_ENTRIES, json_schema_extra={"additionalProperties": False}),
]
#: the longest ``stop`` string: OpenAI publishes no bound, and a stop string is matched
#: against the output's tail on every decode step of its call in the engine's scheduler,
#: which every tenant's calls share; stop sequences are a few words, so 1,024 characters
#: refuses no real one
MAX_STOP_CHARS = 1024
StopString = Annotated[str, Field(max_length=MAX_STOP_CHARS)]
Stop = StopString | Annotated[list[StopString], Field(max_length=4)]
ToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
ModelName = Annotated[str, Field(min_length=1, max_length=256)]


class _Body(BaseModel):
    """Strict types; unknown fields ignored (OpenAI's bodies)."""

    model_config = ConfigDict(strict=True)


class _Strict(BaseModel):
    """Strict types; unknown fields refused (agentconsole's bodies)."""

    model_config = ConfigDict(strict=True, extra="forbid")


class AgentExtras(_Strict):
    """The ``agentconsole`` object of a chat request: the call's place in its program."""

    program_id: Id | None = None
    node_id: Id | None = None
    parent_ids: Annotated[list[Id], Field(max_length=MAX_PARENT_IDS)] | None = None
    deadline_s: Seconds | None = None
    labels: Labels | None = None
    model_candidates: Annotated[list[ModelName], Field(min_length=1, max_length=16)] | None = None
    """The served models the call may run on (the selector chooses among them); over
    ``model``."""
    role: Label | None = None
    """The node's role (planner, verifier, ...): role pins and minimum tiers apply to it.
    Default: the program's ``role`` label."""
    min_tier: Annotated[int, Field(ge=0, le=1000), Integral] | None = None
    """The least quality tier the call accepts (default: the role's, else any)."""


class FunctionParameters(_Body):
    """A function's ``parameters``: a JSON Schema object (the parts the server reads are
    typed; any other keyword is passed through)."""

    model_config = ConfigDict(strict=True, extra="allow")
    type: Literal["object"] | None = None
    properties: Annotated[dict[str, dict[str, Any]], Field(max_length=1024)] | None = None
    required: Annotated[list[str], Field(max_length=1024)] | None = None


class FunctionDef(_Body):
    name: ToolName
    description: Annotated[str, Field(max_length=4096)] | None = None
    parameters: FunctionParameters | None = None
    strict: bool | None = None


class ToolDef(_Body):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(_Body):
    name: Annotated[str, Field(max_length=64)]


class NamedToolChoice(_Body):
    type: Literal["function"] = "function"
    function: NamedFunction


class CalledFunction(_Body):
    name: Annotated[str, Field(max_length=64)]
    arguments: str = "{}"


class ToolCallIn(_Body):
    id: Annotated[str, Field(max_length=256)]
    type: Literal["function"] = "function"
    function: CalledFunction


class ContentPart(_Body):
    """A text part (a part of any other type is refused before this model: ``_text_parts``)."""

    model_config = ConfigDict(strict=True, extra="allow")
    type: Literal["text"]
    text: str | None = None


class ResponseFormat(_Body):
    """``response_format``: ``text`` only (``_text_format`` refuses the others by name)."""

    type: Literal["text"]


_NO_LOGPROBS = "is not supported: this server does not return log probabilities"
_NO_ECHO = "is not supported: this server does not echo the prompt back"
_NO_SUFFIX = "is not supported: this server does not complete text before a suffix"
_NO_FUNCTIONS = (
    "is not supported: the legacy function calling is not read (declare the functions in 'tools')"
)
_NO_FUNCTION_CALL = (
    "is not supported: the legacy function calling is not read (choose the function with"
    " 'tool_choice')"
)
_NO_AUDIO = "is not supported: this server answers text only (leave audio out)"
_NO_WEB_SEARCH = (
    "is not supported: this server does not search the web (leave web_search_options out; give"
    " the model a search tool in 'tools' instead)"
)


def _text_modalities(value: object) -> object:
    """``modalities`` other than text (``audio``) are refused: the served models write text
    only, and an answer without the audio asked for would look complete. ``["text"]`` and null
    pass."""
    if isinstance(value, list):
        for kind in value:
            if kind != "text":
                shown = kind[:64] if isinstance(kind, str) else type(kind).__name__
                raise PydanticCustomError(
                    "unsupported",
                    "modality '{kind}' is not supported: this server answers text only (send"
                    " ['text'] or leave modalities out)",
                    {"kind": shown},  # echoed back: bounded
                )
    return value


#: what ``Message``'s validator says, as JSON Schema: content (not null), or an assistant
#: message's tool calls
_CONTENT_OR_CALLS: dict[str, Any] = {
    "anyOf": [
        {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
        {
            "required": ["role", "tool_calls"],
            "properties": {
                "role": {"const": "assistant"},
                "tool_calls": {"type": "array", "minItems": 1},
            },
        },
    ]
}


class Message(_Body):
    model_config = ConfigDict(strict=True, json_schema_extra=_CONTENT_OR_CALLS)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: (
        Annotated[
            str | Annotated[list[ContentPart], Field(max_length=1024)],
            BeforeValidator(_text_parts),
        ]
        | None
    ) = None
    name: Annotated[str, Field(max_length=256)] | None = None
    tool_calls: Annotated[list[ToolCallIn], Field(max_length=128)] | None = None
    tool_call_id: Annotated[str, Field(max_length=256)] | None = None

    @model_validator(mode="after")
    def _content_needed(self) -> Message:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        return self


class StreamOptions(_Body):
    include_usage: bool = False


class _Generation(_Body):
    """What chat and text completions share: sampling, streaming and the agentconsole
    extras (``priority``, ``rid``/``request_id``, ``ignore_eos``, ``agentconsole``)."""

    model: Annotated[str, Field(max_length=256)]
    #: null as OpenAI's schema allows (boolean or null): the default, not streamed
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    stop: Stop | None = None
    n: One | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    logit_bias: LogitBias | None = None
    priority: Priority = 0
    rid: RequestId | None = None
    request_id: RequestId | None = None
    ignore_eos: bool = False
    agentconsole: AgentExtras | None = None

    @property
    def token_bias(self) -> dict[int, float] | None:
        """``logit_bias`` with its token ids as numbers (None: not asked)."""
        if self.logit_bias is None:
            return None
        return {int(token): bias for token, bias in self.logit_bias.items()}


#: messages one chat request may carry
MAX_MESSAGES = 10_000


def _not_too_many_messages(messages: object) -> object:
    """Refuse a list over :data:`MAX_MESSAGES` before its items are validated: pydantic checks
    a list's length after validating every item (0.15 s of the event loop for 120,000 tiny
    messages in a 4 MB body, each such request holding every tenant's requests meanwhile)."""
    if isinstance(messages, list) and len(messages) > MAX_MESSAGES:
        raise PydanticCustomError(
            "too_long",
            "List should have at most {max_length} items, not {actual_length}",
            {"max_length": MAX_MESSAGES, "actual_length": len(messages)},
        )
    return messages


class ChatCompletionRequest(_Generation):
    """``POST /v1/chat/completions``: OpenAI's chat request plus agentconsole extras (what it
    cannot honour is refused, 422: ``n`` above 1, a ``response_format`` other than text,
    ``logprobs``, content parts other than text, ``functions``/``function_call``, ``audio``,
    ``modalities`` other than text, ``web_search_options``)."""

    messages: Annotated[
        list[Message],
        Field(min_length=1, max_length=MAX_MESSAGES),
        BeforeValidator(_not_too_many_messages),
    ]
    max_completion_tokens: TokenCount | None = None
    tools: Annotated[list[ToolDef], Field(max_length=128)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    #: OpenAI's levels (its client's ``ReasoningEffort`` and ``xhigh``; anything else: 422
    #: naming it), handed to the model's chat template as the keyword SGLang's own server
    #: passes (``chat_template``); null: not asked
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    parallel_tool_calls: bool | None = None
    """False: an answer that calls several tools returns (and adds the tool node of) the
    first only; true or unset: every call the model made."""
    response_format: Annotated[ResponseFormat, BeforeValidator(_text_format)] | None = None
    #: refused when asked for (never answered with ``logprobs: null``); false or null pass
    logprobs: Annotated[bool | None, Unsupported(_NO_LOGPROBS, (False, None))] = None
    top_logprobs: Annotated[None, Unsupported(_NO_LOGPROBS)] = None
    #: OpenAI's deprecated function calling: refused (naming ``tools``/``tool_choice``), never
    #: answered as if no function had been declared
    functions: Annotated[None, Unsupported(_NO_FUNCTIONS)] = None
    function_call: Annotated[None, Unsupported(_NO_FUNCTION_CALL)] = None
    audio: Annotated[None, Unsupported(_NO_AUDIO)] = None
    #: OpenAI's built-in web search: an answer without the search (and its citations) asked
    #: for would read as one made with it. ``prediction`` (predicted outputs: a speed-up that
    #: changes no answer) is accepted and ignored, as unknown fields are
    web_search_options: Annotated[None, Unsupported(_NO_WEB_SEARCH)] = None
    modalities: Annotated[
        Annotated[list[Literal["text"]], Field(max_length=1)] | None,
        BeforeValidator(_text_modalities),
    ] = None

    @field_validator("tool_choice")
    @classmethod
    def _named_tool_exists(cls, choice: object, info: ValidationInfo) -> object:
        tools = info.data.get("tools") or ()
        if choice == "required" and not tools:  # a call no declared tool could answer
            raise ValueError("tool_choice 'required' needs tools")
        if isinstance(choice, NamedToolChoice):
            names = {t.function.name for t in tools}
            if choice.function.name not in names:
                raise ValueError(f"tool_choice names {choice.function.name!r}, not in tools")
        return choice


class CompletionRequest(_Generation):
    """``POST /v1/completions``: OpenAI's (legacy) completion request, one text prompt, plus
    the chat request's agentconsole extras. What it cannot honour is refused (422): token-id
    prompts, several prompts, ``n``/``best_of`` above 1, ``echo``, ``logprobs``, ``suffix``."""

    prompt: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=1)]
    )
    best_of: One | None = None
    echo: Annotated[bool | None, Unsupported(_NO_ECHO, (False, None))] = False
    logprobs: Annotated[None, Unsupported(_NO_LOGPROBS)] = None
    suffix: Annotated[None, Unsupported(_NO_SUFFIX)] = None

    @property
    def text(self) -> str:
        """The prompt as one string."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class QuotasIn(_Strict):
    wall_time_s: Seconds | None = None
    tokens: Annotated[int, Field(ge=1, le=10**12), Integral] | None = None
    tool_calls: Annotated[int, Field(ge=0, le=10**6), Integral] | None = None
    branches: Annotated[int, Field(ge=1, le=10**6), Integral] | None = None


class ProgramCreate(_Strict):
    """``POST /v1/programs``."""

    program_id: Id | None = None
    deadline_s: Seconds | None = None
    quotas: QuotasIn | None = None
    labels: Labels | None = None


class ProgramFinish(_Strict):
    """``POST /v1/programs/{id}/finish``."""

    success: bool = True


class NodeCreate(_Strict):
    """``POST /v1/programs/{id}/nodes``."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        # a tool node names its tool, an LLM node none (the validators below enforce it)
        json_schema_extra={
            "if": {"properties": {"kind": {"const": "tool"}}},
            "then": {"required": ["tool"], "properties": {"tool": {"type": "string"}}},
            "else": {"properties": {"tool": {"type": "null"}}},
        },
    )
    node_id: Id
    kind: Literal["llm", "tool"]
    parents: Annotated[list[Id], Field(max_length=MAX_PARENT_IDS)] = []
    #: checked when absent too, so a tool node without one is refused naming ``tool``
    tool: Annotated[ToolName | None, Field(validate_default=True)] = None
    branch: Literal["main", "repair", "discarded"] = "main"

    @field_validator("tool")
    @classmethod
    def _tool_as_kind_says(cls, tool: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")  # absent when the kind itself was refused
        if kind == "tool" and tool is None:
            raise ValueError("a tool node needs 'tool'")
        # an LLM node's tool fields are null: a tool named here would be answered, then lost
        # with a restart (the node would not read the same before and after it)
        if kind == "llm" and tool is not None:
            raise ValueError("an llm node takes no 'tool' (declare a tool node for it)")
        return tool


class BoostIn(_Strict):
    amount: Annotated[float, Field(ge=-1e6, le=1e6)] = 10.0


class DrainIn(_Strict):
    enabled: bool


class ModelPinIn(_Strict):
    """Pin (``model`` a served name) or unpin (``model`` null) one program or one role."""

    # exactly one target, said in the schema too (the validator below enforces it)
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["program_id"],
                    "properties": {"program_id": {"type": "string"}, "role": {"type": "null"}},
                },
                {
                    "required": ["role"],
                    "properties": {"role": {"type": "string"}, "program_id": {"type": "null"}},
                },
            ]
        },
    )
    program_id: Id | None = None
    role: Label | None = None
    model: ModelName | None

    @model_validator(mode="after")
    def _one_target(self) -> ModelPinIn:
        if (self.program_id is None) == (self.role is None):
            raise ValueError("give exactly one of 'program_id' and 'role'")
        return self


class PolicyIn(_Strict):
    policy: Annotated[str, Field(max_length=64)] | None = None
    kv_policy: Annotated[str, Field(max_length=64)] | None = None


#: unix seconds up to the year 2286 (a bound, so the schema has one)
UnixSeconds = Annotated[float, Field(ge=0, le=1e10)]


class WhatIfIn(_Strict):
    """``POST /v1/operator/whatif``: the window (unix seconds; ``until`` defaults to now),
    one tenant or all, and whether to also run the bench on the trace."""

    since: UnixSeconds | None = None
    until: UnixSeconds | None = None
    tenant: Id | None = None
    run: bool = False


#: every request body model (their JSON Schemas are the published contract's)
BODY_MODELS: tuple[type[BaseModel], ...] = (
    ChatCompletionRequest,
    CompletionRequest,
    ProgramCreate,
    ProgramFinish,
    NodeCreate,
    BoostIn,
    DrainIn,
    PolicyIn,
    ModelPinIn,
    WhatIfIn,
)
