"""The job pages: the list, the form, one job; and the actions their forms post.

Routes parse, call the services (the same functions as the API, so the same permission
checks refuse what is not allowed), and render. What a page offers is what
``JobView.allowed`` says, from the same policy table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from gpuyard.errors import Conflict, GpuyardError, InvalidSpec
from gpuyard.models import JobEvent, JobMode, JobStatus, JobView, Priority
from gpuyard.models.access import Access, Action, Caller
from gpuyard.models.execs import ExecRun, ExecStop, ExecTarget
from gpuyard.models.ids import MAX_ID
from gpuyard.models.image_catalogue import ImageScope
from gpuyard.models.job_query import MAX_WEB_PAGE, JobQuery, JobSort
from gpuyard.models.usage import Window
from gpuyard.quantities import parse_duration
from gpuyard.web.charts import usage_charts
from gpuyard.web.context import services
from gpuyard.web.forms import (
    MOUNT_KINDS,
    ROWS,
    FormFields,
    check_form,
    form_values,
    posted_values,
    spec_yaml,
)
from gpuyard.web.interactive import CREATE_ACTIONS, create, environments, open_paths, service_of
from gpuyard.web.render import page
from gpuyard.web.routing import CallerDep, WebRoute, back_to
from gpuyard.web.session import check_post, read_form

__all__ = ["router"]

router = APIRouter(route_class=WebRoute, include_in_schema=False)
E = TypeVar("E", bound=StrEnum)

JobId = Annotated[int, Path(ge=1, le=MAX_ID)]
LOG_TAIL = 64 * 1024
PAGE_SIZES = (25, 50, 100, 200)


# -- the list -------------------------------------------------------------------------------


def _date(text: str, field: str) -> float | None:
    if not text:
        return None
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise InvalidSpec(f"{field}: {text!r} is not a date; use YYYY-MM-DD") from None
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def _choice(kind: type[E], text: str, field: str) -> E | None:
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise InvalidSpec(f"{field}: {text!r} is not one of the choices") from None


def _list_filter(
    status: list[str],
    q: str,
    owner: str,
    group: str,
    pool: str,
    priority: str,
    mode: str,
    since: str,
    until: str,
    sort: str,
    order: str,
) -> tuple[JobQuery, dict[str, Any]]:
    """The list's query parameters as a filter (InvalidSpec naming a bad one), and as the
    parameters its links keep."""
    statuses = []
    for text in status:
        if text:
            try:
                statuses.append(JobStatus.parse(text))
            except ValueError as exc:
                raise InvalidSpec(str(exc)) from None
    until_day = _date(until, "until")
    wanted = JobQuery(
        statuses=tuple(statuses),
        owner=owner.strip(),
        group=group.strip(),
        pool=pool.strip(),
        priority=_choice(Priority, priority, "priority"),
        mode=_choice(JobMode, mode, "mode"),
        since=_date(since, "since"),
        until=None if until_day is None else until_day + 86400,  # through that day
        text=q,
        sort=_choice(JobSort, sort, "sort") or JobSort.ID,
        descending=order != "asc",
    )
    params: dict[str, Any] = {
        "status": [st.value for st in statuses],
        "q": q,
        "owner": owner,
        "group": group,
        "pool": pool,
        "priority": priority,
        "mode": mode,
        "since": since,
        "until": until,
        "sort": wanted.sort.value,
        "order": "desc" if wanted.descending else "asc",
    }
    return wanted, params


@router.get("/", response_class=RedirectResponse)
def home() -> RedirectResponse:
    return RedirectResponse("/jobs", status_code=303)


@router.get("/jobs", response_class=HTMLResponse)
def job_list(
    request: Request,
    caller: CallerDep,
    status: Annotated[list[str] | None, Query()] = None,
    q: Annotated[str, Query(max_length=128)] = "",
    owner: Annotated[str, Query(max_length=64)] = "",
    group: Annotated[str, Query(max_length=64)] = "",
    pool: Annotated[str, Query(max_length=64)] = "",
    priority: Annotated[str, Query(max_length=16)] = "",
    mode: Annotated[str, Query(max_length=32)] = "",
    since: Annotated[str, Query(max_length=10)] = "",
    until: Annotated[str, Query(max_length=10)] = "",
    sort: Annotated[str, Query(max_length=16)] = "id",
    order: Annotated[str, Query(max_length=4)] = "desc",
    page_no: Annotated[int, Query(alias="page", ge=1, le=1 << 20)] = 1,
    size: Annotated[int, Query(ge=1, le=MAX_WEB_PAGE)] = 50,
) -> HTMLResponse:
    wanted, params = _list_filter(
        status or [], q, owner, group, pool, priority, mode, since, until, sort, order
    )
    wanted = replace(wanted, offset=(page_no - 1) * size, limit=size)
    params["size"] = size
    s = services(request)
    found = s.search.search(wanted, actor=caller.name)
    pages = max(1, -(-found.total // size))
    mine = environments(s, owner=caller.name)
    return page(
        request,
        "jobs.html",
        caller,
        title="Jobs",
        found=found,
        params=params,
        page_no=page_no,
        pages=pages,
        statuses=list(JobStatus),
        priorities=list(Priority),
        modes=list(JobMode),
        sorts=list(JobSort),
        sizes=PAGE_SIZES,
        Action=Action,
        environments=mine,
        open_paths=open_paths(mine),
    )


@router.post("/jobs/bulk")
async def bulk(request: Request, caller: CallerDep) -> Response:
    form = await read_form(request)
    check_post(request, form)
    ids = []
    for text in form.get("ids", []):
        if not text.isdigit() or not 1 <= int(text) <= MAX_ID:
            raise InvalidSpec(f"ids: {text!r} is not a job id")
        ids.append(int(text))
    back = (form.get("back") or ["/jobs"])[-1]
    back = back if back.startswith("/jobs") else "/jobs"
    if not ids:
        return back_to(back, "no jobs selected: tick the jobs to act on first")
    action = (form.get("action") or [""])[-1]
    jobs = services(request).jobs
    if action == "stop":
        result = await run_in_threadpool(jobs.stop_many, ids, actor=caller.name)
    elif action == "delete":
        result = await run_in_threadpool(jobs.delete_many, ids, actor=caller.name)
    else:
        raise InvalidSpec(f"action: {action!r} is not stop or delete")
    said = f"{action}: {len(result.done)} done"
    if result.failed:
        said += "; not done: " + "; ".join(f.detail for f in result.failed[:5])
    return back_to(back, said)


# -- the form -------------------------------------------------------------------------------


def _form_page(
    request: Request,
    caller: Caller,
    values: dict[str, Any],
    *,
    errors: dict[str, str] | None = None,
    yaml_text: str = "",
    prediction: dict[str, Any] | None = None,
    clone_of: int | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    return page(
        request,
        "form.html",
        caller,
        title="New job",
        v=values,
        errors=errors or {},
        yaml_text=yaml_text,
        prediction=prediction,
        clone_of=clone_of,
        rows=ROWS,
        mount_kinds=MOUNT_KINDS,
        modes=list(JobMode),
        priorities=list(Priority),
        accesses=list(Access),
        sharing=services(request).policy.sharing(),
        # The image picker: what the caller may run jobs in (docs/images.md, "The catalogue").
        images=services(request).images.list_images(actor=caller.name, scope=ImageScope.TRAINING),
        status_code=status_code,
    )


@router.get("/jobs/new", response_class=HTMLResponse)
def new_job(
    request: Request,
    caller: CallerDep,
    clone: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
) -> HTMLResponse:
    spec = None
    if clone is not None:
        view = services(request).jobs.get(clone, actor=caller.name)
        if Action.CLONE not in view.allowed:
            raise InvalidSpec(f"you may not clone job {clone}")
        spec = view.spec
        if spec is not None and view.owner != caller.name:
            spec = spec.model_copy(update={"env": {}})  # another's values are hidden (env_for)
    values = form_values(spec)
    yaml_text = spec_yaml(spec) if spec is not None else ""
    return _form_page(request, caller, values, yaml_text=yaml_text, clone_of=clone)


def _predict(request: Request, form: FormFields, caller: Caller) -> dict[str, Any]:
    """The form's errors, its YAML and (when it is valid) the queue prediction."""
    checked = check_form(form)
    if checked.spec is None:
        return {"ok": False, "errors": checked.errors, "yaml": "", "prediction": None}
    answer: dict[str, Any] = {"ok": True, "errors": {}, "yaml": spec_yaml(checked.spec)}
    try:
        p = services(request).scheduling.predict(checked.spec, owner=caller.name)
    except GpuyardError as exc:
        answer.update(ok=False, errors={"spec": exc.detail}, prediction=None)
        return answer
    answer["prediction"] = {
        "now": p.now,
        "start_at": p.start_at.isoformat(timespec="seconds") if p.start_at else None,
        "reason": p.reason,
        "run_time": p.run_time,
        "ahead": len(p.ahead),
        "waits_for": p.waits_for[:20],
    }
    return answer


