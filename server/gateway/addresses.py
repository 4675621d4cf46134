"""Which IP addresses a tenant's tool may reach: public unicast ones only.

Shared by the registration check of a URL's literal host (:mod:`.semantic`) and the egress
policy that checks every address a name resolves to at call time (:mod:`.egress`), so both
refuse the same set. An IPv6 address that carries an IPv4 one is judged by what it carries:
IPv4-mapped (``::ffff:a.b.c.d``) and NAT64 (``64:ff9b::a.b.c.d``, RFC 6052) are translated to
the IPv4 address, so only it counts; 6to4 (``2002:AABB:CCDD::``) and Teredo (``2001::/32``)
tunnel to it, so it and the IPv6 address itself must both be public (Teredo never is).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, IPv6Network

IPAddress = IPv4Address | IPv6Address

#: NAT64's well-known prefix: the low 32 bits are the IPv4 destination.
_NAT64 = IPv6Network("64:ff9b::/96")


def _translated(addr: IPv6Address) -> IPv4Address | None:
    """The IPv4 address a packet to ``addr`` really goes to (mapped or NAT64), if any."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr in _NAT64:
        return IPv4Address(int(addr) & 0xFFFF_FFFF)
    return None


def _tunnelled(addr: IPv6Address) -> tuple[IPv4Address, ...]:
    """The IPv4 endpoints a 6to4 or Teredo address names (empty for any other address)."""
    if addr.sixtofour is not None:
        return (addr.sixtofour,)
    if addr.teredo is not None:
        return addr.teredo
    return ()


def _public_itself(addr: IPAddress) -> bool:
    # ``is_global`` alone lets multicast, the reserved ::/8 (IPv4-compatible ::a.b.c.d) and
    # the deprecated site-local fec0::/10 through on Python 3.11, hence the explicit tests.
    site_local = isinstance(addr, IPv6Address) and addr.is_site_local
    return addr.is_global and not (
        addr.is_multicast
        or addr.is_reserved
        or addr.is_private
        or addr.is_loopback
        or addr.is_link_local
        or addr.is_unspecified
        or site_local
    )


def is_public(addr: IPAddress) -> bool:
    """Whether ``addr`` is a public unicast address, judging an IPv6 address that carries an
    IPv4 one by that IPv4 address (see the module docstring)."""
    if isinstance(addr, IPv6Address):
        translated = _translated(addr)
        if translated is not None:
            return is_public(translated)
        if not all(is_public(inner) for inner in _tunnelled(addr)):
            return False
    return _public_itself(addr)
