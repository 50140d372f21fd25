"""Typed runtime settings.

Every knob comes from one place: CLI flags override environment variables prefixed
``DOCPARSER_`` (how the operator configures pods), which override the defaults here.
Nothing else in the runtime reads ``os.environ``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

EngineName = Literal["rapidocr", "deepseek-ocr2"]


class Settings(BaseSettings):
    """All runtime settings; env var = ``DOCPARSER_`` + upper-cased field name."""

    model_config = SettingsConfigDict(env_prefix="DOCPARSER_", extra="ignore")

    # Serving
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    log_level: str = "info"
    log_format: Literal["auto", "json", "text"] = Field(
        "auto", description="json lines, text, or auto: json unless stderr is a terminal"
    )

    role: Literal["server", "front"] = Field(
        "server",
        description="server: load the engine and serve (a GPU pod); front: the CPU front of a "
        "DocParser scaled to zero: no engine, jobs into Redis, synchronous parses held until a "
        "backend is ready, then proxied (server/front/proxy.py)",
    )

    # Engine
    engine: EngineName = "rapidocr"
    model_path: Path | None = None
    model_version: str | None = Field(
        None,
        description="version reported in replies and metrics (the operator sets the weights "
        "version); default: the engine's own (rapidocr wheel) or 'dev'",
    )
    device: str = Field("auto", description="auto | cpu | cuda | cuda:N")
    engine_threads: int = Field(
        0,
        ge=0,
        description="rapidocr: onnxruntime threads per model call; 0 = the CPUs this process "
        "may use (affinity and cgroup quota), not the host's cores",
    )
    no_repeat_ngram_size: int = Field(
        20, ge=0, description="deepseek-ocr2: ban repeating n-grams (repetition loops); 0 off"
    )
    no_repeat_ngram_window: int = Field(90, ge=1, description="recent tokens the ban looks at")
    allow_unverified_weights: bool = False
    weights_sha256: str | None = Field(None, description="pinned manifest sha256 for serve")
    exit_on_load_failure: bool = Field(
        True,
        description="serve exits non-zero when the engine cannot load (Kubernetes restarts it "
        "and shows why) instead of idling with /readyz 503",
    )
    termination_log: str = Field(
        "/dev/termination-log",
        description="where serve writes why it exits (the pod's terminationMessagePath)",
    )

    # Batching and backpressure
    max_batch_size: int = Field(8, ge=1, le=256)
    max_wait_ms: float = Field(10.0, ge=0)
    continuous_batching: bool = Field(
        True,
        description="engines that can step (deepseek-ocr2): pages join and leave the running "
        "batch between decode steps; off: static micro-batches",
    )
    kv_cache_tokens: int = Field(
        0,
        ge=0,
        description="cache slots (pages x padded tokens) the running batch may hold; 0: from "
        "free GPU memory after loading (CPU: 1 GiB worth)",
    )
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    priority_max_wait_s: float = Field(
        30.0,
        gt=0,
        description="a job or background page waiting this long is admitted like a "
        "synchronous one (no starvation)",
    )
    batch_yield: Literal["auto", "rows", "slots"] = Field(
        "auto",
        description="how running batch lines give way to interactive, job and background "
        "pages: rows: they leave the decode steps (cache kept) while such a page runs or "
        "waits (a CPU device, where each row costs compute); slots: they give up a slot only "
        "when none is free (a GPU, where rows are nearly free); auto: slots on CUDA, else rows",
    )
    max_queue_pages: int = Field(256, ge=1, description="queued pages before 429")
    max_queue_pixels: int = Field(
        320_000_000,
        ge=0,
        description="decoded pixels queued for inference before 429 (memory follows pixels, "
        "about 3 bytes each plus tiles); a page above it is 413; 0: pages only. Every decoded "
        "page is also charged to the host memory budget until its engine call ends",
    )
    request_timeout_s: float = Field(600.0, gt=0)
    coverage_audit: bool = Field(
        True, description="report ink no block accounts for (pages[].warnings); off saves ~1%"
    )

    # Request limits
    max_upload_bytes: int = Field(50 * 1024 * 1024, ge=1)
    max_image_pixels: int | None = Field(
        None,
        ge=1,
        description="checked in the header, before decode; unset: the largest image whose "
        "full-size decode fits the host memory budget (the budget also checks each decode's "
        "bytes before it starts)",
    )
    memory_limit_bytes: int = Field(
        0,
        ge=0,
        description="host memory this server may use; 0: its cgroup's limit (the smallest up "
        "the hierarchy, v1 or v2), else the machine's RAM. Admission is sized from it",
    )
    max_pages: int = Field(200, ge=1)
    pdf_dpi: int = Field(144, ge=36, le=600)
    decode_workers: int = Field(
        2,
        ge=0,
        description="sandboxed decoder processes (PDF render, image decode); 0 decodes in the "
        "server process without limits (development and tests only)",
    )
    decode_timeout_s: float = Field(30.0, gt=0, description="wall clock per page decode")
    decode_cpu_s: int = Field(20, ge=1, description="CPU seconds per page decode (RLIMIT_CPU)")
    decode_memory_bytes: int = Field(
        3 * 1024**3,
        ge=256 * 1024**2,
        description="address-space limit of each decoder process (RLIMIT_AS)",
    )
    decode_lookahead: int = Field(
        2,
        ge=1,
        description="pages of one request decoded per chunk; the next chunk decodes while one "
        "is inferred, so at most two chunks of decoded pages are held per request",
    )
    default_tier: Annotated[int, Field(ge=0, le=6)] | Literal["auto"] = Field(
        6,
        description="tier of requests that name none: 0..6, or auto (each page the smallest "
        "tier that reads it, at most max_tier)",
    )
    max_tier: int = Field(
        6, ge=0, le=6, description="most tiles this deployment serves (GPU memory is sized for it)"
    )
    default_max_new_tokens: int = Field(4096, ge=1)
    max_new_tokens_limit: int = Field(8192, ge=1)

    # Protection
    api_keys_file: Path | None = None
    rate_limit_rps: float = Field(0.0, ge=0, description="per key; 0 disables")
    forwarded_allow_ips: str = Field(
        "",
        description="comma-separated proxy addresses (or *) whose X-Forwarded-For/-Proto are "
        "trusted; empty: none, so limits key on the real peer (a mesh sidecar on 127.0.0.1 "
        "would otherwise let any client choose its own address)",
    )
    max_connections: int = Field(
        1000, ge=1, description="concurrent connections and requests before 503 (uvicorn)"
    )
    keep_alive_timeout_s: float = Field(5.0, gt=0, description="idle keep-alive connections")
    header_timeout_s: float = Field(
        10.0, gt=0, description="a request's headers must arrive within this (slow clients)"
    )
    body_idle_timeout_s: float = Field(
        15.0, gt=0, description="longest pause between request body chunks before 408"
    )
    body_timeout_s: float = Field(
        120.0, gt=0, description="a whole request body must arrive within this, else 408"
    )
    rate_limit_burst: int = Field(20, ge=1)
    max_concurrency_per_key: int = Field(0, ge=0, description="0 disables")
    url_fetch_allowlist: list[str] = Field(default_factory=list)

    tracing: bool = Field(
        False,
        description="OpenTelemetry spans per request and parse, exported over OTLP/HTTP to "
        "OTEL_EXPORTER_OTLP_ENDPOINT (needs the otel extra)",
    )

    # Shared state
    redis_url: str | None = None
    redis_prefix: str = Field(
        "docparser:",
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9._:/-]+$",
        description="prefix of every Redis key of this deployment (jobs, idempotency keys, "
        "the result cache): DocParsers sharing one Redis never see each other's keys; the "
        "operator sets docparser:<namespace>:<name>:",
    )
    revision: str = Field(
        "",
        max_length=63,
        pattern=r"^[A-Za-z0-9._-]*$",
        description="this pod's revision (track); jobs run on the revision that accepted them "
        "(the operator sets it from the pod's docparser.io/revision label)",
    )
    job_ttl_s: int = Field(24 * 3600, ge=1)
    max_queued_jobs: int = Field(
        1000, ge=1, description="queued jobs before POST /v1/jobs answers 429 (uploads are held)"
    )
    max_queued_jobs_per_key: int = Field(
        100,
        ge=0,
        description="queued jobs one API key may hold before 429 job_quota_exceeded, so one "
        "tenant cannot fill the queue for the others; 0 disables (applies only when API keys "
        "are configured)",
    )
    max_finished_job_bytes: int = Field(
        256 * 1024 * 1024,
        ge=0,
        description="memory store: bytes of finished jobs (results) kept; the oldest are "
        "forgotten first past it (Redis keeps results job_ttl_s); 0 = TTL only",
    )
    redis_write_retries: int = Field(
        6,
        ge=0,
        description="retries (backoff 0.2 s doubling, at most 5 s) of a job's progress and "
        "result writes after a Redis connection error; 6 rides out about 13 s",
    )
    job_workers: int = Field(1, ge=0, description="jobs run concurrently per replica")
    job_timeout_s: float = Field(
        3600.0, gt=0, description="deadline of one async job (not the sync request timeout)"
    )
    job_lease_s: float = Field(15.0, gt=0, description="a dead replica's jobs requeue after")
    job_max_attempts: int = Field(3, ge=1, description="replica deaths before a job fails")
    # Batches (OpenAI-compatible /v1/files and /v1/batches; need redis_url too)
    batch_storage_uri: str | None = Field(
        None,
        description="fsspec root of batch files and outputs (file:///var/lib/docparser/batches, "
        "s3://bucket/prefix); unset: the batch routes answer 404 batches_not_configured",
    )
    batch_uri_prefixes: list[str] = Field(
        default_factory=list,
        description="object-store prefixes a /v1/document/parse batch line may name by uri "
        "(fsspec URLs; {key_id} is replaced by the caller's API key id); empty: no uri lines",
    )
    batch_max_file_bytes: int = Field(200 * 1024 * 1024, ge=1, description="one uploaded file")
    batch_max_lines: int = Field(50_000, ge=1, description="request lines in one batch file")
    batch_max_active_per_key: int = Field(
        4, ge=0, description="batches one API key may have unfinished (429 past it); 0 = no limit"
    )
    batch_ttl_s: int = Field(
        30 * 24 * 3600, ge=60, description="files and finished batches are deleted this long after"
    )
    batch_workers: int = Field(1, ge=0, description="batch lines run concurrently per replica")
    batch_poll_s: float = Field(1.0, gt=0, le=60, description="idle claim and coordinator period")
    batch_urgent_s: float = Field(
        3600.0,
        ge=0,
        description="a batch this close to its 24h window runs at job priority (otherwise the "
        "lowest: below interactive requests and jobs, and never aged above them)",
    )
    cache_max_bytes: int = Field(256 * 1024 * 1024, ge=0)
    cache_ttl_s: int = Field(3600, ge=1)
    cache_shared: bool = Field(
        False,
        description="share cached results across API keys (default: each key has its own, "
        "so one tenant never receives or learns what another parsed)",
    )

    # Shadow canary (issue 24): the operator mounts the config (a ConfigMap) and the
    # internal credential (a Secret) in every pod; both are re-read without a restart.
    shadow_config_file: Path = Field(
        Path("/etc/docparser/shadow/config.json"),
        description="the shadow config (JSON: enabled, target, percent, maxPagesPerMinute, "
        "stableRevision, canaryRevision); missing or unreadable: shadow off",
    )
    shadow_poll_s: float = Field(
        5.0, gt=0, le=5.0, description="how often the shadow config file is checked for changes"
    )
    shadow_max_in_flight: int = Field(
        2, ge=1, le=64, description="mirrored requests this pod has at the canary at once"
    )
    shadow_queue: int = Field(
        4, ge=0, le=1024, description="sampled requests waiting to be mirrored; past it dropped"
    )
    shadow_timeout_s: float = Field(
        120.0, gt=0, description="a mirrored request not answered within this is dropped (busy)"
    )
    internal_token_file: Path = Field(
        Path("/var/run/secrets/docparser/internal/token"),
        description="the internal credential mirrored requests carry and the mirror path "
        "checks (X-Docparser-Internal-Token); missing: the mirror path is closed",
    )
    admin_key_file: Path = Field(
        Path("/var/run/secrets/docparser/admin/admin-key"),
        description="the admin key of /admin/v1/ routes (Authorization: Bearer); missing: 404",
    )
    test_drop_line_every: int = Field(
        0,
        ge=0,
        description="TEST-ONLY fault: the rapidocr engine drops every Nth line it read (a "
        "release that reads worse, for shadow canary tests); 0 off",
    )

    # The CPU front (role front)
    front_backend_url: str | None = Field(
        None,
        pattern=r"^https?://[^\s/?#]+/?$",
        description="where the front sends synchronous parses: a Service selecting the GPU "
        "pods (the operator sets http://<ClusterIP of <name>-serving>:8000, its DNS name "
        "before the Service has one); it polls <url>/readyz",
    )
    front_hold_seconds: float = Field(
        120.0, ge=0, description="how long a synchronous parse waits for a ready backend; 0: 503"
    )
    front_retry_after_seconds: int = Field(
        30, ge=1, description="Retry-After of the front's 503 (no backend within the hold)"
    )
    front_max_held_requests: int = Field(
        64, ge=1, description="synchronous parses the front holds or forwards at once; past it 503"
    )
    front_max_held_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1,
        description="document bytes of the parses the front holds or forwards at once; past it 503",
    )
    front_poll_interval_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="how often the front polls the backend's /readyz while a parse waits (ten "
        "times less often while none does)",
    )
    front_max_reply_bytes: int = Field(
        128 * 1024 * 1024, ge=1024, description="largest backend reply the front relays"
    )

    def role_problem(self) -> str | None:
        """Why these settings cannot serve their role (a clear start-up error), or None."""
        if self.role != "front":
            return None
        missing = [
            name
            for name, value in (
                ("DOCPARSER_REDIS_URL", self.redis_url),
                ("DOCPARSER_FRONT_BACKEND_URL", self.front_backend_url),
            )
            if not value
        ]
        if missing:
            return (
                f"DOCPARSER_ROLE=front needs {' and '.join(missing)}: the front keeps no job "
                "state of its own (jobs wait in the DocParser's Redis) and forwards synchronous "
                "parses to the GPU pods' Service"
            )
        return None

    # Lifecycle
    drain_timeout_s: float = Field(120.0, ge=0)
    drain_grace_s: float = Field(
        5.0, ge=0, description="after SIGTERM: /readyz 503 while still serving (preStop window)"
    )

    @property
    def sync_deadline_s(self) -> float:
        """How long a synchronous request may run: the request timeout, but never longer
        than the drain window, so a request accepted just before SIGTERM still finishes
        before the pod is killed (async jobs have their own deadline and are re-queued)."""
        if self.drain_timeout_s > 0:
            return min(self.request_timeout_s, self.drain_timeout_s)
        return self.request_timeout_s

    engine_stall_s: float = Field(
        900.0, ge=0, description="/livez 503 when one engine call runs longer; 0 disables"
    )
