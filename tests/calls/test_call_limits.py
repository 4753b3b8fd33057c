"""The limits under concurrent load, across two api processes: 4 per org, 8 per node, 120 starts a
minute, 20 USD of publishers' prices a month, a key's spend cap; nothing lost or double counted."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import loopback
from sqlmodel import Session, col, select

from api.calls.tables import ActionCall

from .calltest import call, error, running, step_headers, usage, vm_commands
from .stack import ECHO, FREE, NAMESPACE, PRICEY, Org, Stack, build_variant, publish

SLOW = {"mode": "sleep", "seconds": 1}
HOLD = {"mode": "sleep", "seconds": 30}


def _seconds_to_month_end() -> float:
    now = dt.datetime.now(dt.UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return (end - now).total_seconds()


class Held:
    """Calls that sleep in their VMs (to the action's 5 s timeout), sent from threads, each under its own
    Idempotency-Key, until `release` cancels them: once all are seen running, what a test sends next finds
    their slots taken, rather than a slot some call freed before the last one came in."""

    def __init__(self, stack: Stack, orgs: list[Org], count: int) -> None:
        self.stack, self.orgs = stack, orgs
        self.keys = [f"hold-{uuid.uuid4().hex[:8]}" for _ in range(count)]
        self.pool = ThreadPoolExecutor(count)
        self.answers = [
            self.pool.submit(
                call, stack, orgs[i % len(orgs)], f"{FREE}/fail@1", HOLD, key=key, url=stack.api_urls[i % 2]
            )
            for i, key in enumerate(self.keys)
        ]
        deadline = time.monotonic() + 60
        while sum("sleep 30 " in c for c in vm_commands(stack)) < count:
            assert time.monotonic() < deadline, [a.result().text for a in self.answers if a.done()]
            time.sleep(0.05)

    def release(self) -> None:
        """Cancel every held call (one that reached its timeout first has ended anyway) and wait for its
        answer."""
        for i, key in enumerate(self.keys):
            org = self.orgs[i % len(self.orgs)]
            loopback.post(
                f"{self.stack.url}/v1/actions/call/cancel",
                headers=org.headers,
                json={"idempotency_key": key},
                timeout=30,
            )
        for answer in self.answers:
            r = answer.result()
            assert r.json().get("error", {}).get("code") in ("tool_failed", "tool_timed_out"), r.text
        self.pool.shutdown()


def test_an_organization_runs_4_calls_at_once_and_the_fifth_waits(stack: Stack) -> None:
    org = stack.org()
    held = Held(stack, [org], 4)
    try:
        refused = [call(stack, org, f"{FREE}/fail@1", SLOW, url=url) for url in stack.api_urls]
    finally:
        held.release()
    for r in refused:
        err = error(r, 429, "concurrency_limited")
        # The soonest running call must end by its deadline: 5 s of the action's time plus the overhead.
        assert 1 <= err["retry_after"] <= 16, err
    assert usage(stack, org)["calls"] == 4


def test_a_node_runs_8_calls_at_once_and_says_node_busy_beyond(stack: Stack) -> None:
    orgs = [stack.org() for _ in range(3)]
    held = Held(stack, orgs, 8)
    try:
        busy = [call(stack, orgs[i], f"{FREE}/fail@1", SLOW, url=stack.api_urls[i % 2]) for i in range(3)]
    finally:
        held.release()
    for r in busy:
        err = error(r, 503, "tool_unavailable", "node_busy")
        assert err["retry_after"] <= 16 and "nothing was billed" in err["message"]
    assert sum(usage(stack, o)["calls"] for o in orgs) == 8


def test_120_starts_a_minute_from_two_api_processes_exactly(stack: Stack) -> None:
    org = stack.org()
    lock = threading.Lock()
    ok: list[str] = []
    refused: list[httpx.Response] = []
    began = time.monotonic()

    def worker(i: int) -> None:
        while True:
            r = call(stack, org, f"{FREE}/noop@1", url=stack.api_urls[i % 2])
            with lock:
                if r.status_code == 200:
                    ok.append(r.json()["call_id"])
                    continue
                refused.append(r)
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - began
    assert len(ok) == len(set(ok)) == 120
    assert elapsed < 50, "the starts must fall in one window for this test"
    for r in refused:
        err = error(r, 429, "rate_limited")
        # The oldest start leaves the 60 s window 60 s after it was made.
        assert 60 - elapsed - 2 <= err["retry_after"] <= 60, (err, elapsed)
    assert usage(stack, org)["calls"] == 120


def test_20_usd_of_publishers_prices_a_month_then_quota_exceeded_until_the_month_ends(stack: Stack) -> None:
    org = stack.org()
    for i in range(20):
        r = call(stack, org, f"{PRICEY}/noop@1", url=stack.api_urls[i % 2])
        assert r.status_code == 200, r.text
        assert r.json()["cost"]["price"] == 1_000_000
    err = error(call(stack, org, f"{PRICEY}/noop@1"), 429, "quota_exceeded")
    assert abs(err["retry_after"] - _seconds_to_month_end()) < 5
    assert err["limit"] == "publisher_prices" and err["spent_microusd"] == 20_000_000
    # A free action is not counted against the publishers' prices.
    assert call(stack, org, f"{FREE}/noop@1").status_code == 200
    assert usage(stack, org)["units"]["actions.publisher_microusd"] == 20_000_000


def test_a_key_past_its_monthly_spend_cap_is_refused(stack: Stack) -> None:
    org = stack.org(cap=250)
    assert call(stack, org, f"{ECHO}/noop@1").status_code == 200
    assert call(stack, org, f"{ECHO}/noop@1").status_code == 200
    err = error(call(stack, org, f"{ECHO}/noop@1"), 429, "quota_exceeded")
    assert err["limit"] == "key_spend_cap" and err["cap_microusd"] == 250
    assert abs(err["retry_after"] - _seconds_to_month_end()) < 5
    other = stack.add_key(org)
    assert call(stack, other, f"{ECHO}/noop@1").status_code == 200


def test_a_routine_steps_call_waits_in_the_api_for_a_slot_and_an_http_call_does_not(stack: Stack) -> None:
    url, proc = stack.start_api(listed=False, extra_env={"B3OS_ROUTINE_ADMISSION_WAIT_S": "5"})
    org = stack.org()
    worker = step_headers(stack, org, "routine-wait-run_slot1", "a")
    try:
        with ThreadPoolExecutor(8) as pool:
            busy = [pool.submit(call, stack, org, f"{FREE}/fail@1", SLOW, url=url) for _ in range(4)]
            while running(stack, org) < 4:
                time.sleep(0.02)
            refused = call(stack, org, f"{FREE}/noop@1", url=url)  # over HTTP: answered at once
            waited = loopback.post(
                f"{url}/v1/actions/call",
                headers=worker,
                json={"ref": f"{FREE}/noop@1", "input": {}},
                timeout=30,
            )
            assert [f.result().status_code for f in busy] == [200] * 4
    finally:
        proc.stop()
    error(refused, 429, "concurrency_limited")
    # the step's call got the first slot freed (about 1 s), not a 429 to wait out in whole seconds
    assert waited.status_code == 200, waited.text
    assert usage(stack, org)["calls"] == 5


FOUR = {"mode": "sleep", "seconds": 4}


def _finished(stack: Stack, org: Org) -> list[dt.datetime]:
    with Session(stack.engine) as session:
        rows = session.exec(select(ActionCall.finished_at).where(col(ActionCall.org_id) == org.org_id)).all()
    return [at for at in rows if at is not None]


def test_concurrency_limited_says_when_a_slot_frees_from_the_running_calls_and_their_actions_times(
    stack: Stack, tmp_path: Path
) -> None:
    assert stack.publisher is not None and stack.signing_key is not None
    # a pack of its own: the run times the api has seen of its action are this test's 4 s calls alone
    pack = f"{NAMESPACE}/four-{uuid.uuid4().hex[:8]}"
    root = build_variant(tmp_path, stack.signing_key, pack=pack, pricing={"model": "free"}, timeout_ms=20_000)
    publish(stack, stack.publisher, root)
    stack.wait_installed("node-a", [f"{pack}@1.0.0"])
    ref = f"{pack}/fail@1"
    seeder = stack.org()
    with ThreadPoolExecutor(4) as pool:  # four at once, as each wave below: their times are alike
        seen = list(pool.map(lambda _: call(stack, seeder, ref, FOUR), range(4)))
    assert [r.status_code for r in seen] == [200] * 4, [r.text for r in seen]
    for _ in range(3):
        org = stack.org()
        with ThreadPoolExecutor(4) as pool:
            wave = [pool.submit(call, stack, org, ref, FOUR) for _ in range(4)]
            while running(stack, org) < 4:
                assert not any(f.done() for f in wave), [f.result().text for f in wave if f.done()]
                time.sleep(0.02)
            sent = dt.datetime.now(dt.UTC)
            refused = call(stack, org, ref, FOUR)
            answered = dt.datetime.now(dt.UTC)
            assert [f.result().status_code for f in wave] == [200] * 4
        retry_after = error(refused, 429, "concurrency_limited")["retry_after"]
        assert refused.headers["Retry-After"] == str(retry_after)
        # The first slot freed when the soonest of the 4 calls ended, as the api wrote it (its clock is
        # this process's); the refusal came between `sent` and `answered`.
        freed = min(_finished(stack, org))
        least, most = (freed - answered).total_seconds(), (freed - sent).total_seconds()
        if least >= 2.5:
            break  # else a busy machine refused the call late in the 4 s: whole seconds say little; again
    assert retry_after >= least, (retry_after, least, most)  # not shorter than the wait
    assert retry_after <= 1.5 * least, (retry_after, least, most)  # nor much longer
