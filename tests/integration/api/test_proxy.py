"""The interactive jobs' proxy (``/proxy/<id>/…``, server/proxy.py) over real HTTP, on both
databases, with the fake executor: its one node is 127.0.0.1, so the service job's slot is a
port of this machine, where the test starts a fake service (an ASGI app that echoes what
reaches it). Each of the proxy's promises, and every refusal."""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets import Origin
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from gpuyard.client import Client
from gpuyard.controller.loop import Controller
from gpuyard.executors.fake import FakeExecutor
from gpuyard.models.service import SecretUse, service_secret
from gpuyard.models.worker import NodeInfo
from gpuyard.store.engine import Store
from gpuyard.store.tables import JobRow
from gpuyard.testing.auth import TokenFor
from gpuyard.testing.server import serve

SESSION = "gpuyard_session"
PLANTED = [
    f"{SESSION}=planted; Path=/",
    f"{SESSION}=planted; Path=/; Partitioned",
    f"{SESSION}=pl anted; Path=/",
    "theme=dark; Path=/proxy",
    "_xsrf=abc; Path=/",
]
"""What the fake service's ``/cookies`` sets: the pool's session cookie three ways (each a
cookie of that name to a browser, however a strict parser reads them), and two of its own."""


# -- the fake service ---------------------------------------------------------------------


def _long_page(token: str) -> StreamingResponse:
    """A page of unknown length (chunked) whose tokens are split between its chunks."""
    text = ("x" * 997 + token) * 3000  # about 3 MB, a token every kilobyte

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(text), 1000):
            yield text[start : start + 1000].encode()

    return StreamingResponse(chunks(), media_type="text/html")


