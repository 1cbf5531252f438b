"""BMC addresses in Metal3's format: what is accepted, how it is read, and every problem named."""

from __future__ import annotations

import pytest

from local_ccm.bmc.core.address import Address, parse_address, path_of
from local_ccm.validate import ValidationError

SYS = "/redfish/v1/Systems/1"

# (address, driver, scheme, host, port, system path, base URL)
ACCEPTED = [
    # Metal3's documented examples (baremetal-operator docs/api.md, OpenShift's install-config).
    ("redfish://myhost.example/redfish/v1/Systems/MySystemExample", "redfish", "https",
     "myhost.example", 443, "/redfish/v1/Systems/MySystemExample", "https://myhost.example"),
    ("redfish://192.168.122.1/redfish/v1/Systems/System.Embedded.1", "redfish", "https",
     "192.168.122.1", 443, "/redfish/v1/Systems/System.Embedded.1", "https://192.168.122.1"),
    ("redfish-virtualmedia://192.0.2.5/redfish/v1/Systems/1", "redfish-virtualmedia", "https",
     "192.0.2.5", 443, SYS, "https://192.0.2.5"),
    ("idrac-virtualmedia+https://192.0.2.5/redfish/v1/Systems/System.Embedded.1",
     "idrac-virtualmedia", "https", "192.0.2.5", 443, "/redfish/v1/Systems/System.Embedded.1",
     "https://192.0.2.5"),
    ("ilo5-redfish://bmc-7.rack2.example/redfish/v1/Systems/1", "ilo5-redfish", "https",
     "bmc-7.rack2.example", 443, SYS, "https://bmc-7.rack2.example"),
    # Transports and ports.
    ("redfish+http://192.0.2.5/redfish/v1/Systems/1", "redfish", "http", "192.0.2.5", 80, SYS,
     "http://192.0.2.5"),
    ("redfish+https://192.0.2.5:8443/redfish/v1/Systems/1", "redfish", "https", "192.0.2.5",
     8443, SYS, "https://192.0.2.5:8443"),
    ("redfish+http://192.0.2.5:443/redfish/v1/Systems/1", "redfish", "http", "192.0.2.5", 443,
     SYS, "http://192.0.2.5:443"),
    ("redfish://192.0.2.5:443/redfish/v1/Systems/1", "redfish", "https", "192.0.2.5", 443, SYS,
     "https://192.0.2.5"),
    # sushy-tools' System ids are UUIDs.
    ("redfish+http://127.0.0.1:8000/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1ef094",
     "redfish", "http", "127.0.0.1", 8000,
     "/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1ef094", "http://127.0.0.1:8000"),
    # IPv6 literals in brackets, compressed; with and without a port; a zone (RFC 6874).
    ("redfish://[fe80::fc33:62ff:fe83:8a76]:6233/redfish/v1/Systems/1", "redfish", "https",
     "fe80::fc33:62ff:fe83:8a76", 6233, SYS, "https://[fe80::fc33:62ff:fe83:8a76]:6233"),
    ("redfish://[2001:DB8:0:0::1]/redfish/v1/Systems/1", "redfish", "https", "2001:db8::1",
     443, SYS, "https://[2001:db8::1]"),
    ("redfish://[fe80::1%25eth0]/redfish/v1/Systems/1", "redfish", "https", "fe80::1%eth0",
     443, SYS, "https://[fe80::1%eth0]"),
    # Case: schemes and host names are case-insensitive; a trailing slash and blanks go.
    ("Redfish+HTTPS://BMC.Example/redfish/v1/Systems/1/", "redfish", "https", "bmc.example",
     443, SYS, "https://bmc.example"),
    ("  redfish://bmc.example/redfish/v1/Systems/%C3%A9t%C3%A9  ", "redfish", "https",
     "bmc.example", 443, "/redfish/v1/Systems/%C3%A9t%C3%A9", "https://bmc.example"),
]  # fmt: skip


