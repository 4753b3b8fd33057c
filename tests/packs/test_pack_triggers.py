# ruff: noqa: E501
"""Triggers in the manifest (checks 36 to 40): every refusal names its field, the examples pass."""

from __future__ import annotations

import json
from typing import Any

import pytest
from packfixtures import REPO
from test_pack_checks import DELETE, mutate

from packs.checks import run_checks
from packs.manifest import parse_manifest

GH = json.loads((REPO / "examples" / "packs" / "github" / "b3pack.json").read_text())
HOOK = "triggers[0]"
POLL = {
    "key": "issue-created",
    "title": "Issue created",
    "description": "A new issue, seen by polling.",
    "kind": "poll",
    "connections": ["token"],
    "inputSchema": {"type": "object", "properties": {"owner": {"type": "string"}}},
    "eventSchema": {"type": "object", "properties": {"number": {"type": "integer"}}},
    "poll": {
        "everyS": 300,
        "request": {
            "url": "https://api.github.com/repos/${{ input.owner }}/r/issues",
            "query": {"since": "${{ cursor }}"},
        },
        "items": "${{ response.body }}",
        "dedupe": "${{ item.id }}",
        "cursor": "${{ size(items) > 0 ? items[0].created_at : cursor }}",
        "event": {"number": "${{ item.number }}"},
    },
}
GH_POLL = GH  # its triggers: the issue-opened webhook, the issue-created poll
P = "triggers[1]"

TRIGGER_CASES: list[tuple[dict[str, Any], dict[str, Any], list[str]]] = [
    (
        GH,
        {f"{HOOK}.kind": "push", f"{HOOK}.title": ""},
        [
            f'check 36: {HOOK}.title "" is not accepted: use a text of 1 to 100 characters on one line',
            f'check 36: {HOOK}.kind "push" is not accepted: use "webhook" or "poll"',
        ],
    ),
    (
        GH,
        {f"{HOOK}.webhook": DELETE, f"{HOOK}.cron": "* * * * *"},
        [
            f"check 36: {HOOK}.cron is not accepted: a trigger has only the fields key, title, description, kind, eventSchema, inputSchema, connections, webhook, poll",
            f"check 36: {HOOK}.webhook is missing: a webhook trigger describes itself in webhook: an object",
        ],
    ),
    (
        GH,
        {f"{HOOK}.eventSchema": {"type": "array"}},
        [f'check 37: {HOOK}.eventSchema.type "array" is not accepted: use "object" at the top of the schema'],
    ),
    (
        GH,
        {f"{HOOK}.eventSchema": DELETE},
        [f'check 37: {HOOK}.eventSchema is missing: use a JSON Schema of type "object"'],
    ),
    (
        GH,
        {f"{HOOK}.webhook.verify.kind": "md5", f"{HOOK}.webhook.verify.header": "Bad Header"},
        [
            f'check 38: {HOOK}.webhook.verify.kind "md5" is not accepted: use "hmac-sha256"',
            f'check 38: {HOOK}.webhook.verify.header "Bad Header" is not accepted: use a header name such as "X-Hub-Signature-256"',
        ],
    ),
    (
        GH,
        {
            f"{HOOK}.webhook.id": "headers['x-github-delivery']",
            f"{HOOK}.webhook.verify.timestamp": {"header": "X-Ts", "toleranceS": 0},
        },
        [
            f"check 38: {HOOK}.webhook.verify.timestamp.toleranceS 0 is not accepted: use whole seconds from 1 to 3600, or omit it for 300",
            f"check 38: {HOOK}.webhook.id \"headers['x-github-delivery']\" is not accepted: use one ${{{{ }}}} expression such as \"${{{{ headers['x-github-delivery'] }}}}\"",
        ],
    ),
    (
        GH,
        {f"{HOOK}.connections": ["token"]},
        [
            f'check 38: {HOOK}.connections ["token"] is not accepted: a webhook trigger uses no connection: b3os gives each subscription its own signing secret'
        ],
    ),
    (
        GH_POLL,
        {f"{P}.poll.everyS": 5, f"{P}.poll.request.url": "https://example.org/x"},
        [
            f"check 39: {P}.poll.everyS 5 is not accepted: use whole seconds from 60 to 86400, or omit it for 300",
            f'check 39: {P}.poll.request.url "https://example.org/x" is not accepted: its host example.org is not in egress: add {{"host": "example.org"}}',
        ],
    ),
    (
        GH_POLL,
        {
            f"{P}.poll.dedupe": DELETE,
            f"{P}.poll.request.headers": {"Authorization": "token ${{ input.owner }}"},
        },
        [
            f'check 39: {P}.poll.dedupe is missing: use one ${{{{ }}}} expression such as "${{{{ item.id }}}}"',
            f'check 39: {P}.poll.request.headers.Authorization "token ${{{{ input.owner }}}}" is not accepted: the connection "token" injects this header: the egress proxy sets it and a template may not',
        ],
    ),
    (
        GH_POLL,
        {f"{P}.connections": ["github"]},
        [
            f'check 39: {P}.connections[0] "github" is not accepted: use each of the pack\'s connections once: "token"'
        ],
    ),
    (
        GH_POLL,
        {f"{P}.poll.items": "${{ response.body. }}"},
        [
            f'check 40: {P}.poll.items "${{{{ response.body. }}}}" is not accepted: ${{{{ response.body. }}}} does not parse as CEL: syntax error at line 1, column 14'
        ],
    ),
]


@pytest.mark.parametrize(
    ("base", "changes", "expected"), TRIGGER_CASES, ids=[str(list(c[1])) for c in TRIGGER_CASES]
)
def test_a_refused_trigger_value_gets_its_exact_sentence(
    base: dict[str, Any], changes: dict[str, Any], expected: list[str]
) -> None:
    assert [v.message for v in run_checks(mutate(base, changes))] == expected


def test_the_github_webhook_and_a_poll_trigger_pass_and_model() -> None:
    assert run_checks(GH_POLL) == []
    manifest = parse_manifest(GH_POLL)
    hook, poll = manifest.trigger("issue-opened"), manifest.trigger("issue-created")
    assert hook is not None and hook.webhook is not None
    assert (hook.webhook.verify.header, hook.webhook.verify.prefix) == ("X-Hub-Signature-256", "sha256=")
    assert poll is not None and poll.poll is not None and poll.poll.every_s == 300 and poll.poll.has_event


def test_a_tool_pack_declares_no_trigger() -> None:
    from packfixtures import echo_manifest

    messages = [v.message for v in run_checks({**echo_manifest(), "triggers": [POLL]})]
    assert any(m.startswith("check 16: triggers") for m in messages), messages
