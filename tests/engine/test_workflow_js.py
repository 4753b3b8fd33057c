"""A JS action as a routine step on the real stack: examples/routines/open-issues.yaml runs the GitHub
pack's list-open-issues on a node's JS runtime, paging through a loopback stand-in of api.github.com
through the real egress proxy with the organization's token, which appears nowhere but at the stand-in."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import loopback
from realstack import RoutineStack

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "egress"))
from servers import Recorded, Reply  # noqa: E402

OPEN_ISSUES = REPO / "examples" / "routines" / "open-issues.yaml"
SECRET = "ghp_routineTokenNeverSeen0123"


def _page(request: Recorded) -> Reply:
    page = int(request.query.get("page", ["1"])[0])
    items = [{"number": page, "title": f"issue {page}", "html_url": "https://github.com/o/r", "user": None}]
    headers = [("content-type", "application/json")]
    if page < 3:
        headers.append(
            ("link", f'<https://api.github.com/repositories/5/issues?page={page + 1}>; rel="next"')
        )
    return Reply(200, headers, json.dumps(items).encode())


async def test_open_issues_pages_through_the_stand_in_with_the_token_and_nothing_else_sees_it(
    routine_stack: RoutineStack,
) -> None:
    gh = routine_stack.upstreams["api.github.com"]
    gh.on("/repos/octocat/hello-world/issues", _page)
    gh.on("/repositories/5/issues", _page)
    before = len(gh.requests)
    org = routine_stack.org(scopes=("routines:run", "routines:read", "actions:call", "connections:write"))
    async with loopback.async_client(base_url=routine_stack.url, headers=org.headers, timeout=30) as http:
        added = await http.post(
            "/v1/connections", json={"pack": "io.b3os/github", "connection": "token", "secret": SECRET}
        )
        assert added.status_code == 201, added.text
    run = await routine_stack.run(org, OPEN_ISSUES.read_text())
    assert run["status"] == "succeeded", run
    assert run["outputs"] == {"count": 3, "said": "octocat/hello-world has 3 open issues over 3 pages"}
    assert run["steps"]["issues"]["ref"] == "io.b3os/github/list-open-issues@1.0.0"
    sent = gh.requests[before:]
    assert len(sent) == 3 and all(r.header("Authorization") == f"Bearer {SECRET}" for r in sent)
    needle = SECRET.encode()
    history = await routine_stack.history(run["workflow_id"])
    assert not any(needle in event.SerializeToString() for event in history)
    assert needle not in json.dumps(run).encode()
    logs = [p.log for p in routine_stack.procs] + [routine_stack.egress.log]  # type: ignore[union-attr]
    assert not [str(log) for log in logs if needle in log.read_bytes()]