@pytest.mark.parametrize("row", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_an_accepted_address_is_read_into_its_parts(
    row: tuple[str, str, str, str, int, str, str],
) -> None:
    text, driver, scheme, host, port, path, base = row
    address = parse_address(text)
    assert address == Address(driver, scheme, host, port, path)  # type: ignore[arg-type]
    assert address.base_url == base
    assert str(address) == base + path


# (address, every problem it has)
REJECTED = [
    ("", ["'' is not a Redfish BMC address: write it as redfish://bmc.example/redfish/v1/Systems/1 "
          "(redfish+http:// for plain HTTP)"]),
    ("192.0.2.5", ["'192.0.2.5' is not a Redfish BMC address: write it as "
                   "redfish://bmc.example/redfish/v1/Systems/1 (redfish+http:// for plain HTTP)"]),
    # Metal3 accepts these (Ironic then finds the BMC's only System); we need the System.
    ("redfish://192.168.122.1", ["the System path is required, e.g. "
                                 "redfish://bmc.example/redfish/v1/Systems/1"]),
    ("redfish+https://192.168.122.1/redfish/v1/", [
        "the path '/redfish/v1/' is not a System: it must be /redfish/v1/Systems/<id>, e.g. "
        "redfish://bmc.example/redfish/v1/Systems/1"]),
    ("redfish://192.168.122.1:6233/foo", [
        "the path '/foo' is not a System: it must be /redfish/v1/Systems/<id>, e.g. "
        "redfish://bmc.example/redfish/v1/Systems/1"]),
    ("redfish://192.0.2.5/redfish/v1/Systems/", [
        "the path '/redfish/v1/Systems/' is not a System: it must be /redfish/v1/Systems/<id>, "
        "e.g. redfish://bmc.example/redfish/v1/Systems/1"]),
    ("redfish://192.0.2.5/redfish/v1/Systems/1/Bios", [
        "the System id '1/Bios' must be one path segment of URL characters (percent-encode "
        "others)"]),
    # Dot-segments: a server resolves them, /redfish/v1/Systems/.. is the service root.
    *((f"redfish://192.0.2.5/redfish/v1/Systems/{dots}", [
        f"the System id {dots!r} is a dot-segment, not a System's id"])
      for dots in (".", "..", "%2e%2E", "%2E")),
    # Not Redfish.
    ("ipmi://192.0.2.5:623", [
        "ipmi:// is not a Redfish scheme: use redfish://, redfish+http:// or redfish+https:// (or "
        "another Metal3 Redfish driver: redfish, redfish-virtualmedia, redfish-uefihttp, "
        "idrac-redfish, idrac-virtualmedia, ilo5-redfish, ilo5-virtualmedia)",
        "the System path is required, e.g. redfish://bmc.example/redfish/v1/Systems/1"]),
    ("redfish+ftp://192.0.2.5/redfish/v1/Systems/1", [
        "redfish+ftp:// names no transport: after '+' write http or https"]),
    # Hosts and ports.
    ("redfish://fe80::1/redfish/v1/Systems/1", [
        "'fe80::1': an IPv6 address must be in brackets, e.g. [2001:db8::1]:443"]),
    ("redfish://[fe80::zz]/redfish/v1/Systems/1", ["[fe80::zz] is not an IPv6 address"]),
    ("redfish://[fe80::1/redfish/v1/Systems/1", [
        "the IPv6 literal [fe80::1 lacks its closing ']'"]),
    ("redfish://[fe80::1]x/redfish/v1/Systems/1", ["'x' after the IPv6 literal is not ':<port>'"]),
    ("redfish://my-.examplehost.com/redfish/v1/Systems/1", [
        "'my-.examplehost.com' is neither an IPv4 address nor a DNS name"]),
    ("redfish:///redfish/v1/Systems/1", ["the host is missing"]),
    # Numbers the resolver reads as another IPv4 address than written (inet_aton).
    *((f"redfish://{host}/redfish/v1/Systems/1", [
        f"{host!r} is not an IPv4 address as four decimal numbers 0-255 without leading zeros, "
        "e.g. 10.0.0.5 (the resolver reads 010 as octal, 0x0a as hex and 10.1 as 10.0.0.1)"])
      for host in ("010.010.010.010", "10.0.0.05", "0x0a.0.0.1", "10.1", "167772161",
                   "10.0.0.256", "bmc.0x1f", "bmc.42.")),
    ("redfish://192.0.2.5:0/redfish/v1/Systems/1", [
        "the port '0' is not a number from 1 to 65535"]),
    ("redfish://192.0.2.5:/redfish/v1/Systems/1", ["the port '' is not a number from 1 to 65535"]),
    ("redfish://192.0.2.5:65536/redfish/v1/Systems/1", [
        "the port '65536' is not a number from 1 to 65535"]),
    ("redfish://admin:secret@192.0.2.5/redfish/v1/Systems/1", [
        "credentials do not belong in the address: put them in the Secret"]),
    ("redfish://192.0.2.5/redfish/v1/Systems/1?x=1#top", [
        "the address may not carry a fragment (#top)", "the address may not carry a query (?x=1)"]),
    # Every problem at once.
    ("redfish+gopher://[::g]:99999/x", [
        "redfish+gopher:// names no transport: after '+' write http or https",
        "[::g] is not an IPv6 address",
        "the port '99999' is not a number from 1 to 65535",
        "the path '/x' is not a System: it must be /redfish/v1/Systems/<id>, e.g. "
        "redfish://bmc.example/redfish/v1/Systems/1"]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "problems"), REJECTED, ids=[r[0] or "empty" for r in REJECTED])
def test_a_rejected_address_names_every_problem(text: str, problems: list[str]) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_address(text)
    prefix = f"{text.replace('admin:secret', '***')!r}: "
    assert [p.removeprefix(prefix) for p in caught.value.args] == problems


def test_a_password_in_the_address_is_not_repeated_in_the_problems() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_address("redfish://admin:secret@192.0.2.5/x")
    assert "secret" not in str(caught.value)
    assert caught.value.args[0] == (
        "'redfish://***@192.0.2.5/x': credentials do not belong in the address: put them in the "
        "Secret"
    )


def test_the_system_id_is_the_last_segment() -> None:
    assert parse_address("redfish://h/redfish/v1/Systems/System.Embedded.1").system_id == (
        "System.Embedded.1"
    )


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
         "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"),
        ("https://10.0.0.1/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
         "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"),
        ("HTTP://10.0.0.1:8000/x", "/x"),
        ("https://10.0.0.1", None),
        ("ftp://10.0.0.1/x", None),
        ("Actions/Reset", None),
        ("", None),
        (None, None),
        (7, None),
    ],
)  # fmt: skip
def test_a_link_is_reduced_to_its_path(target: object, path: str | None) -> None:
    assert path_of(target) == path
