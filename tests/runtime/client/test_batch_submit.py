"""``docparser-runtime batch submit`` against a live server (rapidocr on 127.0.0.1, real
Redis, batch files under a tmp dir through fsspec): a folder of generated documents, one of
them not a document, comes back as one Markdown and one JSON file per document and a
manifest with each document exactly once; a run stopped after submitting resumes on the
same batch (no second batch is created) and a finished one is not written twice.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from docparser_runtime.cli import main
from live_server import LiveServer, start_all
from PIL import Image, ImageDraw, ImageFont
from redis_server import RedisServer

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
KEY_A, KEY_B, KEY_C = "submit-key-a-0123456789", "submit-key-b-0123456789", "submit-key-c-01234"

pytestmark = pytest.mark.slow


def page(words: str) -> Image.Image:
    img = Image.new("RGB", (460, 120), "white")
    ImageDraw.Draw(img).text((20, 30), words, fill="black", font=ImageFont.truetype(FONT, 44))
    return img


def encoded(img: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("submit")
    keys = root / "keys"
    keys.write_text(f"{KEY_A}\n{KEY_B}\n{KEY_C}\n")
    with RedisServer() as redis:
        base = {
            "DOCPARSER_DEFAULT_TIER": "0",
            "DOCPARSER_API_KEYS_FILE": str(keys),
            "DOCPARSER_REDIS_URL": redis.url,
            "DOCPARSER_BATCH_POLL_S": "0.1",
        }
        live = LiveServer(env={**base, "DOCPARSER_BATCH_STORAGE_URI": f"file://{root}/store"})
        # No batch worker: its batches stay in progress, so a Ctrl-C always finds the wait.
        idle = LiveServer(
            env={
                **base,
                "DOCPARSER_REDIS_PREFIX": "idle:",
                "DOCPARSER_BATCH_STORAGE_URI": f"file://{root}/idle",
                "DOCPARSER_BATCH_WORKERS": "0",
            }
        )
        start_all(live, idle)
        live.idle = idle
        try:
            yield live
        finally:
            live.stop()
            idle.stop()


@pytest.fixture
def folder(tmp_path):
    src = tmp_path / "scans"
    (src / "2026").mkdir(parents=True)
    (src / "receipt.png").write_bytes(encoded(page("Receipt 42"), "PNG"))
    (src / "2026" / "invoice.jpg").write_bytes(encoded(page("Invoice 2026"), "JPEG"))
    pdf = io.BytesIO()
    page("Contract 7").save(pdf, format="PDF", save_all=True, append_images=[page("Page Two")])
    (src / "2026" / "contract.pdf").write_bytes(pdf.getvalue())
    (src / "broken.png").write_bytes(b"this is not a PNG at all")
    (src / "notes.txt").write_text("not a document: never submitted")
    return src


def batch_count(server: LiveServer, key: str) -> int:
    reply = httpx.get(
        f"{server.url}/v1/batches",
        params={"limit": 100},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    reply.raise_for_status()
    return len(reply.json()["data"])


def submit(server: LiveServer, key: str, src, dst, *extra: str) -> int:
    args = ["batch", "submit", str(src), "--output", str(dst), "--url", server.url]
    return main([*args, "--api-key", key, "--tier", "0", "--poll", "0.2", *extra])


def manifest(dst) -> list[dict]:
    return [json.loads(x) for x in (dst / "manifest.jsonl").read_text().splitlines()]


def test_a_folder_comes_back_as_markdown_json_and_a_manifest(server, folder, tmp_path, capsys):
    dst = tmp_path / "out"
    assert submit(server, KEY_A, folder, dst) == 1  # one document failed
    rows = {row["document"]: row for row in manifest(dst)}
    assert len(manifest(dst)) == 4 and sorted(rows) == [
        "2026/contract.pdf",
        "2026/invoice.jpg",
        "broken.png",
        "receipt.png",
    ]
    for doc, words, pages in [
        ("receipt.png", "Receipt", 1),
        ("2026/invoice.jpg", "Invoice", 1),
        ("2026/contract.pdf", "Contract", 2),
    ]:
        assert rows[doc]["status"] == "completed" and rows[doc]["error"] is None
        assert rows[doc]["pages"] == pages and rows[doc]["tier"] == 0
        assert words in (dst / f"{doc}.md").read_text()
        reply = json.loads((dst / f"{doc}.json").read_text())
        assert len(reply["pages"]) == pages and words in reply["content"]
    assert "Two" in (dst / "2026/contract.pdf.md").read_text()
    bad = rows["broken.png"]
    assert bad["status"] == "failed" and bad["pages"] == 0
    assert bad["error"]["code"] == "unsupported_media_type", bad
    assert not (dst / "broken.png.md").exists() and not (dst / "broken.png.json").exists()
    assert not (dst / "notes.txt.md").exists()
    err = capsys.readouterr().err
    assert "failed: broken.png: unsupported_media_type" in err
    assert "3 documents (4 pages) written, 1 failed" in err
    assert batch_count(server, KEY_A) == 1


def test_a_stopped_run_resumes_on_the_same_batch(server, folder, tmp_path, capsys):
    (folder / "broken.png").unlink()
    dst = tmp_path / "out"
    assert submit(server, KEY_B, folder, dst, "--no-wait") == 0
    state = json.loads((dst / ".docparser-batch.json").read_text())
    assert state["batch_id"] in capsys.readouterr().out
    assert batch_count(server, KEY_B) == 1
    assert not (dst / "manifest.jsonl").exists()

    assert submit(server, KEY_B, folder, dst) == 0  # every document parsed
    assert "resuming batch " + state["batch_id"] in capsys.readouterr().err
    assert batch_count(server, KEY_B) == 1  # waited on the first batch, submitted none
    assert [row["status"] for row in manifest(dst)] == ["completed"] * 3
    assert "Receipt" in (dst / "receipt.png.md").read_text()

    (dst / "receipt.png.md").write_text("edited by the user")
    assert submit(server, KEY_B, folder, dst) == 0  # finished: nothing submitted or rewritten
    assert "already written" in capsys.readouterr().err
    assert batch_count(server, KEY_B) == 1
    assert (dst / "receipt.png.md").read_text() == "edited by the user"


def test_refusals_are_reason_codes_not_tracebacks(server, folder, tmp_path, capsys):
    dst = tmp_path / "out"
    assert submit(server, KEY_C, folder, dst, "--no-wait") == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.png").write_bytes(encoded(page("X"), "PNG"))
    assert submit(server, KEY_C, other, dst) == 2  # DST holds another source's batch
    assert "state_mismatch" in capsys.readouterr().err
    assert submit(server, KEY_C, tmp_path / "empty-missing", tmp_path / "o2") == 2
    err = capsys.readouterr().err
    assert "no_documents" in err or "source_unreadable" in err
    assert submit(server, "wrong-key-0123456789", folder, tmp_path / "o3") == 2
    assert "invalid_api_key" in capsys.readouterr().err
    assert submit(server, KEY_C, folder, tmp_path / "o4", "--tier", "9") == 2
    assert batch_count(server, KEY_C) == 1


def test_a_hostile_state_file_or_output_path_is_refused(server, folder, tmp_path, capsys):
    """The state file's names are paths written under DST: one that climbs out is refused
    before anything is written; a DST that is a file is a reason, not a traceback."""
    dst = tmp_path / "out"
    dst.mkdir()
    state = {"src": str(folder), "url": server.url, "documents": ["../escaped.png"]}
    (dst / ".docparser-batch.json").write_text(json.dumps({**state, "batch_id": "batch_x"}))
    assert submit(server, KEY_C, folder, dst) == 2
    assert "bad_state_file" in capsys.readouterr().err
    assert not (tmp_path / "escaped.png.md").exists()
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert submit(server, KEY_C, folder, blocker, "--no-wait") == 2
    assert "storage_error" in capsys.readouterr().err


def _sigint_as_a_shell_leaves_it() -> None:
    """In the child before exec, SIGINT as a shell starts a foreground command: at its default
    and not blocked. A child inherits an ignored or blocked SIGINT (a full run's worker process
    can hold one after the stand-ins it ran: the CLI then polled on for 120 s after Ctrl-C), and
    Python installs no KeyboardInterrupt handler over an ignored one."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_while_waiting_leaves_a_batch_the_same_command_resumes(
    server, folder, tmp_path, monkeypatch
):
    """SIGINT (Ctrl-C) to the real CLI process while it waits: exit 130 with how to resume,
    the state file names the batch, and the same command again resumes it (no new batch)."""
    idle, dst = server.idle, tmp_path / "out"
    args = ["batch", "submit", str(folder), "--output", str(dst), "--url", idle.url]
    env = {**os.environ, "DOCPARSER_API_KEY": KEY_A}
    proc = subprocess.Popen(
        [sys.executable, "-m", "docparser_runtime", *args, "--poll", "0.2"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_a_shell_leaves_it,
    )
    state_file = dst / ".docparser-batch.json"
    try:
        deadline = time.monotonic() + 60
        while not (state_file.exists() and "batch_id" in state_file.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.1)
        time.sleep(0.5)  # in the wait loop now: the batch never progresses on this server
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)  # a loaded machine: exit is prompt, startup is not
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "rerun the same command to resume" in err and "Traceback" not in err
    batch_id = json.loads(state_file.read_text())["batch_id"]
    assert batch_count(idle, KEY_A) == 1
    monkeypatch.setenv("DOCPARSER_API_KEY", KEY_A)  # the same command: the key from the env
    assert main([*args, "--no-wait"]) == 0
    assert batch_count(idle, KEY_A) == 1  # resumed batch_id, submitted nothing
    assert json.loads(state_file.read_text())["batch_id"] == batch_id


