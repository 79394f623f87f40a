"""The running server against docs/openapi.yaml.

Schemathesis generates requests from the description (valid ones, and in a second pass
invalid ones), sends them to a whole stack on loopback with the bearer token (and, for the
webhook, a correct HMAC of the exact bytes sent), and checks every response: never a 5xx,
a documented status code and content type, and a body that matches the documented schema.
Requests for real runs and approvals, which random ids never hit, are validated against the
same schemas with jsonschema.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import requests
import schemathesis
import yaml
from hypothesis import settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.paths import PROJECT_ROOT

from .harness import Hostile, bearer, http, webhook_signature
from .strategies import Blob

SPEC_PATH = PROJECT_ROOT / "docs" / "openapi.yaml"
SPEC: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text())
WEBHOOK = "/api/v1/webhooks/approval-response"
CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def load(mode: GenerationMode) -> Any:
    loaded = schemathesis.openapi.from_path(SPEC_PATH)
    loaded.config.generation.update(modes=[mode], deterministic=True)
    return loaded


positive, negative = load(GenerationMode.POSITIVE), load(GenerationMode.NEGATIVE)

examples = settings(max_examples=25, deadline=None, derandomize=True, database=None)


def send(case: Any, hostile: Hostile) -> requests.Response:
    """Send `case` as schemathesis would, but sign the webhook's exact body bytes."""
    kwargs = case.as_transport_kwargs(base_url=hostile.url, headers={"Authorization": bearer()[1]})
    if case.path == WEBHOOK and "json" in kwargs:
        raw = json.dumps(kwargs.pop("json")).encode()
        kwargs["data"] = raw
        kwargs["headers"]["Content-Type"] = "application/json"
        given = str(kwargs["headers"].get("X-Webhook-Signature", ""))
        if given.startswith("sha256=") and len(given) == 71:  # a valid-looking one: make it right
            kwargs["headers"]["X-Webhook-Signature"] = webhook_signature(raw)
    params = kwargs.get("params") or {}
    if isinstance(params, dict) and _number(params.get("wait")) > 1:
        # A long poll of a pending request holds for its whole `wait`; its own tests
        # (tests/integration/agent_host/test_external_approvals.py) cover that, and here a
        # second keeps 25 examples fast.
        params["wait"] = 1
    kwargs.setdefault("timeout", 10)
    return requests.request(**kwargs)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


@positive.parametrize()
@examples
def test_valid_requests_get_documented_answers(case: Any, hostile: Hostile) -> None:
    response = send(case, hostile)
    checks = CONFORMANCE + ([ignored_auth] if case.path != WEBHOOK else [])
    case.validate_response(response, checks=checks, headers={"Authorization": bearer()[1]})


@negative.parametrize()
@examples
def test_invalid_requests_get_documented_4xx_answers(case: Any, hostile: Hostile) -> None:
    response = send(case, hostile)
    case.validate_response(response, checks=CONFORMANCE)
    assert response.status_code < 500, response.text


# -- real objects, validated with jsonschema against the same description -----------------


def validate(reply: Any, path: str, method: str, status: int) -> None:
    assert reply.status == status, reply
    documented = SPEC["paths"][path][method]["responses"][str(status)]
    if "$ref" in documented:
        documented = SPEC["components"]["responses"][documented["$ref"].split("/")[-1]]
    media = reply.content_type
    assert media in documented["content"], (media, list(documented["content"]))
    body_schema = documented["content"][media]["schema"]
    body = reply.json() if media == "application/json" else reply.body.decode()
    validator = jsonschema.Draft202012Validator({**body_schema, "components": SPEC["components"]})
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(body)]
    assert not errors, errors


