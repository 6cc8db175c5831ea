"""Principals as Kafka's ``DefaultKafkaPrincipalBuilder`` builds them: ``User:ANONYMOUS`` on a
PLAINTEXT listener (and on SSL without a client certificate), ``User:<name>`` of the SASL user, and
on SSL the client certificate's distinguished name (RFC 2253, as Java's ``X500Principal.getName()``)
mapped by ``ssl.principal.mapping.rules`` (Kafka's ``SslPrincipalMapper``: ``DEFAULT`` keeps the
name, ``RULE:pattern/replacement/[LU]`` replaces a name the pattern matches whole, the first
matching rule wins)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from kafkalog.errors import InvalidConfigError

ANONYMOUS = "User:ANONYMOUS"

#: the attribute keywords of RFC 2253 (and Java's) for the names Python's ``getpeercert`` gives
_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU])?)\s*(?:,|$)")


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(cert: object) -> str | None:
    """The subject of a certificate as ``ssl.SSLSocket.getpeercert()`` gives it, in RFC 2253 form."""
    if not isinstance(cert, dict) or not cert.get("subject"):
        return None
    rdns = []
    for rdn in reversed(cert["subject"]):
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None          # None: DEFAULT
    replacement: str
    case: str | None


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``."""

    def __init__(self, text: str | None) -> None:
        text = (text or "DEFAULT").strip()
        rules: list[_Rule] = []
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise InvalidConfigError(f"Invalid value {text!r} for configuration ssl.principal.mapping.rules: "
                                         f"invalid rule at {text[pos:]!r}")
            pos = m.end()
            if m.group(1):
                rules.append(_Rule(None, "", None))
                continue
            try:
                pattern = re.compile(m.group(2).replace("\\/", "/"))
            except re.error as e:
                raise InvalidConfigError(f"Invalid value {text!r} for configuration ssl.principal.mapping.rules: "
                                         f"{e}") from None
            replacement = re.sub(r"\$(\d)", r"\\g<\1>", m.group(3).replace("\\/", "/"))
            rules.append(_Rule(pattern, replacement, m.group(4)))
        self.rules = tuple(rules)

    def name(self, dn: str) -> str:
        for r in self.rules:
            if r.pattern is None:
                return dn
            if r.pattern.fullmatch(dn):
                out = r.pattern.sub(r.replacement, dn)
                return out.lower() if r.case == "L" else out.upper() if r.case == "U" else out
        raise InvalidConfigError(f"No rules apply to {dn}, rules {[r.pattern for r in self.rules]}")


def tls_principal(cert: object, mapper: SslPrincipalMapper) -> str:
    """The principal of a TLS client: its certificate's mapped name, else ``User:ANONYMOUS``."""
    dn = distinguished_name(cert)
    return ANONYMOUS if dn is None else "User:" + mapper.name(dn)


def client_host(addr: object) -> str:
    """The client's address as Java's ``InetAddress.getHostAddress()`` writes it (what an ACL's host is
    compared with): IPv4 dotted, IPv6 as eight uncompressed hexadecimal groups (``0:0:0:0:0:0:0:1``)."""
    host = addr[0] if isinstance(addr, tuple) and addr and isinstance(addr[0], str) else ""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return ":".join(format(int(g, 16), "x") for g in ip.exploded.split(":"))
    return str(ip)
