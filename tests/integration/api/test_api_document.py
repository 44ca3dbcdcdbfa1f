"""The API says what it does: every error answer has the one documented body, a 405 names
every method of its path, an error never closes the connection, and the OpenAPI document lists
the errors each operation can answer (the fuzzing itself is test_schemathesis.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from gpuyard.models import EventKind, WaitCode
from gpuyard.models.errors import ErrorBody
from gpuyard.server.guard import MAX_BODY


@pytest.fixture
def http(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{api_url}/api/v1", timeout=60) as client:
        yield client


@pytest.fixture
def document(http: httpx.Client) -> dict[str, Any]:
    doc: dict[str, Any] = http.get("/openapi.json").json()
    return doc


@pytest.mark.parametrize(
    ("method", "path", "template", "allowed"),
    [
        ("PUT", "/jobs/1", "/jobs/{job_id}", "GET, PATCH, DELETE"),
        ("OPTIONS", "/jobs/1", "/jobs/{job_id}", "GET, PATCH, DELETE"),
        ("PATCH", "/jobs/stop", "/jobs/stop", "POST"),  # a word there is not a job id
        ("DELETE", "/jobs", "/jobs", "GET, POST"),
        ("POST", "/health", "/health", "GET"),
        ("PUT", "/groups/research", "/groups/{name}", "GET, PATCH, DELETE"),
        ("GET", "/quotas/user/alice/low", "/quotas/{kind}/{subject}/{tier}", "DELETE"),
    ],
)
def test_a_405_names_every_method_of_the_path(
    http: httpx.Client,
    document: dict[str, Any],
    method: str,
    path: str,
    template: str,
    allowed: str,
) -> None:
    response = http.request(method, path)
    assert response.status_code == 405, response.text
    assert response.headers["allow"] == allowed
    body = ErrorBody.model_validate(response.json())
    assert body.code == "method_not_allowed"
    assert method in body.detail and allowed in body.detail
    # The methods the document has for the path, no more, no fewer.
    documented = {m.upper() for m in document["paths"][f"/api/v1{template}"]}
    assert documented == set(allowed.split(", "))


def test_an_unknown_path_is_a_404_with_the_error_body(http: httpx.Client) -> None:
    response = http.get("/no/such/thing")
    assert response.status_code == 404
    body = ErrorBody.model_validate(response.json())
    assert body.code == "not_found"
    assert "/api/v1/no/such/thing" in body.detail


def test_errors_keep_the_connection(api_url: str) -> None:
    """405, 413, 422 and 404 answered on one connection, which then serves a 200: none of
    them closes it (a client's pool would otherwise reconnect after every refusal)."""
    url = urlsplit(api_url)
    connection = HTTPConnection(url.hostname or "", url.port)
    json_type = {"Content-Type": "application/json"}
    cases: list[tuple[str, str, bytes, int, str]] = [
        ("PUT", "/api/v1/jobs/1", b'{"priority": "low"}', 405, "method_not_allowed"),
        (
            "POST",
            "/api/v1/jobs",
            b'{"command": "' + b"x" * (MAX_BODY + 1) + b'"}',
            413,
            "too_large",
        ),
        ("POST", "/api/v1/jobs", b'{"command": "true"', 422, "invalid_spec"),
        ("POST", "/api/v1/jobs", b'{"command": "a\\u0000"}', 422, "invalid_spec"),
        ("GET", "/api/v1/jobs?name=%00", b"", 422, "invalid_spec"),
        ("DELETE", "/api/v1/nowhere", b"{}", 404, "not_found"),
    ]
    try:
        local = None
        for method, path, body, status, code in cases:
            connection.request(method, path, body=body, headers=json_type)
            response = connection.getresponse()
            answer = json.loads(response.read())
            assert (response.status, answer["code"]) == (status, code), answer
            ErrorBody.model_validate(answer)
            assert not response.will_close
            assert connection.sock is not None
            local = local or connection.sock.getsockname()
            assert connection.sock.getsockname() == local  # the same connection
        connection.request("GET", "/api/v1/health")
        assert connection.getresponse().status == 200
        assert connection.sock.getsockname() == local
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ('{"env": {"a.b[0]": "x\\u0000"}}', ["body", "env", "a.b[0]"]),
        ('{"\\u00b3": {"k": "\\u0000"}}', ["body", "\u00b3", "k"]),
        ('{"tasks": [{"command": "a"}, {"command": "\\u0000"}]}', ["body", "tasks", 1, "command"]),
    ],
)
def test_a_refused_value_is_located_by_the_keys_as_given(
    http: httpx.Client, body: str, loc: list[str | int]
) -> None:
    response = http.post("/jobs", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert ErrorBody.model_validate(response.json()).errors[0].loc == loc  # type: ignore[index]


def test_the_document_lists_each_operation_s_errors_with_the_one_body(
    document: dict[str, Any],
) -> None:
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ErrorBody" in schemas
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            expected = {"422"}
            if (method, path) != ("get", "/api/v1/health"):
                expected |= {"401", "403"}
            if "{" in path:
                expected.add("404")
            if method != "get":
                expected.add("409")
            if method in ("post", "put", "patch"):
                expected.add("413")
            label = f"{method.upper()} {path}"
            assert expected <= set(responses), label
            for status, response in responses.items():
                if status.startswith("4"):
                    assert response["content"] == error, (label, status)


def test_the_document_lists_the_values_of_the_wire_types(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert schemas["WaitCode"]["enum"] == [code.value for code in WaitCode]
    assert schemas["EventKind"]["enum"] == [kind.value for kind in EventKind]
    job = schemas["JobView"]["properties"]["wait_code"]
    assert {"$ref": "#/components/schemas/WaitCode"} in job["anyOf"]
    assert schemas["JobEvent"]["properties"]["kind"]["$ref"] == "#/components/schemas/EventKind"
