"""``docparser-runtime``: serve the HTTP API, fetch model weights, or advise on tiers.

Flags override ``DOCPARSER_*`` environment variables, which override defaults
(``Settings``). ``serve`` runs uvicorn with a graceful shutdown bounded by
``drain_timeout_s`` so in-flight requests finish on SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from docparser_runtime import logs
from docparser_runtime.engines.registry import ENGINES

if TYPE_CHECKING:
    from docparser_runtime.settings import Settings


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="docparser-runtime", description="Document-parsing inference server."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the HTTP API")
    serve.add_argument("--engine", choices=sorted(ENGINES), help="default: rapidocr")
    serve.add_argument("--model-path", type=Path, help="local model directory (deepseek-ocr2)")
    serve.add_argument(
        "--allow-unverified-weights",
        action="store_true",
        default=None,
        help="serve a model directory without a matching docparser-manifest.json",
    )
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--log-level", help="debug | info | warning | error")
    serve.add_argument(
        "--log-format", choices=["auto", "json", "text"], help="default auto: json in containers"
    )

    fetch = sub.add_parser("fetch-weights", help="download and verify model weights")
    fetch.add_argument(
        "--source", required=True, help="s3:// gs:// https:// file:// or a mounted path"
    )
    fetch.add_argument("--dest", required=True, type=Path, help="destination directory")
    group = fetch.add_mutually_exclusive_group()
    group.add_argument("--sha256", help="expected sha256 of the weights manifest")
    group.add_argument("--manifest", type=Path, help="manifest file listing files and hashes")

    wait = sub.add_parser(
        "wait-weights", help="wait until another process has put verified weights in place"
    )
    wait.add_argument("--dir", required=True, type=Path, help="model directory to wait for")
    wait.add_argument("--timeout", type=float, default=3600.0, help="seconds (default 3600)")

    manifest = sub.add_parser(
        "make-manifest", help="hash a model directory into docparser-manifest.json"
    )
    manifest.add_argument("directory", type=Path, help="model directory")
    _add_advise(sub)
    _add_batch(sub)
    return parser


def _add_batch(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    batch = sub.add_parser("batch", help="parse a folder through a server's Batch API")
    actions = batch.add_subparsers(dest="batch_command", required=True)
    submit = actions.add_parser(
        "submit", help="submit SRC's images and PDFs, wait, write results under --output"
    )
    submit.add_argument("src", help="folder or fsspec prefix (file://, s3://) of documents")
    submit.add_argument("--output", required=True, help="folder or fsspec prefix for results")
    submit.add_argument("--url", default=os.environ.get("DOCPARSER_URL", "http://127.0.0.1:8000"))
    submit.add_argument("--api-key", default=os.environ.get("DOCPARSER_API_KEY"))
    submit.add_argument("--endpoint", default="/v1/document/parse", choices=["/v1/document/parse"])
    submit.add_argument("--tier", help="0..6 or auto (default: the server's)")
    submit.add_argument("--mode", choices=["markdown", "text", "grounding"])
    submit.add_argument("--pages", help="PDF page ranges, e.g. 1-3,7")
    submit.add_argument("--poll", type=float, default=2.0, help="seconds between polls")
    submit.add_argument(
        "--no-wait", action="store_true", help="submit, record the batch and exit (rerun waits)"
    )


def _add_advise(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    advise = sub.add_parser(
        "advise", help="tier and capacity advice from a folder of sample documents"
    )
    advise.add_argument(
        "directory", type=Path, nargs="?", help="folder of images and PDFs (recursive)"
    )
    advise.add_argument(
        "--from-metrics",
        metavar="URL",
        help="instead of a folder: the live figures of a pod's /metrics URL (read twice, "
        "--interval apart) or a Prometheus base URL (over --window), as status.capacity",
    )
    advise.add_argument("--interval", type=float, default=60.0, help="pod: seconds between reads")
    advise.add_argument("--window", default="1h", help="Prometheus: the window (10s..24h)")
    advise.add_argument("--selector", default="", help='Prometheus: matchers, e.g. namespace="ocr"')
    advise.add_argument("--tier", default="auto", help="spec.tier the pods serve (auto or 0..6)")
    advise.add_argument(
        "--target-wait-seconds", type=float, default=5.0, help="the p95 queue wait to size for"
    )
    advise.add_argument("--max-tier", type=int, default=6, choices=range(7), help="tier cap")
    advise.add_argument("--engine", default="deepseek-ocr2", help="sizing engine")
    advise.add_argument("--max-batch-size", type=int, default=8, help="runtime.maxBatchSize")
    advise.add_argument("--max-new-tokens", type=int, default=4096, help="runtime.maxNewTokens")
    advise.add_argument("--gpu-memory", help="resources.gpuMemory to check, e.g. 40Gi")
    advise.add_argument("--pages-per-hour", type=float, help="target load for the replica count")
    advise.add_argument(
        "--throughput", help="measured pages/s of one replica by tier, e.g. 0=5.2,6=2.1"
    )
    advise.add_argument("--json", action="store_true", help="print the advice as JSON")
    advise.add_argument("--no-progress", action="store_true", help="no progress bar")


def _settings_from_args(args: argparse.Namespace) -> Settings:
    from docparser_runtime.settings import Settings

    overrides = {
        key: value
        for key, value in {
            "engine": args.engine,
            "model_path": args.model_path,
            "allow_unverified_weights": args.allow_unverified_weights,
            "host": args.host,
            "port": args.port,
            "log_level": args.log_level,
            "log_format": getattr(args, "log_format", None),
        }.items()
        if value is not None
    }
    return Settings(**overrides)


def serve(args: argparse.Namespace) -> int:
    from docparser_runtime.server.app import create_app
    from docparser_runtime.server.drain import run_server, write_termination_message

    settings = _settings_from_args(args)
    logs.configure(settings.log_level, settings.log_format)
    from docparser_runtime.errors import WeightsError
    from docparser_runtime.weights.verify import check_serving_weights

    problem = settings.role_problem()
    if problem is not None:  # e.g. a front without the Redis its jobs wait in
        message = f"serve: invalid_configuration: {problem}"
        print(message, file=sys.stderr)
        write_termination_message(settings.termination_log, message)
        return 1
    try:
        if settings.role == "server":  # the CPU front loads no weights
            check_serving_weights(settings)  # refuse unverified weights unless allowed
    except WeightsError as exc:
        message = f"serve: {exc.code}: {exc.message}"
        print(message, file=sys.stderr)
        write_termination_message(settings.termination_log, message)
        return 1
    app = create_app(settings)
    # SIGTERM: readyz 503 first, then drain; an engine that cannot load exits 1 with why
    return run_server(app, settings)


def fetch_weights(args: argparse.Namespace) -> int:
    from docparser_runtime.errors import DocParserError
    from docparser_runtime.weights.fetch import fetch_weights as fetch

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        fetch(args.source, args.dest, sha256=args.sha256, manifest=args.manifest)
    except DocParserError as exc:
        print(f"fetch-weights: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    print(args.dest)
    return 0


def wait_weights(args: argparse.Namespace) -> int:
    from docparser_runtime.errors import DocParserError
    from docparser_runtime.weights.wait import wait_for_weights

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        wait_for_weights(args.dir, timeout_s=args.timeout)
    except DocParserError as exc:
        print(f"wait-weights: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    return 0


def make_manifest(args: argparse.Namespace) -> int:
    """Write DIR/docparser-manifest.json and print its sha256 (the CRD's weights.sha256)."""
    from docparser_runtime.errors import DocParserError
    from docparser_runtime.weights.manifest import write_manifest

    try:
        manifest = write_manifest(args.directory)
    except DocParserError as exc:
        print(f"make-manifest: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    print(manifest.digest())
    return 0


def advise(args: argparse.Namespace) -> int:
    """Print tier and capacity advice for a folder of sample documents (see ``advise``)."""
    import json

    if args.from_metrics:
        return _advise_live(args)
    if args.directory is None:
        print("advise: a folder of samples, or --from-metrics URL", file=sys.stderr)
        return 2

    from docparser_runtime.preprocess.pipeline import DecodeLimits
    from docparser_runtime.settings import Settings
    from docparser_runtime.sizing import advise as adv
    from docparser_runtime.sizing.advise_table import render

    try:
        throughput = _parse_throughput(args.throughput)
        opts = adv.AdviseOptions(
            max_tier=args.max_tier, engine=args.engine, max_batch_size=args.max_batch_size,
            max_new_tokens=args.max_new_tokens, gpu_memory=args.gpu_memory,
            pages_per_hour=args.pages_per_hour, throughput=throughput,
        )  # fmt: skip
        if args.gpu_memory:
            from docparser_runtime.sizing.capacity import parse_quantity

            parse_quantity(args.gpu_memory)
        if args.engine not in ("deepseek-ocr2", "rapidocr"):
            raise ValueError(f"unknown engine {args.engine!r}: deepseek-ocr2 or rapidocr")
    except ValueError as exc:
        print(f"advise: {exc}", file=sys.stderr)
        return 2
    if not args.directory.is_dir():
        print(f"advise: {args.directory} is not a folder", file=sys.stderr)
        return 2
    files = adv.sample_files(args.directory)
    show = not args.no_progress and sys.stderr.isatty() and len(files) > 1
    limits = DecodeLimits.from_settings(Settings())
    pages, skipped = adv.analyse(
        files, args.directory, limits, args.max_tier, adv.progress_bar() if show else None
    )
    advice = adv.report(pages, skipped, opts)
    if args.json:
        print(json.dumps(advice, indent=1))
    else:
        print(render(advice))
    return 0 if pages else 1


def _advise_live(args: argparse.Namespace) -> int:
    """``advise --from-metrics URL``: the live figures and recommendations (live_advise)."""
    import json
    import re
    import urllib.parse

    from docparser_runtime.sizing import live_advise

    tier: int | str = int(args.tier) if args.tier.isdigit() else args.tier
    if tier != "auto" and not (isinstance(tier, int) and 0 <= tier <= 6):
        print(f"advise: --tier is auto or 0..6, got {args.tier!r}", file=sys.stderr)
        return 2
    if not re.fullmatch(r"[1-9][0-9]*[smh]", args.window):
        print(f"advise: --window is a number and s, m or h, got {args.window!r}", file=sys.stderr)
        return 2
    opts = live_advise.LiveOptions(
        tier=tier, engine=args.engine, max_batch_size=args.max_batch_size,
        max_new_tokens=args.max_new_tokens, gpu_memory=args.gpu_memory,
        target_wait_s=args.target_wait_seconds,
    )  # fmt: skip
    pod = urllib.parse.urlsplit(args.from_metrics).path.rstrip("/").endswith("/metrics")
    try:
        if pod:
            got = live_advise.from_pod(args.from_metrics, opts, interval_s=args.interval)
        else:
            got = live_advise.from_prometheus(
                args.from_metrics, opts, window=args.window, selector=args.selector
            )
    except (OSError, ValueError, KeyError) as exc:
        print(f"advise: cannot read {args.from_metrics}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(got, indent=1))
    else:
        print(live_advise.render_report(got, f"{args.from_metrics}: capacity over"), end="")
    return 0


def _parse_throughput(text: str | None) -> dict[int, float] | None:
    if not text:
        return None
    out: dict[int, float] = {}
    for item in text.split(","):
        tier, _, value = item.partition("=")
        try:
            out[int(tier)] = float(value)
        except ValueError:
            raise ValueError(f"--throughput wants TIER=PAGES_PER_S,..., got {item!r}") from None
        if not 0 <= int(tier) <= 6 or out[int(tier)] <= 0:
            raise ValueError(f"--throughput: tier 0..6 and a positive rate, got {item!r}")
    return out


def batch_submit(args: argparse.Namespace) -> int:
    """Parse a folder through the Batch API (``client/batch_submit.py``)."""
    from docparser_runtime.client.batch_submit import SubmitOptions, submit

    options: list[tuple[str, object]] = []
    if args.tier is not None:
        if args.tier != "auto" and not (args.tier.isdigit() and 0 <= int(args.tier) <= 6):
            print(f"batch submit: --tier wants 0..6 or auto, got {args.tier!r}", file=sys.stderr)
            return 2
        options.append(("tier", args.tier if args.tier == "auto" else int(args.tier)))
    options += [(k, getattr(args, k)) for k in ("mode", "pages") if getattr(args, k) is not None]
    if not 0.05 <= args.poll <= 3600:
        print("batch submit: --poll wants 0.05..3600 seconds", file=sys.stderr)
        return 2
    opts = SubmitOptions(
        src=args.src, dst=args.output, url=args.url, api_key=args.api_key or None,
        endpoint=args.endpoint, parse_options=tuple(options), wait=not args.no_wait,
        poll_s=args.poll,
    )  # fmt: skip
    return submit(opts)


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    if args.command == "batch":
        return batch_submit(args)
    if args.command == "advise":
        return advise(args)
    if args.command == "serve":
        return serve(args)
    if args.command == "make-manifest":
        return make_manifest(args)
    if args.command == "wait-weights":
        return wait_weights(args)
    return fetch_weights(args)


if __name__ == "__main__":
    sys.exit(main())
