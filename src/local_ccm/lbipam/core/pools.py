"""LoadBalancer address pools as the allocator reads them. Pure, no I/O.

The model and the parsing of `LoadBalancerIPPool` objects are `local_ccm.lbpools`, below the
components, because the agent's L2 announcement reads the same objects (which pool an address
is in, whether and where it is announced) and one component may not import another. Named here
again so that the allocator's modules keep one import path for their pool vocabulary.
"""

from __future__ import annotations

from local_ccm.lbpools import (
    GROUP,
    KIND,
    SELECTOR_OPERATORS,
    AddressRange,
    InvalidPool,
    IPAddress,
    Pool,
    address_key,
    buggy_count,
    is_buggy,
    merge,
    ordered,
    parse_address_text,
    parse_addresses,
    parse_label_selector,
    parse_pool,
    to_address,
    unusable,
)

__all__ = [
    "GROUP",
    "KIND",
    "SELECTOR_OPERATORS",
    "AddressRange",
    "IPAddress",
    "InvalidPool",
    "Pool",
    "address_key",
    "buggy_count",
    "is_buggy",
    "merge",
    "ordered",
    "parse_address_text",
    "parse_addresses",
    "parse_label_selector",
    "parse_pool",
    "to_address",
    "unusable",
]
