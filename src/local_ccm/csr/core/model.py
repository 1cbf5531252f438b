"""What the approver decides on: a CSR, its parsed request and the requester's Node, as plain
frozen data. Pure, no I/O."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from local_ccm import names
from local_ccm.records import dataclass

SIGNER: Final = "kubernetes.io/kubelet-serving"
NODE_USER_PREFIX: Final = "system:node:"
NODES_GROUP: Final = "system:nodes"
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
KeyKind = Literal["rsa", "ecdsa", "ed25519", "other"]
# kubelet-csr-approver's default and ceiling for spec.expirationSeconds (its --max-expiration-sec)
DEFAULT_MAX_EXPIRATION: Final = 367 * 24 * 3600


@dataclass(frozen=True)
class Request:
    """A PKCS#10 request as parsed (`csr.parse`): subject, SANs, key and self-signature."""

    common_names: tuple[str, ...]
    organizations: tuple[str, ...]
    other_subject: tuple[str, ...]  # any other subject attribute, as "OU=value" (short name)
    dns_names: tuple[str, ...]
    ip_addresses: tuple[IPAddress, ...]
    emails: tuple[str, ...]
    uris: tuple[str, ...]
    key_kind: KeyKind
    key_size: int  # RSA modulus bits, or the curve's size
    curve: str  # "secp256r1", "secp384r1", … for ECDSA, else ""
    signature_valid: bool


@dataclass(frozen=True)
class Csr:
    """The parts of a CertificateSigningRequest the decision reads."""

    name: str = ""
    uid: str = ""
    signer: str = ""
    username: str = ""
    groups: tuple[str, ...] = ()
    usages: tuple[str, ...] = ()
    decided: bool = False  # has an Approved or Denied condition
    request: bytes = b""  # spec.request, PEM
    expiration_seconds: int | None = None  # spec.expirationSeconds; None: the signer decides

    @property
    def node_name(self) -> str:
        """The Node the requester claims to be ("" when not a node identity)."""
        if self.username.startswith(NODE_USER_PREFIX):
            return self.username.removeprefix(NODE_USER_PREFIX)
        return ""


@dataclass(frozen=True)
class Node:
    """The requester's Node: initialised or not, and the names and addresses it may use
    (names as its status writes them, compared by `dns_key`; IPv4-mapped addresses as IPv4)."""

    name: str
    uid: str
    initialised: bool
    ips: frozenset[IPAddress]
    dns_names: frozenset[str]


@dataclass(frozen=True)
class Policy:
    """The operator's limits on top of the Node's own names and addresses."""

    ip_prefixes: tuple[IPNetwork, ...] = ()  # --csr-ip-prefixes; empty: no restriction
    max_expiration: float = DEFAULT_MAX_EXPIRATION  # --csr-max-expiration, seconds; 0: none


_IP_TYPES = ("InternalIP", "ExternalIP")
_DNS_TYPES = ("Hostname", "InternalDNS", "ExternalDNS")


def _conditions_decided(status: Mapping[str, Any]) -> bool:
    kinds = {str(c.get("type", "")) for c in status.get("conditions") or ()}
    return bool(kinds & {"Approved", "Denied"})


def project_csr(obj: Mapping[str, Any]) -> Csr:
    """The API object as a `Csr` (`spec.request` is base64 on the wire)."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    try:
        request = base64.b64decode(spec.get("request") or "", validate=True)
    except (ValueError, TypeError):  # not base64, or not a string at all
        request = b""
    return Csr(
        name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
        signer=str(spec.get("signerName", "")), username=str(spec.get("username", "")),
        groups=tuple(spec.get("groups") or ()), usages=tuple(spec.get("usages") or ()),
        decided=_conditions_decided(obj.get("status") or {}), request=request,
        expiration_seconds=_int_or_none(spec.get("expirationSeconds")),
    )  # fmt: skip


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mapped_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped IPv6 address (`::ffff:10.0.0.7`) stands for: a
    certificate carries it as that IPv4 address (Go's x509 writes it in 4 bytes), and TLS
    clients compare it as one."""
    return ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None


def dns_key(name: str) -> str:
    """A DNS name as TLS compares it: case-insensitive, a trailing dot ignored."""
    return name.lower().removesuffix(".")


def _parsed_ips(texts: Iterable[str]) -> frozenset[IPAddress]:
    """The texts that are IP addresses, parsed (anything else is no address of the Node); an
    IPv4-mapped one as the IPv4 address it stands for, so another Node's `::ffff:10.0.0.7`
    counts as showing 10.0.0.7."""
    found: set[IPAddress] = set()
    for text in texts:
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(text)
            found.add(mapped_ipv4(ip) or ip)
    return frozenset(found)


def project_node(obj: Mapping[str, Any]) -> Node:
    """The API object as a `Node`."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    addresses = (obj.get("status") or {}).get("addresses") or ()
    taints = {str(t.get("key", "")) for t in spec.get("taints") or ()}
    ips = _parsed_ips(str(a.get("address", "")) for a in addresses if a.get("type") in _IP_TYPES)
    dns = {str(a.get("address", "")) for a in addresses if a.get("type") in _DNS_TYPES}
    return Node(
        name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
        initialised=names.UNINITIALIZED_TAINT not in taints,
        ips=ips, dns_names=frozenset(dns),
    )  # fmt: skip
