"""Semantic checks of tool arguments that a JSON Schema cannot express (research §3.4).

Run after schema validation, over every string in the arguments (keys included):

* control and bidirectional-override characters are refused everywhere (they hide text from
  the humans who review calls: "Trojan Source");
* a string under a path-like key (``path``, ``file``, ``dir``, ... or ``*_path``) must be a
  relative path without ``..`` segments, ``~``, a drive letter or an encoded dot; any other
  string without spaces that contains a ``..`` path segment is refused as traversal too;
* a string that looks like a URL (``scheme://`` or under a URL-like key) must be ``http`` or
  ``https`` to a host that is not loopback, private, link-local, reserved, site-local, an
  IPv6 form carrying such an IPv4 address (mapped, NAT64, 6to4, Teredo: :mod:`.addresses`), a
  bare-integer or octal/hex IP, ``localhost`` or an internal name. Nothing is resolved or
  fetched here: an ``http`` executor's own URL is resolved and checked again on every call by
  :mod:`.egress`; a URL in the arguments is the downstream tool's to guard when it fetches it.

All checks are pure functions of the arguments, so they never cause a side effect.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

from agentconsole.server.gateway.addresses import IPAddress, is_public
from agentconsole.server.gateway.errors import UnsafeArguments
from agentconsole.server.store.jsonutil import JSONValue

_ALLOWED_CONTROLS = frozenset("\t\n\r")
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_INVISIBLE = frozenset("\u200b\u200c\u200d\u2060\ufeff")
_PATH_KEY = re.compile(r"(^|_)(path|paths|file|files|filename|filepath|dir|directory|folder)$")
_URL_KEY = re.compile(r"(^|_)(url|urls|uri|href|endpoint|link|webhook)$")
_URL_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_TRAVERSAL = re.compile(r"(^|[/\\])\.\.([/\\]|$)")
_ENCODED_DOT = re.compile(r"%(2e|c0%ae|e0%80%ae)|%2f|%5c", re.IGNORECASE)
_DRIVE = re.compile(r"^[A-Za-z]:")
_NUMBER = re.compile(r"0x[0-9a-f]*|[0-9]+")
_INTERNAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa")
_INTERNAL_NAMES = frozenset({"localhost", "localhost.localdomain", "metadata", "metadata.google"})


def _strings(value: JSONValue, key: str, pointer: str) -> Iterator[tuple[str | None, str, str]]:
    """Every string in ``value`` as ``(nearest property name, pointer, text)``; property names
    themselves come with ``None`` (they are only checked for characters)."""
    if isinstance(value, str):
        yield key, pointer, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield None, f"{pointer}/{k}", k
            yield from _strings(v, k.lower(), f"{pointer}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, key, f"{pointer}/{i}")


def check_characters(text: str, pointer: str) -> None:
    """Refuse control (C0 but tab/newline/CR, DEL, C1), bidi and zero-width characters."""
    for ch in text:
        if ch in _ALLOWED_CONTROLS:
            continue
        if ch in _BIDI or ch in _INVISIBLE or unicodedata.category(ch) == "Cc":
            raise UnsafeArguments(
                f"control, bidi or invisible character U+{ord(ch):04X} is not allowed",
                field=pointer,
            )


def _decodings(text: str) -> list[str]:
    """``text`` and its successive percent-decodings (double encoding is a classic bypass)."""
    out = [text]
    for _ in range(3):
        decoded = unquote(out[-1])
        if decoded == out[-1]:
            break
        out.append(decoded)
    return out


def check_path(text: str, pointer: str) -> None:
    """Refuse absolute, home-relative, drive-letter, encoded or ``..``-containing paths, at
    every level of percent-decoding."""
    for form in _decodings(text):
        if (
            form.startswith(("/", "\\", "~"))
            or _DRIVE.match(form)
            or _TRAVERSAL.search(form)
            or _ENCODED_DOT.search(form)
            or "\x00" in form
        ):
            raise UnsafeArguments(
                "paths must be relative, without '..', '~', drive letters or encoded separators",
                field=pointer,
            )


def _inet_aton(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address the C resolver reads from ``host`` (``0x7f.1``, ``2130706433``,
    ``0177.0.0.1``...), 0.0.0.0 for a malformed number, ``None`` for a name."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_NUMBER.fullmatch(p) for p in parts):
        return None
    try:
        nums = [
            int(p, 16) if p.startswith("0x") else int(p, 8 if p[0] == "0" else 10) for p in parts
        ]
    except ValueError:
        return ipaddress.IPv4Address(0)
    widths = (32,) if len(parts) == 1 else (8,) * (len(parts) - 1) + (8 * (5 - len(parts)),)
    value = 0
    for num, width in zip(nums, widths, strict=True):
        if num >= 1 << width:
            return ipaddress.IPv4Address(0)
        value = (value << width) | num
    return ipaddress.IPv4Address(value)


def _numeric_host(host: str) -> IPAddress | None:
    """The address ``host`` spells, in any numeric form; ``None`` for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return _inet_aton(host)


def check_url(text: str, pointer: str, *, allow_private: bool = False) -> None:
    """Refuse non-HTTP(S) URLs and URLs to loopback, private, link-local or internal hosts."""
    if any(ch.isspace() or ch == "\\" for ch in text.strip()):
        raise UnsafeArguments("URLs may not contain spaces or backslashes", field=pointer)
    try:
        parts = urlsplit(text.strip())
        host = (parts.hostname or "").rstrip(".").lower()
    except ValueError as error:
        raise UnsafeArguments(f"malformed URL: {error}", field=pointer) from error
    if parts.scheme.lower() not in ("http", "https"):
        raise UnsafeArguments("only http and https URLs are allowed", field=pointer)
    if not host:
        raise UnsafeArguments("the URL has no host", field=pointer)
    if allow_private:
        return
    # the messages do not quote the host: an audit row keeps them, never argument values
    addr = _numeric_host(host)
    if addr is not None and not is_public(addr):
        raise UnsafeArguments("the URL's host is not a public address", field=pointer)
    internal = host in _INTERNAL_NAMES or host.endswith(_INTERNAL_SUFFIXES)
    if internal or (addr is None and "." not in host):
        raise UnsafeArguments("the URL's host is an internal name", field=pointer)


def check_arguments(arguments: JSONValue) -> None:
    """Run every semantic check over ``arguments``; raise :class:`UnsafeArguments` at the
    first violation, naming its JSON pointer (``/a/0/b``) in ``field``."""
    for key, pointer, text in _strings(arguments, "", ""):
        check_characters(text, pointer or "/")
        if key is None:
            continue
        if _PATH_KEY.search(key):
            check_path(text, pointer)
        elif " " not in text and any(_TRAVERSAL.search(f) for f in _decodings(text)):
            raise UnsafeArguments("'..' path segments are not allowed", field=pointer)
        if _URL_KEY.search(key) or _URL_LIKE.match(text.strip()):
            check_url(text, pointer)