def test_real_runs_and_approvals_match_the_description(hostile: Hostile) -> None:
    auth = [bearer()]
    for request in hostile.cast.all:  # waiting (approval, question) and succeeded runs
        reply = http(hostile.url, "GET", f"/api/v1/runs/{request.run_id}", auth)
        validate(reply, "/api/v1/runs/{run_id}", "get", 200)
        assert reply.json()["approvals"] and reply.json()["tool_calls"]
    page = http(hostile.url, "GET", "/api/v1/approvals?limit=1", auth)
    validate(page, "/api/v1/approvals", "get", 200)
    assert page.json()["next_cursor"]
    second = http(
        hostile.url, "GET", f"/api/v1/approvals?cursor={page.json()['next_cursor']}", auth
    )
    validate(second, "/api/v1/approvals", "get", 200)
    for path in ("/healthz", "/readyz", "/metrics"):
        validate(http(hostile.url, "GET", path), path, "get", 200)
    body = json.dumps({"agent": "support-agent", "input": "hello?"}).encode()
    validate(http(hostile.url, "POST", "/api/v1/runs", auth, body), "/api/v1/runs", "post", 202)


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status"),
    [
        ("GET", "/api/v1/approvals", [], b"", 401),
        ("GET", "/api/v1/approvals?limit=0", [bearer()], b"", 400),
        ("GET", "/api/v1/runs/run_0123456789abcdef", [bearer()], b"", 404),
        ("POST", "/api/v1/runs", [bearer()], b"{", 400),
        ("POST", "/api/v1/runs", [bearer()], Blob(b"x" * (256 * 1024 + 1)), 413),
        ("POST", WEBHOOK, [], b"{}", 401),
        ("POST", WEBHOOK, [("X-Webhook-Signature", webhook_signature(b"[]"))], b"[]", 400),
    ],
    ids=["401", "400-limit", "404", "400-json", "413", "webhook-401", "webhook-400"],
)
def test_documented_errors_match_the_description(
    hostile: Hostile, method: str, path: str, headers: list[Any], body: bytes, status: int
) -> None:
    reply = http(hostile.url, method, path, headers, body)
    validate(
        reply,
        path.split("?")[0].replace("run_0123456789abcdef", "{run_id}"),
        method.lower(),
        status,
    )


def test_webhook_answers_match_the_description(hostile: Hostile) -> None:
    request = hostile.new_pending("support-agent", "Is shipping free?")
    body = json.dumps(
        {"requestId": request.request_id, "decision": "approved", "feedback": "yes"}
    ).encode()
    headers = [("X-Webhook-Signature", webhook_signature(body))]
    first = http(hostile.url, "POST", WEBHOOK, headers, body)
    validate(first, WEBHOOK, "post", 200)
    assert first.json()["status"] == "processed"
    again = http(hostile.url, "POST", WEBHOOK, headers, body)
    validate(again, WEBHOOK, "post", 200)
    assert again.json()["status"] == "already_processed"
    unknown = json.dumps({"requestId": "req_" + "0" * 20 + "_0001", "decision": "rejected"})
    raw = unknown.encode()
    missing = http(
        hostile.url, "POST", WEBHOOK, [("X-Webhook-Signature", webhook_signature(raw))], raw
    )
    validate(missing, WEBHOOK, "post", 404)


def test_edited_approvals_match_the_description(hostile: Hostile) -> None:
    """The webhook's answers to edited_arguments (refused, then recorded) and the run they
    leave, against the description."""
    request = hostile.new_pending("refund-agent", "refund order 123")

    def send(document: dict[str, Any]) -> Any:
        raw = json.dumps({"requestId": request.request_id, **document}).encode()
        return http(
            hostile.url, "POST", WEBHOOK, [("X-Webhook-Signature", webhook_signature(raw))], raw
        )

    invalid = send({"decision": "approved", "edited_arguments": {"amount": "lots"}})
    validate(invalid, WEBHOOK, "post", 400)
    assert set(invalid.json()["errors"]) == {"amount"}
    edited = send({"decision": "approved", "feedback": "half", "edited_arguments": {"amount": 21}})
    validate(edited, WEBHOOK, "post", 200)
    assert edited.json()["edited_arguments"] == {"order_id": "123", "amount": 21.0}
    run = http(hostile.url, "GET", f"/api/v1/runs/{request.run_id}", [bearer()])
    validate(run, "/api/v1/runs/{run_id}", "get", 200)
    [approval] = run.json()["approvals"]
    assert approval["decision"]["comment"] == "half" and approval["editable"] == ["amount"]
