"""BMC addresses as Metal3 operators write them in a BareMetalHost's ``spec.bmc.address``.
Pure, no I/O.

``redfish://host[:port]/redfish/v1/Systems/<id>`` speaks HTTPS, ``redfish+http://`` plain HTTP
and ``redfish+https://`` HTTPS again; Metal3's other Redfish drivers (``redfish-virtualmedia``,
``idrac-redfish``, ``ilo5-redfish``, ...) name the same protocol, so an address copied from a
BareMetalHost is accepted as it is (baremetal-operator, pkg/hardwareutils/bmc). Unlike Metal3,
which lets Ironic find the only System of a BMC, the System path is required: the controller
reads one System and must never guess which.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Final, Literal

from local_ccm.records import dataclass
from local_ccm.validate import ValidationError

Scheme = Literal["http", "https"]
SYSTEMS_PREFIX: Final = "/redfish/v1/Systems/"
# Metal3's Redfish drivers (RegisterFactory in baremetal-operator): each is also accepted with
# "+http" or "+https".
REDFISH_DRIVERS: Final = (
    "redfish",
    "redfish-virtualmedia",
    "redfish-uefihttp",
    "idrac-redfish",
    "idrac-virtualmedia",
    "ilo5-redfish",
    "ilo5-virtualmedia",
)
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
EXAMPLE: Final = "redfish://bmc.example/redfish/v1/Systems/1"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.S)
_DNS_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")
# A last label the resolver reads as a number (WHATWG URL's "ends in a number"): inet_aton takes
# 010 as octal, 0x0a as hex and 10.1 or 167772161 as 10.0.0.1.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")
_USERINFO = re.compile(r"//[^/?#]*@")
# RFC 3986 pchar, as one path segment: unreserved, percent-encoded, sub-delims, ":" and "@".
_SEGMENT = re.compile(r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})+")


@dataclass(frozen=True)
class Address:
    """Where one System lives: ``base_url`` + ``system_path`` is its resource."""

    driver: str  # the Metal3 driver named by the scheme: "redfish", "idrac-redfish", ...
    scheme: Scheme
    host: str  # a DNS name, an IPv4 address or an IPv6 address (without brackets)
    port: int
    system_path: str  # "/redfish/v1/Systems/<id>", no trailing slash

    @property
    def netloc(self) -> str:
        """``host[:port]`` as a URL writes it: IPv6 in brackets, the scheme's port left out."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS[self.scheme] == self.port else f"{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.netloc}"

    @property
    def system_id(self) -> str:
        return self.system_path.removeprefix(SYSTEMS_PREFIX)

    def __str__(self) -> str:
        return self.base_url + self.system_path


def parse_address(text: str) -> Address:
    """The address, or `ValidationError` naming every problem of it."""
    match = _SCHEME.fullmatch(text.strip())
    if match is None:
        raise ValidationError(
            f"{text!r} is not a Redfish BMC address: write it as {EXAMPLE} "
            "(redfish+http:// for plain HTTP)"
        )
    problems: list[str] = []
    driver, scheme = _scheme(match.group(1).lower(), problems)
    rest = match.group(2)
    rest = _cut(rest, "#", "a fragment", problems)
    rest = _cut(rest, "?", "a query", problems)
    authority, slash, path = rest.partition("/")
    host, port = _authority(authority, scheme or "https", problems)
    system_path = _system_path(slash + path, problems)
    if problems or scheme is None or host is None or port is None or system_path is None:
        shown = _USERINFO.sub("//***@", text)  # the problems are logged and shown in status
        raise ValidationError(*(f"{shown!r}: {p}" for p in problems))
    return Address(driver, scheme, host, port, system_path)


def _scheme(scheme: str, problems: list[str]) -> tuple[str, Scheme | None]:
    driver, plus, transport = scheme.partition("+")
    if driver not in REDFISH_DRIVERS:
        problems.append(
            f"{scheme}:// is not a Redfish scheme: use redfish://, redfish+http:// or "
            f"redfish+https:// (or another Metal3 Redfish driver: {', '.join(REDFISH_DRIVERS)})"
        )
        return driver, None
    if not plus:
        return driver, "https"
    if transport == "http":
        return driver, "http"
    if transport == "https":
        return driver, "https"
    problems.append(f"{scheme}:// names no transport: after '+' write http or https")
    return driver, None