@router.post("/jobs/check")
async def check(request: Request, caller: CallerDep) -> JSONResponse:
    """The form as it is now: errors by field, the YAML, the prediction (the form's script
    asks as fields change)."""
    form = await read_form(request)
    check_post(request, form)
    answer = await run_in_threadpool(_predict, request, form, caller)
    return JSONResponse(answer, headers={"Cache-Control": "no-store"})


@router.post("/jobs/new", response_model=None)
async def submit(request: Request, caller: CallerDep) -> Response:
    form = await read_form(request)
    check_post(request, form)
    checked = check_form(form)
    if checked.spec is None:
        return _form_page(
            request, caller, posted_values(form), errors=checked.errors, status_code=422
        )
    try:
        view = await run_in_threadpool(
            services(request).jobs.submit, checked.spec, owner=caller.name
        )
    except GpuyardError as exc:
        return _form_page(
            request,
            caller,
            posted_values(form),
            errors={"spec": exc.detail},
            yaml_text=spec_yaml(checked.spec),
            status_code=exc.status_code,
        )
    return back_to(f"/jobs/{view.id}", f"job {view.id} submitted")


# -- one job --------------------------------------------------------------------------------


def _attempts(events: list[JobEvent]) -> list[dict[str, Any]]:
    """Each attempt: when its first and last events were, and the state it reached."""
    by: dict[int, list[JobEvent]] = defaultdict(list)
    for e in events:
        by[e.attempt].append(e)
    found = []
    for attempt in sorted(by):
        es = by[attempt]
        last_state = next((e.to_state for e in reversed(es) if e.to_state is not None), None)
        found.append(
            {
                "attempt": attempt,
                "first": es[0].time,
                "last": es[-1].time,
                "state": last_state.value if last_state else "",
                "reason": next((e.reason for e in reversed(es) if e.reason), ""),
                "suspended": any(e.to_state is not None and "suspend" in e.to_state for e in es),
            }
        )
    return found


