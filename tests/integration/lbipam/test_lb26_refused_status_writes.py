"""LB26: a Service whose status write the API server refuses holds no address.

An admission policy refuses every status write of one Service. Each refusal certainly did not
land, so the address its decision reserved goes back before the retry (an earlier release
kept every refused attempt's address until a restart, and a small pool ran dry behind a status
that showed nothing used). Four refusals later, in a pool of two addresses, another Service
still gets one, and the refused Service, once the policy goes, the other: nothing leaked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from local_ccm.kube.client import Client, Obj
from local_ccm.kube.errors import ApiError, NotFound
from local_ccm.lbipam.api import SERVICES
from tests.integration.lbipam.conftest import StartLb
from tests.support import lb
from tests.support import resources as r
from tests.support.processes import Child
from tests.support.waiting import eventually

REFUSED = "refused"


def _policy(name: str, namespace: str) -> tuple[Obj, Obj]:
    """A policy and its binding that refuse status writes of the Service `REFUSED` in
    `namespace`."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                "resources": ["services/status"],
            }]},
            "validations": [{"expression": f"object.metadata.name != '{REFUSED}'",
                             "message": "status writes of this Service are refused"}],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }  # fmt: skip
    return policy, binding


@pytest.fixture
def refusing(kube: Client, space: lb.Space) -> Iterator[str]:
    name = f"{space.name}-refuse"
    policy, binding = _policy(name, space.name)
    kube.create(r.VALIDATING_ADMISSION_POLICIES, policy)
    kube.create(r.VALIDATING_ADMISSION_POLICY_BINDINGS, binding)
    _in_effect(kube, space)
    yield name
    for res in (r.VALIDATING_ADMISSION_POLICY_BINDINGS, r.VALIDATING_ADMISSION_POLICIES):
        with contextlib.suppress(NotFound):
            kube.delete(res, name)


def _in_effect(kube: Client, space: lb.Space) -> None:
    """The API server applies a new policy a moment later (its informer): a status write of a
    stand-in `REFUSED` Service (no LoadBalancer, nothing allocates for it) is tried until it
    is refused, so the controller's first write is refused too; then the stand-in goes."""
    body = {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": REFUSED, "namespace": space.name},
            "spec": {"ports": [{"port": 80}]}}  # fmt: skip
    kube.create(SERVICES, body, namespace=space.name)

    def refused() -> bool:
        try:
            kube.patch(SERVICES, REFUSED, {"status": {"conditions": []}}, namespace=space.name,
                       patch_type="merge", subresource="status")  # fmt: skip
        except ApiError as exc:
            return "status writes of this Service are refused" in str(exc)
        return False

    eventually(refused, timeout=30, message="the admission policy in effect")
    kube.delete(SERVICES, REFUSED, namespace=space.name)
    eventually(lambda: lb.gone(kube, space.name, REFUSED), timeout=30, message="stand-in gone")


def _refusals(child: Child) -> int:
    """The worker's refused syncs so far (only the refused Service's status writes fail)."""
    return child.log_path.read_text(errors="replace").count("sync refused, retrying")


def test_lb26_a_refused_status_write_gives_its_address_back_before_the_retry(
    space: lb.Space, start_lb: StartLb, kube: Client, refusing: str
) -> None:
    net = lb.block()
    space.pool([f"{net}.0/30"])  # two usable addresses: .1 and .2
    child = start_lb()
    # Only a write the policy refuses makes the Service's condition stay unwritten.
    space.service(REFUSED)
    eventually(lambda: _refusals(child) >= 4, timeout=lb.SETTLE,
               message="four refused status writes")  # fmt: skip
    assert lb.condition(space.get(REFUSED)) is None
    # Every refused attempt's address went back: the pool is not run dry.
    space.service("probe")
    assert lb.allocated(space, "probe")[0] in (f"{net}.1", f"{net}.2")
    kube.delete(r.VALIDATING_ADMISSION_POLICY_BINDINGS, refusing)
    kube.delete(r.VALIDATING_ADMISSION_POLICIES, refusing)
    [got] = lb.allocated(space, REFUSED)
    assert {got, *lb.ips(space.get("probe"))} == {f"{net}.1", f"{net}.2"}
