"""The one-object admission self-test run at start-up: a
ValidatingAdmissionPolicy denying a marker label must actually deny it.
"""

from __future__ import annotations

import time
from typing import Any

from tests.support.adminhttp import AdminHttp
from tests.support.processes import StartupError

NAME = "local-ccm-test-admission-self-test"
MARKER = "test.local-ccm.io/admission-self-test"
MESSAGE = "local-ccm-test admission self-test: the marker label is denied"
VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAPB = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
# The policy plugin picks up new policies through an informer: allow it a little while.
TIMEOUT = 30.0


def _policy() -> dict[str, Any]:
    rule = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["configmaps"],
    }
    check = {
        "expression": f"!has(object.metadata.labels) || !('{MARKER}' in object.metadata.labels)",
        "message": MESSAGE,
        "reason": "Forbidden",
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule]},
            "validations": [check],
        },
    }


def _binding() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME},
        "spec": {"policyName": NAME, "validationActions": ["Deny"]},
    }


def _marked_configmap() -> dict[str, Any]:
    meta = {"name": NAME, "labels": {MARKER: "true"}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def admission_self_test(http: AdminHttp) -> str:
    """Create the policy and binding, see a marked ConfigMap denied, clean up.

    Returns "denied: HTTP <status>: <message>"; raises StartupError if no denial happens.
    """
    http.ok("POST", VAP, _policy())
    http.ok("POST", VAPB, _binding())
    try:
        return _expect_denial(http)
    finally:
        http.request("DELETE", f"{VAPB}/{NAME}")
        http.request("DELETE", f"{VAP}/{NAME}")
        http.request("DELETE", f"{CONFIGMAPS}/{NAME}")


def _expect_denial(http: AdminHttp) -> str:
    deadline = time.monotonic() + TIMEOUT
    while True:
        resp = http.request("POST", CONFIGMAPS, _marked_configmap())
        if resp.status == 403 and MESSAGE in resp.text:
            return f"denied: HTTP {resp.status}: {resp.json().get('message', '')}"
        if resp.status == 201:
            http.request("DELETE", f"{CONFIGMAPS}/{NAME}")  # not enforced yet
        else:
            raise StartupError(f"admission self-test: unexpected HTTP {resp.status}: {resp.text}")
        if time.monotonic() >= deadline:
            raise StartupError(
                f"admission self-test: a ValidatingAdmissionPolicy did not deny the marker "
                f"label within {TIMEOUT:.0f} s; is ValidatingAdmissionPolicy admission enabled?"
            )
        time.sleep(0.2)
