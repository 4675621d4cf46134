"""Semantic argument checks: characters, paths, URLs (never resolved)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.server.gateway.errors import UnsafeArguments
from agentconsole.server.gateway.semantic import check_arguments, check_url

BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


@pytest.mark.parametrize(
    "arguments",
    [
        {"text": "hello, world\nline two\ttab"},
        {"path": "docs/readme.md"},
        {"file": "a/b.c/d..e"},
        {"url": "https://example.com/x?y=1"},
        {"note": "see http://example.com/a and 1..2"},
        {"items": [{"path": "src/x.py"}, "plain"]},
        {"name": "Zoë 東京 🙂"},
    ],
)
def test_ordinary_arguments_pass(arguments: dict[str, object]) -> None:
    check_arguments(arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"path": "../x"}, "/path"),
        ({"nested": {"dir": "/etc"}}, "/nested/dir"),
        ({"files": ["ok", "~/.ssh"]}, "/files/1"),
        ({"config_path": "C:\\x"}, "/config_path"),
        ({"path": "%2e%2e/x"}, "/path"),
        ({"path": "%252e%252e/x"}, "/path"),
        ({"query": "a/../../b"}, "/query"),
        ({"webhook_url": "http://10.0.0.1/"}, "/webhook_url"),
        ({"text": "gopher://x.example/"}, "/text"),
        ({"t\u202ext": "x"}, "/t\u202ext"),
        ({"text": "a\x00b"}, "/text"),
    ],
)
def test_unsafe_arguments_are_refused_at_their_pointer(
    arguments: dict[str, object], field: str
) -> None:
    with pytest.raises(UnsafeArguments) as info:
        check_arguments(arguments)  # type: ignore[arg-type]
    assert info.value.field == field


@given(st.text(max_size=20), st.sampled_from(BIDI), st.text(max_size=20))
def test_any_string_with_a_bidi_control_is_refused(head: str, bidi: str, tail: str) -> None:
    with pytest.raises(UnsafeArguments):
        check_arguments({"text": head + bidi + tail})


@given(st.ip_addresses(v=4).filter(lambda a: not a.is_global or a.is_multicast))
def test_every_spelling_of_a_non_public_ipv4_is_refused(address: ipaddress.IPv4Address) -> None:
    value = int(address)
    octets = str(address).split(".")
    spellings = [
        str(address),
        str(value),
        hex(value),
        ".".join(f"0{int(o):o}" for o in octets),
        f"{octets[0]}.{value & 0xFFFFFF}",
        f"[::ffff:{address}]",
    ]
    for host in spellings:
        with pytest.raises(UnsafeArguments):
            check_url(f"http://{host}/x", "/url")


@given(st.ip_addresses(v=4).filter(lambda a: a.is_global and not a.is_multicast))
def test_public_addresses_pass(address: ipaddress.IPv4Address) -> None:
    check_url(f"https://{address}/x", "/url")
    check_url(f"https://{int(address)}/x", "/url")


@pytest.mark.parametrize(
    "host",
    [
        "[64:ff9b::7f00:1]",  # NAT64 of 127.0.0.1
        "[64:ff9b::a9fe:a9fe]",  # NAT64 of 169.254.169.254
        "[2002:7f00:1::]",  # 6to4 of 127.0.0.1
        "[::127.0.0.1]",  # IPv4-compatible
        "[fec0::1]",  # site-local
        "[ff02::1]",  # multicast
        "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",  # Teredo
    ],
)
def test_ipv6_forms_of_non_public_addresses_are_refused(host: str) -> None:
    with pytest.raises(UnsafeArguments) as info:
        check_url(f"http://{host}/x", "/url")
    assert host.strip("[]") not in info.value.message  # audited: no value quoted


def test_an_ipv6_form_of_a_public_address_passes() -> None:
    check_url("http://[64:ff9b::808:808]/x", "/url")
    check_url("http://[2606:4700::1111]/x", "/url")
