"""Request bodies of the API (pydantic, validated at the edge; 422 names the bad field).

The chat request follows OpenAI's (unknown OpenAI fields such as ``seed`` or ``user`` are
accepted and ignored); every agentconsole body is strict (unknown fields are refused).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
Id = Annotated[str, Field(pattern=ID_PATTERN)]
Label = Annotated[str, Field(min_length=1, max_length=128)]
Labels = Annotated[dict[Label, Annotated[str, Field(max_length=256)]], Field(max_length=32)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentExtras(_Strict):
    """The ``agentconsole`` object of a chat request: the call's place in its program."""

    program_id: Id | None = None
    node_id: Id | None = None
    parent_ids: Annotated[list[Id], Field(max_length=256)] | None = None
    deadline_s: Annotated[float, Field(gt=0, le=86_400 * 7)] | None = None
    labels: Labels | None = None


class FunctionDef(BaseModel):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
    description: Annotated[str, Field(max_length=4096)] | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class CalledFunction(BaseModel):
    name: str
    arguments: str = "{}"


class ToolCallIn(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class Message(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: Annotated[list[ToolCallIn], Field(max_length=128)] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _content_needed(self) -> Message:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        return self


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``: OpenAI's chat request plus agentconsole extras."""

    model: Annotated[str, Field(max_length=256)]
    messages: Annotated[list[Message], Field(min_length=1, max_length=10_000)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    tools: Annotated[list[ToolDef], Field(max_length=128)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    n: int | None = None
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    rid: Annotated[str, Field(max_length=128)] | None = None
    request_id: Annotated[str, Field(max_length=128)] | None = None
    ignore_eos: bool = False
    agentconsole: AgentExtras | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n is not None and n != 1:
            raise ValueError("only n=1 is supported")
        return n

    @model_validator(mode="after")
    def _named_tool_exists(self) -> ChatCompletionRequest:
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice):
            names = {t.function.name for t in self.tools or ()}
            if choice.function.name not in names:
                raise ValueError(f"tool_choice names {choice.function.name!r}, not in tools")
        return self


class CompletionRequest(BaseModel):
    """``POST /v1/completions``: OpenAI's (legacy) completion request, one text prompt, plus
    the chat request's agentconsole extras. What it cannot honour is refused (422): token-id
    prompts, several prompts, ``n``/``best_of`` above 1, ``echo``, ``logprobs``, ``suffix``."""

    model: Annotated[str, Field(max_length=256)]
    prompt: str | Annotated[list[str], Field(min_length=1, max_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    n: int | None = None
    best_of: int | None = None
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    rid: Annotated[str, Field(max_length=128)] | None = None
    request_id: Annotated[str, Field(max_length=128)] | None = None
    ignore_eos: bool = False
    agentconsole: AgentExtras | None = None

    @field_validator("n", "best_of")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n is not None and n != 1:
            raise ValueError("only 1 is supported")
        return n

    @field_validator("echo", "logprobs", "suffix")
    @classmethod
    def _unsupported(cls, value: object, info: ValidationInfo) -> object:
        if value not in (None, False):
            raise ValueError(f"{info.field_name} is not supported")
        return value

    @field_validator("prompt")
    @classmethod
    def _not_empty(cls, prompt: str | list[str]) -> str | list[str]:
        if not (prompt if isinstance(prompt, str) else prompt[0]):
            raise ValueError("the prompt must not be empty")
        return prompt

    @property
    def text(self) -> str:
        """The prompt as one string."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class QuotasIn(_Strict):
    wall_time_s: Annotated[float, Field(gt=0)] | None = None
    tokens: Annotated[int, Field(ge=1)] | None = None
    tool_calls: Annotated[int, Field(ge=0)] | None = None
    branches: Annotated[int, Field(ge=1)] | None = None


class ProgramCreate(_Strict):
    """``POST /v1/programs``."""

    program_id: Id | None = None
    deadline_s: Annotated[float, Field(gt=0, le=86_400 * 7)] | None = None
    quotas: QuotasIn | None = None
    labels: Labels | None = None


class ProgramFinish(_Strict):
    """``POST /v1/programs/{id}/finish``."""

    success: bool = True


class NodeCreate(_Strict):
    """``POST /v1/programs/{id}/nodes``."""

    node_id: Id
    kind: Literal["llm", "tool"]
    parents: Annotated[list[Id], Field(max_length=256)] = []
    tool: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] | None = None
    branch: Literal["main", "repair", "discarded"] = "main"

    @model_validator(mode="after")
    def _tool_named(self) -> NodeCreate:
        if self.kind == "tool" and self.tool is None:
            raise ValueError("a tool node needs 'tool'")
        return self


class BoostIn(_Strict):
    amount: Annotated[float, Field(ge=-1e6, le=1e6)] = 10.0


class DrainIn(_Strict):
    enabled: bool


class PolicyIn(_Strict):
    policy: Annotated[str, Field(max_length=64)] | None = None
    kv_policy: Annotated[str, Field(max_length=64)] | None = None
