"""HTTP semantics of /v1/jobs: 202 + Location, polling, progress, queue positions,
Idempotency-Key (same body -> same job, other body -> 409), cancel, 404, failures,
and two app instances sharing one real Redis (any replica answers for any job)."""

from __future__ import annotations

import asyncio
import io
import time

import pytest
from app_for_tests import JOBS, make_settings, serving, upload
from engines_for_tests import GatedEngine, png_bytes
from PIL import Image


def pdf_bytes(pages: int) -> bytes:
    images = [Image.new("RGB", (200 + 10 * i, 300), "white") for i in range(pages)]
    buf = io.BytesIO()
    images[0].save(buf, format="PDF", save_all=True, append_images=images[1:], resolution=72)
    return buf.getvalue()


async def wait_status(client, job_id: str, statuses: set[str], timeout: float = 10.0) -> dict:
    end = time.monotonic() + timeout
    while True:
        body = (await client.get(f"{JOBS}/{job_id}")).json()
        if body["status"] in statuses:
            return body
        assert time.monotonic() < end, f"job stuck in {body['status']}: {body}"
        await asyncio.sleep(0.02)


async def test_submit_poll_result_and_progress():
    async with serving(make_settings(max_batch_size=1, pdf_dpi=72)) as (_app, client, _engine):
        reply = await client.post(JOBS, **upload(pdf_bytes(3), mode="text"))
        assert reply.status_code == 202
        job = reply.json()
        assert reply.headers["location"] == f"/v1/jobs/{job['id']}"
        assert job["status"] in ("queued", "running") and job["object"] == "job"
        done = await wait_status(client, job["id"], {"succeeded"})
        metrics = (await client.get("/metrics")).text
    assert 'docparser_jobs_finished_total{status="succeeded"} 1.0' in metrics
    assert done["progress"] == {"pages_done": 3, "pages_total": 3}
    result = done["result"]
    assert [p["index"] for p in result["pages"]] == [0, 1, 2]
    assert result["pages"][1]["content"] == "# page 1 210x300 text tier 0"
    assert "queue_position" not in done