def _cut(text: str, mark: str, what: str, problems: list[str]) -> str:
    head, found, tail = text.partition(mark)
    if found:
        problems.append(f"the address may not carry {what} ({mark}{tail})")
    return head


def _authority(authority: str, scheme: Scheme, problems: list[str]) -> tuple[str | None, int]:
    if "@" in authority:
        problems.append("credentials do not belong in the address: put them in the Secret")
        authority = authority.rpartition("@")[2]
    if authority.startswith("["):
        host_text, bracket, port_text = authority[1:].partition("]")
        host = _ipv6(host_text, problems) if bracket else None
        if not bracket:
            problems.append(f"the IPv6 literal [{host_text} lacks its closing ']'")
        elif port_text and not port_text.startswith(":"):
            problems.append(f"{port_text!r} after the IPv6 literal is not ':<port>'")
        has_port = port_text.startswith(":")
        port_text = port_text[1:]
    else:
        if authority.count(":") > 1:
            problems.append(
                f"{authority!r}: an IPv6 address must be in brackets, e.g. [2001:db8::1]:443"
            )
            return None, DEFAULT_PORTS[scheme]
        host_text, colon, port_text = authority.partition(":")
        host = _hostname(host_text, problems)
        has_port = bool(colon)
    return host, _port(port_text, has_port, scheme, problems)


def _ipv6(text: str, problems: list[str]) -> str | None:
    # RFC 6874: a zone identifier is written %25<zone> inside the brackets.
    address, _, zone = text.partition("%25")
    try:
        parsed = ipaddress.IPv6Address(address)
    except ValueError:
        problems.append(f"[{text}] is not an IPv6 address")
        return None
    return f"{parsed.compressed}%{zone}" if zone else parsed.compressed


def _hostname(text: str, problems: list[str]) -> str | None:
    if not text:
        problems.append("the host is missing")
        return None
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        # Not a DNS name (a top-level label is never all-numeric, RFC 3696 section 2), and the
        # resolver would read it as another IPv4 address than the one written (010.0.0.5 is
        # 8.0.0.5): the credentials and a ForceOff would go to that machine.
        problems.append(
            f"{text!r} is not an IPv4 address as four decimal numbers 0-255 without leading "
            "zeros, e.g. 10.0.0.5 (the resolver reads 010 as octal, 0x0a as hex and 10.1 as "
            "10.0.0.1)"
        )
        return None
    if len(text) > 253 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        problems.append(f"{text!r} is neither an IPv4 address nor a DNS name")
        return None
    return text.lower()


def _port(text: str, given: bool, scheme: Scheme, problems: list[str]) -> int:
    if not given:
        return DEFAULT_PORTS[scheme]
    if not _PORT.fullmatch(text) or not 0 < int(text) < 65536:
        problems.append(f"the port {text!r} is not a number from 1 to 65535")
        return DEFAULT_PORTS[scheme]
    return int(text)


def _system_path(path: str, problems: list[str]) -> str | None:
    if path in ("", "/"):
        problems.append(f"the System path is required, e.g. {EXAMPLE}")
        return None
    trimmed = path[:-1] if path.endswith("/") and path != SYSTEMS_PREFIX else path
    system_id = trimmed.removeprefix(SYSTEMS_PREFIX)
    if not trimmed.startswith(SYSTEMS_PREFIX) or not system_id:
        problems.append(
            f"the path {path!r} is not a System: it must be {SYSTEMS_PREFIX}<id>, e.g. {EXAMPLE}"
        )
        return None
    if not _SEGMENT.fullmatch(system_id):
        problems.append(
            f"the System id {system_id!r} must be one path segment of URL characters "
            "(percent-encode others)"
        )
        return None
    if system_id.lower().replace("%2e", ".") in (".", ".."):
        # A dot-segment (RFC 3986 5.2.4): servers resolve it before routing, so
        # /redfish/v1/Systems/.. is the service root, not a System.
        problems.append(f"the System id {system_id!r} is a dot-segment, not a System's id")
        return None
    return trimmed


def path_of(target: Any) -> str | None:
    """The path a Redfish link names: a URI path as it is, an absolute http(s) URL (some BMCs
    send one) reduced to its path; None for anything else."""
    if not isinstance(target, str) or not target:
        return None
    if target.startswith("/"):
        return target
    scheme, sep, rest = target.partition("://")
    if sep and scheme.lower() in ("http", "https"):
        _, slash, path = rest.partition("/")
        return slash + path if slash else None
    return None
