"""Shared value validators."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local_ccm.labels import (
    LabelSelector,
    Requirement,
    label_value,
    parse_label_selector,
    qualified_name,
)
from local_ccm.validate import (
    BindAddress,
    CountOrPercent,
    ValidationError,
    dns1123_label,
    dns1123_subdomain,
    parse_bind_address,
    parse_cidr,
    parse_cidr_list,
    parse_count_or_percent,
    parse_ip,
    parse_ip_target,
    split_list,
)

T = TypeVar("T")


def try_parse(parser: Callable[[str], T], text: str) -> T | ValidationError:
    """The parsed value, or the `ValidationError` (returned, not raised)."""
    try:
        return parser(text)
    except ValidationError as err:
        return err


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("value", ["a", "kube-system", "0", "a1-b2", "x" * 63])
def test_dns1123_label_accepts_valid_labels(value: str) -> None:
    assert dns1123_label(value) == value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "not a DNS-1123 label"),
        ("Default", "not a DNS-1123 label"),
        ("-a", "not a DNS-1123 label"),
        ("a-", "not a DNS-1123 label"),
        ("a.b", "not a DNS-1123 label"),
        ("a_b", "not a DNS-1123 label"),
        ("x" * 64, "longer than 63"),
    ],
)
def test_dns1123_label_rejects_invalid_labels(value: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        dns1123_label(value)


@pytest.mark.parametrize(
    "value", ["node-1", "node-1.example.com", "a", "1.2.3.4", "x" * 70, ".".join(["a" * 63] * 3)]
)
def test_dns1123_subdomain_accepts_valid_names(value: str) -> None:
    assert dns1123_subdomain(value) == value


@pytest.mark.parametrize(
    "value", ["", "Node-1", "node_1", "node..1", ".node", "node.", "$(NODE_NAME)", "a" * 254]
)
def test_dns1123_subdomain_rejects_invalid_names(value: str) -> None:
    with pytest.raises(ValidationError, match="not a DNS-1123 subdomain"):
        dns1123_subdomain(value)


@pytest.mark.parametrize(
    "value",
    [
        "protected",
        "My.Name_1",
        "example.com/protected",
        "cluster-autoscaler.kubernetes.io/scale-down-disabled",
        "node-role.kubernetes.io/control-plane",
        "a/" + "b" * 63,
    ],
)
def test_qualified_name_accepts_keys_with_optional_prefix(value: str) -> None:
    assert qualified_name(value) == value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "not a valid qualified name"),
        ("/name", "expected name or prefix/name"),
        ("a/b/c", "expected name or prefix/name"),
        ("Example.com/name", 'prefix "Example.com" is not a DNS-1123 subdomain'),
        ("example.com/", "not a valid qualified name"),
        ("-name", "not a valid qualified name"),
        ("name!", "not a valid qualified name"),
        ("a" * 64, "longer than 63"),
    ],
)
def test_qualified_name_rejects_invalid_keys(value: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        qualified_name(value)


@pytest.mark.parametrize("value", ["", "true", "A-b_c.d", "x" * 63])
def test_label_value_accepts_valid_values(value: str) -> None:
    assert label_value(value) == value


@pytest.mark.parametrize("value", ["-a", "a b", "x" * 64, "a/b"])
def test_label_value_rejects_invalid_values(value: str) -> None:
    with pytest.raises(ValidationError, match="label value"):
        label_value(value)


# ---------------------------------------------------------------- lists and numbers


@pytest.mark.parametrize(
    ("text", "items"),
    [("", ()), (" a , b ,, c ,", ("a", "b", "c")), (",", ()), ("one", ("one",))],
)
def test_split_list_trims_and_drops_empty_items(text: str, items: tuple[str, ...]) -> None:
    assert split_list(text) == items


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", CountOrPercent(0, percent=False)),
        ("3", CountOrPercent(3, percent=False)),
        ("0%", CountOrPercent(0, percent=True)),
        ("40%", CountOrPercent(40, percent=True)),
        ("100%", CountOrPercent(100, percent=True)),
    ],
)
def test_count_or_percent_accepts_n_and_p_percent(text: str, expected: CountOrPercent) -> None:
    assert parse_count_or_percent(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("-1", "neither an integer"),
        ("", "neither an integer"),
        ("40.5%", "neither an integer"),
        ("%", "neither an integer"),
        (" 4", "neither an integer"),
        ("101%", "between 0% and 100%"),
        ("150%", "between 0% and 100%"),
    ],
)
def test_count_or_percent_rejects_everything_else(text: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        parse_count_or_percent(text)


def test_try_parse_returns_the_value_or_the_error() -> None:
    assert try_parse(dns1123_label, "ok") == "ok"
    result = try_parse(dns1123_label, "NO")
    assert isinstance(result, ValidationError)
    assert "DNS-1123" in str(result)


# ---------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8092", BindAddress(ipaddress.ip_address("127.0.0.1"), 8092)),
        (":8092", BindAddress(None, 8092)),
        ("[::1]:8092", BindAddress(ipaddress.ip_address("::1"), 8092)),
        ("[::]:0", BindAddress(ipaddress.ip_address("::"), 0)),
        ("0.0.0.0:65535", BindAddress(ipaddress.ip_address("0.0.0.0"), 65535)),
    ],
)
def test_bind_address_parses_host_and_port(text: str, expected: BindAddress) -> None:
    assert parse_bind_address(text) == expected
    assert str(expected) == text


def test_bind_address_zero_disables_the_server() -> None:
    assert parse_bind_address("0") is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "not \\[host\\]:port"),
        ("8092", "not \\[host\\]:port"),
        ("127.0.0.1:", "port must be a number 0-65535"),
        ("127.0.0.1:65536", "port must be a number 0-65535"),
        ("127.0.0.1:http", "port must be a number 0-65535"),
        (":-1", "port must be a number 0-65535"),
        ("::1:8092", "put an IPv6 host in brackets"),
        ("[127.0.0.1]:80", "only IPv6 hosts go in brackets"),
        ("localhost:8080", "not an IP address"),
        ("[fe80::1%eth0]:80", "zone-scoped"),
        ("[::1:80", "not an IP address"),
    ],
)
def test_bind_address_rejects_malformed_addresses(text: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        parse_bind_address(text)


@pytest.mark.parametrize(
    ("text", "network"),
    [
        ("10.0.0.0/8", ipaddress.ip_network("10.0.0.0/8")),
        ("192.0.2.10/32", ipaddress.ip_network("192.0.2.10/32")),
        ("0.0.0.0/0", ipaddress.ip_network("0.0.0.0/0")),
        ("2001:db8::/32", ipaddress.ip_network("2001:db8::/32")),
    ],
)
def test_cidr_parses_to_ipaddress_networks(
    text: str, network: ipaddress.IPv4Network | ipaddress.IPv6Network
) -> None:
    assert parse_cidr(text) == network


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("10.0.0.5/8", "host bits set; did you mean 10.0.0.0/8\\?"),
        ("2001:db8::1/32", "host bits set; did you mean 2001:db8::/32\\?"),
        ("10.0.0.0", "expected address/prefix"),
        ("10.0.0.0/255.0.0.0", "expected address/prefix"),
        ("10.0.0.0/", "expected address/prefix"),
        ("10.0.0.0/33", "prefix length must be 0-32"),
        ("2001:db8::/129", "prefix length must be 0-128"),
        ("10.0.0.256/8", "not an IP address"),
        ("example.com/8", "not an IP address"),
        ("fe80::%eth0/64", "zone-scoped"),
    ],
)
def test_cidr_rejects_invalid_networks_with_hints(text: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        parse_cidr(text)


def test_cidr_list_parses_each_trimmed_item() -> None:
    assert parse_cidr_list(" 10.0.0.0/8, ,2001:db8::/64 ") == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("2001:db8::/64"),
    )


@pytest.mark.parametrize("text", ["8.8.8.8", "192.0.2.1", "2001:db8::1", "127.0.0.1"])
def test_ip_target_accepts_unicast_literals(text: str) -> None:
    assert parse_ip_target(text) == ipaddress.ip_address(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("dns.google", "hostnames are not allowed"),
        ("", "not an IP address"),
        ("fe80::1%eth0", "zone-scoped"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("010.0.0.1", "not an IP address"),
        ("[2001:db8::1]", "not an IP address"),
    ],
)
def test_ip_target_rejects_hostnames_zones_unspecified_and_multicast(
    text: str, reason: str
) -> None:
    with pytest.raises(ValidationError, match=reason):
        parse_ip_target(text)


def test_parse_ip_accepts_unspecified_addresses() -> None:
    assert parse_ip("::") == ipaddress.ip_address("::")


# ---------------------------------------------------------------- label selectors


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("a=b", "a=b"),
        ("a==b", "a=b"),
        ("a!=b", "a!=b"),
        ("a in (y,x,x)", "a in (x,y)"),
        ("a notin (x)", "a notin (x)"),
        ("a", "a"),
        ("!a", "!a"),
        ("a>1", "a>1"),
        ("a<5", "a<5"),
        ("a=", "a="),
        ("a in (x,)", "a in (,x)"),
        ("a in ()", "a in ()"),  # Kubernetes: the empty label value
        ("  b = 1 ,  a  ", "a,b=1"),
        ("z,a=b,!m", "a=b,!m,z"),
        ("a=b,a=b", "a=b"),
        ("example.com/pool in (a),env=prod", "env=prod,example.com/pool in (a)"),
        ("a in(x)", "a in (x)"),
        ("in=notin,notin in (in)", "in=notin,notin in (in)"),
    ],
)
def test_label_selector_parses_kubernetes_syntax_to_canonical_form(
    text: str, canonical: str
) -> None:
    assert str(parse_label_selector(text)) == canonical


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a in (x", "expected ',' or '\\)'"),
        ("a in x", "expected '\\('"),
        ("a=b=c", "expected ',' or end of selector"),
        ("a b", 'expected an operator after "a"'),
        ("a,", "expected a requirement after ','"),
        (",a", "expected a label key"),
        ("!", "expected a label key, found end of selector"),
        ("!a=b", "expected ',' or end of selector"),
        ("a>b", "need an integer"),
        ("a>99999999999999999999999", "fits in 64 bits"),
        ("a=(b)", "expected a value"),
        ("a~b", "not a valid qualified name"),
        ("Bad Key=1", "expected an operator"),
        ("a<-1", "label value"),  # Kubernetes validates Gt/Lt values as label values too
        ("a=b c", "expected ',' or end of selector"),
        ("a=" + "x" * 64, "label value"),
        ("a (", "expected an operator"),
    ],
)
def test_label_selector_rejects_invalid_selectors_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason) as info:
        parse_label_selector(text)
    assert str(info.value).startswith("invalid label selector ")


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", {}, True),
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=b", {}, False),
        ("a!=b", {}, True),
        ("a!=b", {"a": "b"}, False),
        ("a in (x,y)", {"a": "y"}, True),
        ("a in (x,y)", {}, False),
        ("a in ()", {"a": ""}, True),
        ("a notin (x)", {}, True),
        ("a notin (x)", {"a": "x"}, False),
        ("a", {"a": ""}, True),
        ("a", {}, False),
        ("!a", {}, True),
        ("!a", {"a": "x"}, False),
        ("a=", {"a": ""}, True),
        ("a>1", {"a": "2"}, True),
        ("a>1", {"a": "1"}, False),
        ("a>1", {"a": "x"}, False),
        ("a<1", {"a": "-5"}, True),
        ("a<1", {}, False),
        ("a=b,c", {"a": "b"}, False),
        ("a=b,c", {"a": "b", "c": "1"}, True),
    ],
)
def test_label_selector_matches_with_kubernetes_semantics(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


def test_label_selector_exposes_requirements() -> None:
    assert parse_label_selector("b notin (y,x), !a") == LabelSelector(
        (Requirement("a", "DoesNotExist"), Requirement("b", "NotIn", ("x", "y")))
    )


def test_requirement_canonicalises_in_values() -> None:
    assert str(Requirement("ipv4", "In", ("true", "true"))) == "ipv4 in (true)"


keys = st.sampled_from(["a", "b", "example.com/pool", "x.y_z"])
label_values = st.sampled_from(["", "v", "1", "true", "A-b.c"])
requirements = st.one_of(
    st.tuples(keys, st.sampled_from(["=", "==", "!="]), label_values).map("".join),
    st.tuples(keys, st.sampled_from([" in ", " notin "]), st.lists(label_values, min_size=1)).map(
        lambda r: f"{r[0]}{r[1]}({','.join(r[2])})"
    ),
    st.tuples(st.sampled_from(["", "!"]), keys).map("".join),
    st.tuples(keys, st.sampled_from([">", "<"]), st.sampled_from(["0", "7"])).map("".join),
)
selectors = st.lists(requirements, max_size=4).map(", ".join)


@given(selectors)
def test_label_selector_canonical_form_is_a_fixed_point(text: str) -> None:
    selector = parse_label_selector(text)
    assert parse_label_selector(str(selector)) == selector


@given(selectors, st.dictionaries(keys, label_values))
def test_label_selector_canonical_form_matches_the_same_labels(
    text: str, labels: dict[str, str]
) -> None:
    selector = parse_label_selector(text)
    assert parse_label_selector(str(selector)).matches(labels) is selector.matches(labels)


@given(st.ip_addresses(), st.integers(0, 128))
def test_cidr_host_bits_hint_is_itself_valid(address: object, prefix: int) -> None:
    parsed = ipaddress.ip_address(str(address))
    prefix = min(prefix, parsed.max_prefixlen)
    result = try_parse(parse_cidr, f"{parsed}/{prefix}")
    if isinstance(result, ValidationError):
        hint = str(result).split("did you mean ")[1].rstrip("?")
        assert parse_cidr(hint) == ipaddress.ip_network(f"{parsed}/{prefix}", strict=False)
    else:
        assert result.network_address == parsed