async def test_queue_positions_and_cancel_of_a_queued_job():
    async with serving() as (_app, client, engine):
        engine.gate.clear()
        engine.entered.clear()
        first = (await client.post(JOBS, **upload(png_bytes(), "a.png"))).json()
        await asyncio.to_thread(engine.entered.wait, 5)
        await wait_status(client, first["id"], {"running"})
        second = (await client.post(JOBS, **upload(png_bytes(), "b.png", tier="1"))).json()
        third = (await client.post(JOBS, **upload(png_bytes(), "c.png", tier="2"))).json()
        assert (second["status"], second["queue_position"]) == ("queued", 0)
        assert third["queue_position"] == 1
        deadline = time.monotonic() + 10
        while "docparser_jobs_queued 2.0" not in (await client.get("/metrics")).text:
            assert time.monotonic() < deadline, "queued-jobs gauge never showed 2"
            await asyncio.sleep(0.1)
        running = (await client.get(f"{JOBS}/{first['id']}")).json()
        assert running["status"] == "running" and running["progress"]["pages_total"] == 1

        cancelled = await client.delete(f"{JOBS}/{second['id']}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert (await client.get(f"{JOBS}/{third['id']}")).json()["queue_position"] == 0
        engine.gate.set()
        await wait_status(client, first["id"], {"succeeded"})
        await wait_status(client, third["id"], {"succeeded"})
        again = (await client.get(f"{JOBS}/{second['id']}")).json()
    assert again["status"] == "cancelled" and "result" not in again
    # The cancelled job never reached the engine: tiers 0 and 2 ran, tier 1 did not.
    assert [o.tier for o in engine.batch_options] == [0, 2]


async def test_cancel_of_a_running_job_stops_at_the_next_page():
    engine = GatedEngine(delay_s=0.4)
    async with serving(make_settings(max_batch_size=1), engine) as (_app, client, _):
        job = (await client.post(JOBS, **upload(pdf_bytes(5)))).json()
        await wait_status(client, job["id"], {"running"})
        await asyncio.to_thread(engine.entered.wait, 5)
        requested = (await client.delete(f"{JOBS}/{job['id']}")).json()
        assert requested["status"] in ("running", "cancelled")
        final = await wait_status(client, job["id"], {"cancelled", "succeeded", "failed"})
    assert final["status"] == "cancelled"
    assert final["progress"]["pages_done"] < 5
    assert len(engine.batches) <= 2  # the page in the engine finishes, later ones never start


async def test_idempotency_key_same_body_same_job_other_body_conflict():
    async with serving() as (_app, client, _engine):
        headers = {"Idempotency-Key": "order-42"}
        first = await client.post(JOBS, headers=headers, **upload(png_bytes(), "a.png"))
        again = await client.post(JOBS, headers=headers, **upload(png_bytes(), "a.png"))
        assert first.status_code == again.status_code == 202
        assert again.json()["id"] == first.json()["id"]
        assert again.headers["idempotent-replayed"] == "true"
        other_body = await client.post(
            JOBS, headers=headers, **upload(png_bytes(), "a.png", tier="3")
        )
        assert other_body.status_code == 409
        assert other_body.json()["error"]["code"] == "idempotency_conflict"
        bad_key = await client.post(
            JOBS, headers={"Idempotency-Key": "has space"}, **upload(png_bytes(), "a.png")
        )
        assert bad_key.status_code == 400
        fresh = await client.post(JOBS, headers={"Idempotency-Key": "k2"}, **upload(png_bytes()))
        assert fresh.json()["id"] != first.json()["id"]


async def test_unknown_job_404_and_finished_job_cannot_be_cancelled():
    async with serving() as (_app, client, _engine):
        for method in ("GET", "DELETE"):
            missing = await client.request(method, f"{JOBS}/job_doesnotexist")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "job_not_found"
        job = (await client.post(JOBS, **upload(png_bytes(), "a.png"))).json()
        await wait_status(client, job["id"], {"succeeded"})
        conflict = await client.delete(f"{JOBS}/{job['id']}")
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "job_finished"


async def test_bad_document_fails_the_job_with_the_parse_error():
    async with serving() as (_app, client, _engine):
        job = (await client.post(JOBS, **upload(b"this is not an image at all", "x.bin"))).json()
        failed = await wait_status(client, job["id"], {"failed"})
    assert failed["error"]["code"] == "unsupported_media_type" and "result" not in failed


async def test_invalid_options_and_stream_are_refused_at_submit():
    async with serving() as (_app, client, _engine):
        bad_tier = await client.post(JOBS, **upload(png_bytes(), "a.png", tier="9"))
        assert bad_tier.status_code == 400
        stream = await client.post(JOBS, **upload(png_bytes(), "a.png", stream="true"))
        assert stream.status_code == 400


async def test_draining_replica_refuses_new_jobs_but_answers_for_old_ones():
    async with serving() as (app, client, _engine):
        job = (await client.post(JOBS, **upload(png_bytes(), "a.png"))).json()
        await wait_status(client, job["id"], {"succeeded"})
        app.state.runtime.lifecycle.start_draining()
        refused = await client.post(JOBS, **upload(png_bytes(), "b.png"))
        assert refused.status_code == 503
        assert (await client.get(f"{JOBS}/{job['id']}")).status_code == 200


async def test_memory_store_fails_queued_jobs_when_the_process_stops():
    async with serving() as (app, client, engine):
        engine.gate.clear()
        engine.entered.clear()
        running = (await client.post(JOBS, **upload(png_bytes(), "a.png"))).json()
        await asyncio.to_thread(engine.entered.wait, 5)
        queued = (await client.post(JOBS, **upload(png_bytes(), "b.png"))).json()
        store = app.state.runtime.job_store
        engine.gate.set()  # the running job finishes during the drain
    assert (await store.get(running["id"])).status == "succeeded"
    left = await store.get(queued["id"])
    assert left.status == "failed" and left.error["code"] == "unavailable"


@pytest.mark.redis
async def test_any_replica_answers_for_any_job_with_redis(redis_url):
    submitter = make_settings(redis_url=redis_url, job_workers=0)
    runner = make_settings(redis_url=redis_url, job_lease_s=2)
    async with serving(submitter) as (_a, client_a, _e), serving(runner) as (_b, client_b, _f):
        job = (await client_a.post(JOBS, **upload(pdf_bytes(2)))).json()
        assert (await client_b.get(f"{JOBS}/{job['id']}")).status_code == 200
        done = await wait_status(client_a, job["id"], {"succeeded"})
        assert done["progress"] == {"pages_done": 2, "pages_total": 2}
        cancel_elsewhere = await client_b.delete(f"{JOBS}/{job['id']}")
        assert cancel_elsewhere.status_code == 409


async def test_jobs_are_private_to_the_api_key_that_submitted_them(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("key-alice-0123456789\nkey-bob-0123456789\n")
    alice = {"Authorization": "Bearer key-alice-0123456789", "Idempotency-Key": "same"}
    bob = {"Authorization": "Bearer key-bob-0123456789", "Idempotency-Key": "same"}
    async with serving(make_settings(api_keys_file=keys)) as (_app, client, _engine):
        assert (await client.post(JOBS, **upload(png_bytes(), "a.png"))).status_code == 401
        job = (await client.post(JOBS, headers=alice, **upload(png_bytes(), "a.png"))).json()
        # Bob's identical key and body make his own job: key spaces are per API key.
        bobs = (await client.post(JOBS, headers=bob, **upload(png_bytes(), "a.png"))).json()
        assert bobs["id"] != job["id"]
        for method in ("GET", "DELETE"):
            hidden = await client.request(method, f"{JOBS}/{job['id']}", headers=bob)
            assert hidden.status_code == 404
        seen = await client.get(f"{JOBS}/{job['id']}", headers=alice)
        assert seen.status_code == 200 and seen.json()["id"] == job["id"]


async def test_a_full_job_queue_answers_429_with_retry_after():
    async with serving(make_settings(max_queued_jobs=1)) as (_app, client, engine):
        engine.gate.clear()
        engine.entered.clear()
        running = (await client.post(JOBS, **upload(png_bytes(), "a.png"))).json()
        await asyncio.to_thread(engine.entered.wait, 5)
        await wait_status(client, running["id"], {"running"})
        queued = await client.post(JOBS, **upload(png_bytes(), "b.png"))
        assert queued.status_code == 202
        full = await client.post(JOBS, **upload(png_bytes(), "c.png"))
        assert full.status_code == 429
        assert full.json()["error"]["code"] == "job_queue_full"
        assert float(full.headers["retry-after"]) > 0
        engine.gate.set()
        await wait_status(client, queued.json()["id"], {"succeeded"})
        again = await client.post(JOBS, **upload(png_bytes(), "d.png"))
        assert again.status_code == 202
        await wait_status(client, again.json()["id"], {"succeeded"})


async def test_a_job_outlives_the_synchronous_request_timeout():
    """A 3-page job taking ~1.5 s with a 0.5 s sync timeout succeeds (jobs have their own
    deadline, DOCPARSER_JOB_TIMEOUT_S); the same document as a sync request times out."""
    engine = GatedEngine(delay_s=0.5)
    settings = make_settings(max_batch_size=1, request_timeout_s=0.5, job_timeout_s=60)
    async with serving(settings, engine) as (_app, client, _):
        job = (await client.post(JOBS, **upload(pdf_bytes(3)))).json()
        done = await wait_status(client, job["id"], {"succeeded", "failed"}, timeout=30)
        assert done["status"] == "succeeded", done
        sync = await client.post("/v1/document/parse", **upload(pdf_bytes(3)))
        assert sync.status_code == 504, sync.text


async def test_a_job_past_its_own_deadline_fails_with_deadline_exceeded():
    engine = GatedEngine(delay_s=0.5)
    settings = make_settings(max_batch_size=1, job_timeout_s=0.6)
    async with serving(settings, engine) as (_app, client, _):
        job = (await client.post(JOBS, **upload(pdf_bytes(4)))).json()
        done = await wait_status(client, job["id"], {"succeeded", "failed"}, timeout=30)
    assert done["status"] == "failed" and done["error"]["code"] == "deadline_exceeded", done


async def test_two_docparsers_on_one_redis_never_see_each_others_jobs(redis_url):
    """DOCPARSER_REDIS_PREFIX (the operator sets docparser:<namespace>:<name>:) scopes jobs,
    idempotency keys and cached results: B answers 404 for A's job and parses A's document
    afresh; a second replica of A answers for it."""
    a = make_settings(redis_url=redis_url, redis_prefix="docparser:ocr:invoices:")
    b = make_settings(redis_url=redis_url, redis_prefix="docparser:ocr:receipts:")
    async with (
        serving(a) as (_a, client_a, _ea),
        serving(a) as (_a2, client_a2, _ea2),
        serving(b) as (_b, client_b, engine_b),
    ):
        job = (await client_a.post(JOBS, **upload(pdf_bytes(1)))).json()
        await wait_status(client_a, job["id"], {"succeeded"})
        assert (await client_a2.get(f"{JOBS}/{job['id']}")).status_code == 200
        assert (await client_b.get(f"{JOBS}/{job['id']}")).status_code == 404
        files = {"file": ("a.png", png_bytes(130, 70), "image/png")}
        assert (await client_a.post("/v1/document/parse", files=files)).json()["cached"] is False
        again = (await client_b.post("/v1/document/parse", files=files)).json()
        assert again["cached"] is False and engine_b.batches