def _log_tail(request: Request, view: JobView, worker: int, actor: str) -> dict[str, Any]:
    logs = services(request).logs
    try:
        probe = logs.read(view.id, actor=actor, worker=worker, offset=0, limit=1)
    except GpuyardError as exc:
        return {"data": "", "start": 0, "offset": 0, "size": 0, "error": exc.detail}
    start = max(0, probe.size - LOG_TAIL)
    if probe.size == 0:
        return {"data": "", "start": 0, "offset": 0, "size": 0, "error": ""}
    chunk = logs.read(view.id, actor=actor, worker=worker, offset=start, limit=LOG_TAIL)
    data = chunk.data
    if start:  # cut at a whole line
        data = data.split("\n", 1)[-1]
    return {
        "data": data,
        "start": chunk.next_offset - len(data.encode()),
        "offset": chunk.next_offset,
        "size": chunk.size,
        "error": "",
    }


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(
    request: Request,
    caller: CallerDep,
    job_id: JobId,
    worker: Annotated[int, Query(ge=0, le=1 << 20)] = 0,
    window: Window = Window.REALTIME,
    q: Annotated[str, Query(max_length=200)] = "",
) -> HTMLResponse:
    s = services(request)
    view = s.jobs.get(job_id, actor=caller.name)
    events = s.jobs.events(job_id, actor=caller.name)
    faults = s.jobs.faults(job_id, actor=caller.name)
    prediction = None
    if view.status is JobStatus.QUEUED:
        try:
            prediction = s.scheduling.prediction(job_id, actor=caller.name)
        except Conflict:
            prediction = None
    usage = s.usage.job(job_id, actor=caller.name, window=window)
    charts = [
        {
            "rank": w.rank,
            "attempt": w.attempt,
            "node": w.node,
            "charts": usage_charts(w.points),
            "span": f"since {usage.since:%H:%M:%S} UTC",
        }
        for w in usage.workers
        if w.attempt == view.attempt
    ]
    ranks = sorted({w.rank for w in view.workers} | {0})
    log = _log_tail(request, view, worker, caller.name)
    text = log["data"]
    if q:  # the search without the page's script: the matching lines only
        matching = [line for line in text.splitlines() if q.lower() in line.lower()]
        text = "\n".join(matching) + ("\n" if matching else "")
    return page(
        request,
        "job.html",
        caller,
        title=f"Job {view.id} {view.name}",
        job=view,
        events=events,
        faults=faults,
        attempts=_attempts(events),
        prediction=prediction,
        charts=charts,
        window=window.value,
        windows=[w.value for w in Window],
        worker=worker,
        ranks=ranks,
        log=log,
        log_text=text,
        q=q,
        priorities=list(Priority),
        Action=Action,
        allowed=set(view.allowed),
        service=service_of(s, view, actor=caller.name),
        spec_yaml=spec_yaml(view.spec) if view.spec else "",
        checkpoints=s.checkpoints.listing(job_id, actor=caller.name),
    )