def _service(token: str) -> Starlette:
    """Echoes each request (``/cookies``: sets :data:`PLANTED`; ``/page``: an HTML page with
    ``token`` in it), and on a WebSocket sends its handshake's headers, then echoes."""

    async def echo(request: Request) -> Response:
        if request.url.path.endswith("/page"):
            return HTMLResponse(f'<html><script>{{"token": "{token}"}}</script></html>')
        if request.url.path.endswith("/long-page"):
            return _long_page(token)
        if request.url.path.endswith("/gzip-page"):
            body = gzip.compress(f"<p>{token}</p>".encode() * 1000)
            return Response(body, media_type="text/html", headers={"content-encoding": "gzip"})
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        query = f"?{request.url.query}" if request.url.query else ""
        answer = JSONResponse(
            {
                "method": request.method,
                "path": request.url.path + query,
                "raw_path": request.scope["raw_path"].decode(),
                "headers": [[k, v] for k, v in request.headers.items()],
                "body": size,
            }
        )
        if request.url.path.endswith("/cookies"):
            answer.raw_headers += [(b"set-cookie", c.encode()) for c in PLANTED]
        return answer

    async def relay(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(json.dumps([[k, v] for k, v in websocket.headers.items()]))
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("bytes") is not None:
                    await websocket.send_bytes(message["bytes"][::-1])
                else:
                    await websocket.send_text(message["text"].upper())

    return Starlette(
        routes=[
            Route("/{path:path}", echo, methods=["GET", "HEAD", "POST", "PUT", "DELETE"]),
            WebSocketRoute("/{path:path}", relay),
        ]
    )


@contextlib.contextmanager
def listening(app: Starlette, port: int) -> Iterator[None]:
    """``app`` served on 127.0.0.1:``port`` (the job's slot) while in the block."""
    with serve(app, port=port):
        yield


# -- the pool -----------------------------------------------------------------------------


@pytest.fixture
def fake_executor() -> FakeExecutor:
    return FakeExecutor([NodeInfo("n0", "127.0.0.1", gpus=0, cpus=64, memory=1 << 40)])


class Notebook:
    """Alice's notebook job, once it runs, and her way to it."""

    def __init__(self, api_url: str, token: str, job_id: int, port: int, job_token: str) -> None:
        self.api_url = api_url
        self.token = token
        self.id = job_id
        self.port = port
        self.job_token = job_token
        self.prefix = f"/proxy/{job_id}/"
        self.http = httpx.Client(
            base_url=api_url, headers={"authorization": f"Bearer {token}"}, timeout=30
        )

    def ws(self, path: str, **headers: str) -> ClientConnection:
        url = self.api_url.replace("http", "ws", 1) + self.prefix + path
        return connect(url, additional_headers={"authorization": f"Bearer {self.token}", **headers})


def _submit(alice: Client, **spec: Any) -> int:
    return alice.submit({"service": {"kind": "notebook"}, "resources": {"cpus": 1}, **spec}).id


def _running(alice: Client, controller: Controller, job_id: int) -> int:
    """Tick until job ``job_id`` runs; its slot's port."""
    for _ in range(5):
        controller.tick()
        job = alice.job(job_id)
        if job.state.value == "running":
            return job.placement[0].port
    raise AssertionError(f"job {job_id} does not run: {alice.job(job_id).state}")


def _job_token(store: Store, job_id: int) -> str:
    """What the pool gives the job's JupyterLab (``JUPYTER_TOKEN``), derived from the job's
    attempt secret."""
    with store.read() as session:
        row = session.get(JobRow, job_id)
        assert row is not None and row.token
        return service_secret(row.token, SecretUse.JUPYTER)


@pytest.fixture
def alice(api_url: str, token_for: TokenFor) -> Iterator[Client]:
    with Client(api_url, token=token_for("alice", group="lab")) as client:
        yield client


@pytest.fixture
def notebook(
    store: Store, api_url: str, alice: Client, controller: Controller
) -> Iterator[Notebook]:
    """Alice's running notebook, its fake service listening on its slot."""
    found = _notebook(store, api_url, alice, controller)
    with listening(_service(found.job_token), found.port):
        yield found
    found.http.close()


def _notebook(store: Store, api_url: str, alice: Client, controller: Controller) -> Notebook:
    job_id = _submit(alice)
    port = _running(alice, controller, job_id)
    return Notebook(api_url, alice.token, job_id, port, _job_token(store, job_id))


def _headers(echoed: dict[str, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for key, value in echoed["headers"]:
        found.setdefault(key, []).append(value)
    return found


# -- HTTP ---------------------------------------------------------------------------------


def test_the_full_path_query_and_method_arrive(notebook: Notebook) -> None:
    answer = notebook.http.request(
        "PUT", notebook.prefix + "api/contents/a%20b/c.ipynb?type=notebook&x=1&x=2"
    )
    assert answer.status_code == 200, answer.text
    echoed = answer.json()
    assert echoed["method"] == "PUT"
    assert echoed["path"] == notebook.prefix + "api/contents/a b/c.ipynb?type=notebook&x=1&x=2"
    # Encoded as written: a file named what?.ipynb in a folder a/b is neither a query nor
    # two folders on the way.
    odd = notebook.http.get(notebook.prefix + "api/contents/a%2Fb/what%3F.ipynb?q=%3F")
    assert odd.json()["raw_path"] == notebook.prefix + "api/contents/a%2Fb/what%3F.ipynb"


def test_a_large_body_arrives_whole(notebook: Notebook) -> None:
    body = bytes(range(256)) * (5 * 4096)  # 5 MiB
    answer = notebook.http.post(notebook.prefix + "api/upload", content=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["body"] == len(body)


def test_the_services_bodies_and_queries_are_its_own_not_read_as_the_apis(
    notebook: Notebook,
) -> None:
    """What the API refuses (a JSON body with a key twice or NaN, a NUL in a query) is the
    service's business, not the pool's."""
    body = b'{"a": 1, "a": NaN, "text": "\\u0000"}'
    answer = notebook.http.post(
        notebook.prefix + "api/contents?q=a%00b",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["body"] == len(body)
    assert answer.json()["path"].endswith("?q=a%00b")


def test_the_service_gets_its_own_token_host_and_origin_never_the_callers_credentials(
    notebook: Notebook,
) -> None:
    answer = notebook.http.get(notebook.prefix + "api/status", headers={"origin": "null"})
    headers = _headers(answer.json())
    assert headers["authorization"] == [f"token {notebook.job_token}"]
    assert notebook.token not in json.dumps(answer.json())
    assert headers["host"] == [f"127.0.0.1:{notebook.port}"]
    assert headers["origin"] == [f"http://127.0.0.1:{notebook.port}"]


def test_the_session_cookie_is_taken_out_and_other_cookies_pass(notebook: Notebook) -> None:
    cookie = f"theme=dark; {SESSION}=gy_secret; _xsrf=abc"
    answer = notebook.http.get(notebook.prefix + "api/status", headers={"cookie": cookie})
    assert _headers(answer.json())["cookie"] == ["theme=dark; _xsrf=abc"]
    assert "gy_secret" not in answer.text


def test_the_service_cannot_set_the_session_cookie(notebook: Notebook) -> None:
    answer = notebook.http.get(notebook.prefix + "cookies")
    assert answer.status_code == 200
    assert answer.headers.get_list("set-cookie") == ["theme=dark; Path=/proxy", "_xsrf=abc; Path=/"]


def test_pages_lose_the_services_token_other_answers_keep_their_bytes(notebook: Notebook) -> None:
    page = notebook.http.get(notebook.prefix + "page", headers={"accept": "*/*"})
    assert page.status_code == 200
    assert page.text == '<html><script>{"token": ""}</script></html>'
    long = notebook.http.get(notebook.prefix + "long-page")  # chunked, tokens split
    assert long.status_code == 200 and long.text == "x" * 997 * 3000
    zipped = notebook.http.get(notebook.prefix + "gzip-page", headers={"accept-encoding": "gzip"})
    assert zipped.text == "<p></p>" * 1000
    echoed = notebook.http.get(notebook.prefix + "api/status", headers={"accept": "text/html"})
    assert echoed.headers["content-type"] == "application/json"  # not a page: as it was


def test_the_bare_prefix_redirects_to_the_prefix(notebook: Notebook) -> None:
    answer = notebook.http.get(f"/proxy/{notebook.id}")
    assert answer.status_code == 307
    assert answer.headers["location"] == notebook.prefix


# -- readiness ----------------------------------------------------------------------------


def test_a_service_that_does_not_answer_yet_is_a_503_that_says_why(
    store: Store, api_url: str, alice: Client, controller: Controller
) -> None:
    job_id = _submit(alice)
    path = f"/proxy/{job_id}/lab"
    http = httpx.Client(base_url=api_url, headers={"authorization": f"Bearer {alice.token}"})

    def expect(state: str) -> None:
        answer = http.get(path)
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"].isdigit()
        assert answer.json()["code"] == f"service-{state}"
        assert alice.service(job_id).state.value == state

    expect("waiting")  # queued
    port = _running(alice, controller, job_id)
    expect("starting")  # its worker runs, nothing listens on its port yet
    with listening(_service(_job_token(store, job_id)), port):
        assert alice.service(job_id).state.value == "ready"
        assert http.get(path).status_code == 200
    expect("starting")  # it went away
    alice.stop(job_id)
    for _ in range(3):
        controller.tick()
    assert alice.service(job_id).state.value == "ended"
    assert http.get(path).json()["code"] == "service-ended"
    http.close()


# -- who may enter ------------------------------------------------------------------------


def test_nobody_signed_in_is_refused(notebook: Notebook) -> None:
    answer = httpx.get(notebook.api_url + notebook.prefix + "api/status")
    assert answer.status_code == 401
    bad = httpx.get(notebook.api_url + notebook.prefix, headers={"authorization": "Bearer gy_nope"})
    assert bad.status_code == 401


def test_another_user_is_told_the_job_does_not_exist(
    notebook: Notebook, api_url: str, token_for: TokenFor
) -> None:
    carol = {"authorization": f"Bearer {token_for('carol')}"}
    theirs = httpx.get(api_url + notebook.prefix + "api/status", headers=carol)
    missing = httpx.get(api_url + "/proxy/99999/api/status", headers=carol)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"] == missing.json()["detail"].replace("99999", str(notebook.id))


def test_a_reader_of_the_job_is_refused_its_owners_service(
    api_url: str, token_for: TokenFor, alice: Client, controller: Controller
) -> None:
    job_id = _submit(alice, access="read-only")
    _running(alice, controller, job_id)
    bob = {"authorization": f"Bearer {token_for('bob', group='lab')}"}
    assert httpx.get(f"{api_url}/api/v1/jobs/{job_id}", headers=bob).status_code == 200
    answer = httpx.get(f"{api_url}/proxy/{job_id}/lab", headers=bob)
    assert answer.status_code == 403
    assert "owner's alone" in answer.json()["detail"]


# -- the web UI's session cookie ----------------------------------------------------------


@pytest.fixture
def browser(notebook: Notebook) -> Iterator[httpx.Client]:
    """Alice's browser, signed in to the web UI (the session cookie, no bearer token)."""
    with httpx.Client(base_url=notebook.api_url, timeout=30) as web:
        signed = web.post("/login", data={"token": notebook.token, "next": "/jobs"})
        assert signed.status_code == 303, signed.text
        assert web.cookies.get(SESSION)
        yield web


def test_a_signed_in_browser_enters_from_this_sites_pages_only(
    notebook: Notebook, browser: httpx.Client
) -> None:
    path = notebook.prefix + "api/contents"
    own = browser.post(path, headers={"origin": notebook.api_url}, content=b"{}")
    assert own.status_code == 200, own.text
    echoed = _headers(own.json())
    assert echoed["authorization"] == [f"token {notebook.job_token}"]
    assert "cookie" not in echoed  # the session cookie was its only cookie
    assert browser.get(path).status_code == 200  # no Origin: not another site's page
    foreign = browser.post(path, headers={"origin": "https://evil.example"}, content=b"{}")
    assert foreign.status_code == 401
    assert "another site" in foreign.json()["detail"]


# -- WebSockets ---------------------------------------------------------------------------


def test_a_websocket_is_relayed_both_ways(notebook: Notebook) -> None:
    with notebook.ws("api/kernels/k1/channels?session_id=s1") as ws:
        handshake = dict(json.loads(ws.recv(timeout=10)))
        assert handshake["authorization"] == f"token {notebook.job_token}"
        assert handshake["origin"] == f"http://127.0.0.1:{notebook.port}"
        assert notebook.token not in json.dumps(handshake)
        for _ in range(3):
            ws.send("hello")
            assert ws.recv(timeout=10) == "HELLO"
            ws.send(b"\x00\x01\x02" * 1000)
            assert ws.recv(timeout=10) == b"\x02\x01\x00" * 1000


def _refusal(url: str, **kwargs: Any) -> tuple[int, str]:
    """The HTTP status and detail the proxy refused a WebSocket's handshake with."""
    with pytest.raises(InvalidStatus) as refused:
        connect(url, **kwargs).close()
    response = refused.value.response
    return response.status_code, json.loads(response.body or b"{}").get("detail", "")


def test_a_websocket_of_another_user_or_of_nobody_is_refused_as_over_http(
    notebook: Notebook, token_for: TokenFor
) -> None:
    path = notebook.prefix + "api/events/subscribe"
    url = notebook.api_url.replace("http", "ws", 1) + path
    carol = {"authorization": f"Bearer {token_for('carol')}"}
    over_http = httpx.get(notebook.api_url + path, headers=carol)
    assert _refusal(url, additional_headers=carol) == (404, over_http.json()["detail"])
    assert _refusal(url)[0] == 401


def test_a_cookie_signed_websocket_from_another_site_is_refused(
    notebook: Notebook, browser: httpx.Client
) -> None:
    url = notebook.api_url.replace("http", "ws", 1) + notebook.prefix + "api/events/subscribe"
    cookie = {"cookie": f"{SESSION}={browser.cookies.get(SESSION)}"}
    evil = Origin("https://evil.example")
    status, detail = _refusal(url, origin=evil, additional_headers=cookie)
    assert status == 401 and "another site" in detail
    with connect(url, origin=Origin(notebook.api_url), additional_headers=cookie) as ws:
        handshake = dict(json.loads(ws.recv(timeout=10)))
        assert handshake["authorization"] == f"token {notebook.job_token}"
        assert SESSION not in handshake.get("cookie", "")


def test_a_websocket_ends_when_the_service_goes(
    store: Store, api_url: str, alice: Client, controller: Controller
) -> None:
    notebook = _notebook(store, api_url, alice, controller)
    service = listening(_service(notebook.job_token), notebook.port)
    service.__enter__()
    with notebook.ws("api/kernels/k/channels") as ws:
        ws.recv(timeout=10)
        ws.send("ping")
        assert ws.recv(timeout=10) == "PING"
        service.__exit__(None, None, None)  # the proxy closes the caller's side too
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    notebook.http.close()


def test_an_id_out_of_range_is_refused_before_any_lookup(api_url: str, token_for: TokenFor) -> None:
    """An id no job can have (negative, 0, past 64 bits) is a 422, never a database error."""
    headers = {"authorization": f"Bearer {token_for('ada')}"}
    for job in ("0", "-1", "9" * 25):
        assert httpx.get(f"{api_url}/proxy/{job}/lab", headers=headers).status_code == 422
