"""A refused body (422; 400 on OpenAI's routes) names its culprit as the client wrote it:
``field`` (and OpenAI's ``param``) is field names and list indexes only, never pydantic's tags
for the shapes a field takes (``stop.str``, ``prompt.constrained-str``), and the message is the
one of the shape the client sent (a list of five stops: "at most 4 items", not "should be a
valid string"). A node's ``tool`` is refused naming ``tool``: on an LLM node, or missing from a
tool node."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from agentconsole.server.api.bodyerrors import culprit, schema_of
from tests.server.api.harness import LiveServer, chat_body

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"


def _text(prompt: object) -> dict[str, Any]:
    return {"model": "sim", "prompt": prompt}


def _content(content: object) -> dict[str, Any]:
    return {"model": "sim", "messages": [{"role": "user", "content": content}]}


# (path, body, the field named, words of the message)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    (CHAT, chat_body(stop=["a", "b", "c", "d", "e"]), "stop", "at most 4 items"),
    (CHAT, chat_body(stop=5), "stop", "Input should be a string or an array of strings"),
    (CHAT, chat_body(stop=["a", 1]), "stop.1", "Input should be a valid string"),
    (TEXT, _text([1, 2, 3]), "prompt", "at most 1 item"),
    (TEXT, _text(["a", "b"]), "prompt", "at most 1 item"),
    (TEXT, _text(""), "prompt", "at least 1 character"),
    (TEXT, _text(5), "prompt", "Input should be a string or an array of strings"),
    (CHAT, chat_body(tool_choice="bogus"), "tool_choice", "'none', 'auto' or 'required'"),
    (CHAT, chat_body(tool_choice={"type": "function"}), "tool_choice.function", "required"),
    (CHAT, chat_body(tool_choice=5), "tool_choice", "'required' or an object"),
    (CHAT, _content(5), "messages.0.content", "a string or an array of objects"),
    (
        CHAT,
        _content([{"type": "text", "text": 5}]),
        "messages.0.content.0.text",
        "Input should be a valid string",
    ),
]


@pytest.mark.parametrize(("path", "body", "field", "words"), CASES)
def test_a_field_of_several_shapes_is_named_as_sent(
    server: LiveServer, path: str, body: dict[str, Any], field: str, words: str
) -> None:
    with server.client("sk-dev") as c:
        answer = c.post(path, json=body)
    assert answer.status_code == 400, answer.text  # every case is on OpenAI's routes
    error = answer.json()["error"]
    assert error["field"] == field
    assert error["param"] == field  # what OpenAI's clients read (``e.param``)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_request")
    assert error["message"].startswith(f"{field}: ")
    assert words in error["message"]


class _Cat(BaseModel):
    kind: Literal["cat"]
    lives: Annotated[int, Field(le=9)]


class _Dog(BaseModel):
    kind: Literal["dog"]


class _Pets(BaseModel):
    """Tags that read as field names: a tagged union's ``cat``, a member's class name."""

    pets: list[Annotated[_Cat | _Dog, Field(discriminator="kind")]]
    owner: _Dog | Annotated[list[int], Field(max_length=1)]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            {"pets": [{"kind": "cat", "lives": 10}], "owner": []},
            "pets.0.lives",
            "less than or equal to 9",
        ),
        ({"pets": [], "owner": {"kind": "cat"}}, "owner.kind", "'dog'"),
        ({"pets": [], "owner": [1, 2]}, "owner", "at most 1 item"),
        ({"pets": [], "owner": "x"}, "owner", "Input should be an object or an array of"),
    ],
)
def test_tags_are_told_by_the_schema_not_by_their_look(
    body: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        _Pets.model_validate(body)
    named, message = culprit(refused.value.errors(), schema_of(_Pets))
    assert named == field
    assert words in message


def test_an_llm_node_names_no_tool(server: LiveServer) -> None:
    with server.client() as c:
        assert c.post("/v1/programs", json={"program_id": "no-tool-llm"}).status_code == 201
        nodes = "/v1/programs/no-tool-llm/nodes"
        refused = c.post(nodes, json={"node_id": "a", "kind": "llm", "parents": [], "tool": "web"})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["field"] == error["param"] == "tool"
        assert "llm node" in error["message"]
        assert c.get(f"{nodes}/a").status_code == 404  # nothing declared
        # a null tool is no tool; a tool node still names one
        assert c.post(nodes, json={"node_id": "a", "kind": "llm", "tool": None}).status_code == 201
        assert c.get(f"{nodes}/a").json()["tool"] is None
        tool = {"node_id": "t", "kind": "tool", "parents": ["a"], "tool": "web"}
        assert c.post(nodes, json=tool).status_code == 201
        # and a tool node without one is refused naming the field too
        unnamed = c.post(nodes, json={"node_id": "u", "kind": "tool"})
        assert unnamed.status_code == 422
        assert unnamed.json()["error"]["field"] == "tool"