@router.get("/jobs/{job_id}/status.json")
def job_status(request: Request, caller: CallerDep, job_id: JobId) -> JSONResponse:
    view = services(request).jobs.get(job_id, actor=caller.name)
    return JSONResponse(
        {
            "state": view.state.value,
            "status": view.status.label,
            "attempt": view.attempt,
            "workers": len(view.workers),
            "allowed": sorted(a.value for a in view.allowed),
        },
        headers={"Cache-Control": "no-store"},
    )


@router.get("/jobs/{job_id}/log")
def log_chunk(
    request: Request,
    caller: CallerDep,
    job_id: JobId,
    worker: Annotated[int, Query(ge=0, le=1 << 20)] = 0,
    offset: Annotated[int, Query(ge=0, le=1 << 62)] = 0,
) -> JSONResponse:
    """A slice of one worker's log from ``offset`` (the page's follow polls it)."""
    chunk = services(request).logs.read(
        job_id, actor=caller.name, worker=worker, offset=offset, limit=LOG_TAIL
    )
    return JSONResponse(json.loads(chunk.model_dump_json()), headers={"Cache-Control": "no-store"})


@router.get("/jobs/{job_id}/log.txt")
async def log_download(
    request: Request,
    caller: CallerDep,
    job_id: JobId,
    worker: Annotated[int, Query(ge=0, le=1 << 20)] = 0,
) -> Response:
    logs = services(request).logs
    await run_in_threadpool(logs.check, job_id, actor=caller.name, worker=worker)

    async def whole() -> Any:
        offset = 0
        while True:
            chunk = await run_in_threadpool(
                logs.read, job_id, actor=caller.name, worker=worker, offset=offset, limit=1 << 20
            )
            if chunk.data:
                yield chunk.data.encode()
            if chunk.next_offset >= chunk.size or not chunk.data:
                return
            offset = chunk.next_offset

    return StreamingResponse(
        whole(),
        media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="job-{job_id}-worker-{worker}.log"'},
    )