def test_the_wait_rides_out_a_redis_restart(folder, tmp_path):
    """The CLI polls a batch for hours; the server answers 503 (``job_store_unavailable``)
    while its Redis restarts. The real CLI process keeps waiting through that (it said so on
    stderr) and writes every document once the batch completes. Before, the first 503 ended
    the run with exit 2 mid-batch, found by the 3-node batch scenario
    (e2e/cluster/test_cluster_batch.py), which restarts Redis while ``batch submit`` waits."""
    (folder / "broken.png").unlink()
    dst = tmp_path / "out"
    with RedisServer(appendonly=True) as redis:
        env = {
            "DOCPARSER_DEFAULT_TIER": "0",
            "DOCPARSER_REDIS_URL": redis.url,
            "DOCPARSER_BATCH_POLL_S": "0.1",
            "DOCPARSER_BATCH_STORAGE_URI": f"file://{tmp_path}/store",
        }
        # the test engine: each batch of pages takes 1 s, so the batch outlasts the outage
        with LiveServer(gated_delay_s=1.0, env=env) as live:
            args = ["batch", "submit", str(folder), "--output", str(dst), "--url", live.url]
            proc = subprocess.Popen(
                [sys.executable, "-m", "docparser_runtime", *args, "--poll", "0.2"],
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                state = dst / ".docparser-batch.json"
                deadline = time.monotonic() + 60
                while not (state.exists() and "batch_id" in state.read_text()):
                    assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                    time.sleep(0.1)
                redis.crash_and_restart(down_s=3.0)
                assert proc.poll() is None, proc.stderr.read()  # still waiting
                _, err = proc.communicate(timeout=120)
            finally:
                proc.kill()
    assert proc.returncode == 0, err
    assert "retrying" in err, err  # it met the outage, and said so
    assert [row["status"] for row in manifest(dst)] == ["completed"] * 3, err