@router.post("/jobs/{job_id}/{action}")
async def act(request: Request, caller: CallerDep, job_id: JobId, action: str) -> Response:
    """stop, delete, priority, runtime, suspend, hold, release, dev-environment, tensorboard:
    each the API's own service call."""
    form = await read_form(request)
    check_post(request, form)
    jobs = services(request).jobs
    actor = caller.name
    handler = _HANDLERS.get(action)
    if handler is not None:
        return await handler(request, job_id, action, form, actor)
    if action == "stop":
        await run_in_threadpool(jobs.stop, job_id, actor=actor)
        return back_to(f"/jobs/{job_id}", f"job {job_id}: stop requested")
    if action == "delete":
        await run_in_threadpool(jobs.delete, job_id, actor=actor)
        return back_to("/jobs", f"job {job_id} deleted")
    if action == "priority":
        tier = _choice(Priority, (form.get("priority") or [""])[-1], "priority")
        if tier is None:
            raise InvalidSpec("priority: choose a tier")
        await run_in_threadpool(jobs.change_priority, job_id, tier, actor=actor)
        return back_to(f"/jobs/{job_id}", f"priority set to {tier.value}")
    if action == "runtime":
        text = (form.get("max_runtime") or [""])[-1].strip()
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise InvalidSpec(f"max runtime: {exc}") from None
        if not 0 < seconds <= 366 * 86400:
            raise InvalidSpec("max runtime: give more than 0 and at most 366 days")
        await run_in_threadpool(jobs.change_runtime, job_id, seconds, actor=actor)
        return back_to(f"/jobs/{job_id}", f"max runtime set to {text}")
    raise InvalidSpec(
        f"{action!r} is not an action (stop, delete, priority, runtime, suspend, hold, release, "
        f"{', '.join(EXEC_ACTIONS)}, {', '.join(CREATE_ACTIONS)})"
    )


PAUSE_ACTIONS = ("suspend", "hold", "release")
EXEC_ACTIONS = ("exec-stop", "exec-start", "exec-check")
"""``gpuyard exec JOB stop --hold``, ``start`` and ``run -t checker`` (docs/jobs.md)."""


async def _exec(
    request: Request, job_id: int, action: str, form: dict[str, list[str]], actor: str
) -> Response:
    """Hold a running job for debugging (for ``hold``, a duration; default as the API's),
    run a held job's command again, or the node check on its nodes: the exec service's
    own calls, with its rules."""
    execs = services(request).execs
    if action == "exec-stop":
        text = (form.get("hold") or [""])[-1].strip()
        try:
            hold = ExecStop(hold=parse_duration(text) if text else None).hold
        except (ValueError, ValidationError) as exc:
            raise InvalidSpec(f"hold for: {exc}") from None
        done = await run_in_threadpool(execs.stop, job_id, actor=actor, hold=hold)
    elif action == "exec-start":
        done = await run_in_threadpool(execs.start, job_id, actor=actor)
    else:
        checker = ExecRun(target=ExecTarget.CHECKER)
        done = await run_in_threadpool(execs.run, job_id, checker, actor=actor)
    return back_to(f"/jobs/{job_id}", f"job {job_id}: {done.outcome}")


async def _create(
    request: Request, job_id: int, action: str, form: dict[str, list[str]], actor: str
) -> Response:
    """A development environment or a TensorBoard made from the job (web/interactive.py);
    the new job's page next."""
    made = await run_in_threadpool(create, services(request), job_id, Action(action), actor=actor)
    return back_to(f"/jobs/{made.id}", f"job {made.id} ({made.name}) submitted")


async def _pause(
    request: Request, job_id: int, action: str, form: dict[str, list[str]], actor: str
) -> Response:
    """suspend (with ``hold=1``: a pause, held once suspended), hold, release (docs/jobs.md)."""
    if action == "suspend":
        hold = (form.get("hold") or [""])[-1] == "1"
        scheduling = services(request).scheduling
        await run_in_threadpool(scheduling.suspend, job_id, actor=actor, hold=hold)
        return back_to(
            f"/jobs/{job_id}", f"job {job_id}: suspend{' and hold' if hold else ''} requested"
        )
    held = action == "hold"
    await run_in_threadpool(services(request).jobs.hold, job_id, actor=actor, held=held)
    return back_to(f"/jobs/{job_id}", f"job {job_id}: {'held' if held else 'released'}")


_Handler = Callable[[Request, int, str, dict[str, list[str]], str], Awaitable[Response]]
_HANDLERS: dict[str, _Handler] = {
    **dict.fromkeys(PAUSE_ACTIONS, _pause),
    **dict.fromkeys(EXEC_ACTIONS, _exec),
    **{a.value: _create for a in CREATE_ACTIONS},
}
"""The actions with a function of their own: each takes the request, the job's id, the
action, the posted form and the actor."""
