"""``docparser-operator`` command line: ``render`` (offline), ``run`` (the controller) and the
rollout verbs ``promote`` / ``resume`` / ``abort`` / ``set-weight`` / ``status`` (cli/rollout.py).

``render -f FILE`` prints every child of every DocParser in FILE (a multi-document YAML
stream; ``-`` reads stdin) as one YAML stream: GitOps users commit or diff it, and tests use
it, without a cluster. Documents of other kinds are skipped with a note on stderr. A spec
the CRD would reject prints the reason and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from docparser_operator import __version__
from docparser_operator.api.naming import API_VERSION, KIND

EXIT_INVALID = 2


class _NoAliasDumper(yaml.SafeDumper):
    """Never emit &anchors/*aliases: manifests must read the same in every tool."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def to_yaml_stream(objects: Sequence[dict[str, Any]]) -> str:
    """The render output format: one ``---``-separated document per object, keys in order."""
    return yaml.dump_all(objects, Dumper=_NoAliasDumper, sort_keys=False, explicit_start=True)


def _read_documents(path: str) -> list[dict[str, Any]]:
    if path == "-":
        return [d for d in yaml.safe_load_all(sys.stdin) if d]
    with open(path, encoding="utf-8") as handle:
        return [d for d in yaml.safe_load_all(handle) if d]


def _describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def render_resource(
    resource: dict[str, Any], *, canary_ready: bool = True, idle: bool = False
) -> list[dict[str, Any]]:
    """Every child of a raw DocParser once settled (core/render's ``render_all``, which takes
    it typed): the render command parses it here, so nothing below the controller reads a raw
    resource. Raises pydantic.ValidationError on a bad spec."""
    from docparser_operator.api.models import DocParser
    from docparser_operator.core.render import render_all

    model = DocParser.from_resource(resource)
    return render_all(model, canary_ready=canary_ready, idle=idle)


def render_documents(
    documents: Sequence[dict[str, Any]], *, canary_ready: bool, err: TextIO
) -> list[dict[str, Any]]:
    """Children of every DocParser in ``documents``; raises ValueError naming a bad one."""
    children: list[dict[str, Any]] = []
    for index, doc in enumerate(documents):
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
            print(f"# skipped document {index}: kind {kind} is not {KIND}", file=err)
            continue
        if doc.get("apiVersion") != API_VERSION:
            raise ValueError(f"document {index}: apiVersion must be {API_VERSION}")
        name = (doc.get("metadata") or {}).get("name", f"#{index}")
        try:
            children.extend(render_resource(doc, canary_ready=canary_ready))
        except ValidationError as exc:
            raise ValueError(f"DocParser {name}: {_describe(exc)}") from exc
    return children


def _cmd_render(args: argparse.Namespace) -> int:
    try:
        documents = _read_documents(args.file)
        children = render_documents(
            documents, canary_ready=not args.canary_not_ready, err=sys.stderr
        )
    except (OSError, yaml.YAMLError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write(to_yaml_stream(children))
    return 0


def _cmd_rollout(args: argparse.Namespace) -> int:
    from docparser_operator.cli.connection import NoConnection, connect
    from docparser_operator.cli.rollout import RolloutCommandError, rewrite_file, run_live

    weight = getattr(args, "weight", None)
    try:
        if getattr(args, "file", None):
            with open(args.file, encoding="utf-8") as handle:
                text, names = rewrite_file(args.command, handle.read(), args.name, weight=weight)
            with open(args.file, "w", encoding="utf-8") as handle:
                handle.write(text)
            done = "weight set" if args.command == "set-weight" else f"{args.command}d"
            print(f"{done} {', '.join(names)} in {args.file}: commit it", file=sys.stderr)
            return 0
        if not args.name:
            print("error: NAME or -f FILE is required", file=sys.stderr)
            return EXIT_INVALID
        connection = connect(
            kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace
        )
        return run_live(args.command, args.name, connection, weight=weight)
    except (OSError, yaml.YAMLError, RolloutCommandError, NoConnection, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID


def _cmd_capacity(args: argparse.Namespace) -> int:
    from docparser_operator.cli import capacity
    from docparser_operator.cli.connection import NoConnection, connect

    try:
        connection = connect(
            kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace
        )
    except (OSError, NoConnection, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return capacity.run(args.name, connection)


def _cmd_run(args: argparse.Namespace) -> int:
    from docparser_operator.controller import runner

    runner.run(args.namespace or [])
    return 0


def build_parser(prog: str = "docparser-operator") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Kubernetes operator for DocParser document-parsing services.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser("render", help="print the child manifests of DocParsers (no cluster)")
    render.add_argument("-f", "--file", required=True, help="DocParser YAML file, '-' for stdin")
    render.add_argument(
        "--canary-not-ready",
        action="store_true",
        help="render as while canary pods are not Ready (all traffic to stable)",
    )
    render.set_defaults(func=_cmd_render)

    run = sub.add_parser("run", help="run the controller (in-cluster config or KUBECONFIG)")
    run.add_argument(
        "--namespace",
        action="append",
        metavar="NS",
        help="watch only this namespace (repeatable; default all namespaces)",
    )
    run.set_defaults(func=_cmd_run)

    verbs = {
        "promote": "make the canary the stable revision (live, or -f FILE for a Git commit)",
        "resume": "continue a canary analysis paused at a pause step (live, or -f FILE)",
        "abort": "remove the canary: traffic back to stable as its Ready pods allow",
        "set-weight": "set the canary's requested traffic weight (0..100) of a manual canary",
        "status": "show revisions, pods, traffic, conditions and recent events",
    }
    for verb, text in verbs.items():
        cmd = sub.add_parser(verb, help=text)
        with_file = verb in ("promote", "resume", "set-weight")
        optional_name = verb in ("promote", "resume")  # -f FILE alone: every DocParser in it
        cmd.add_argument("name", nargs="?" if optional_name else None, help="DocParser name")
        if verb == "set-weight":
            cmd.add_argument("weight", type=int, help="percent of traffic, 0..100")
        cmd.add_argument(
            "-n", "--namespace", help="namespace (default: the context's, else default)"
        )
        cmd.add_argument("--context", help="kubeconfig context (default: the current one)")
        cmd.add_argument(
            "--kubeconfig", help="kubeconfig file (default: KUBECONFIG, else ~/.kube/config)"
        )
        if with_file:
            cmd.add_argument(
                "-f", "--file", help="rewrite this manifest file instead of the cluster"
            )
        cmd.set_defaults(func=_cmd_rollout)
    capacity = sub.add_parser("capacity", help="show status.capacity and its advice as a table")
    capacity.add_argument("name", help="DocParser name")
    capacity.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    capacity.add_argument("--context", help="kubeconfig context (default: the current one)")
    capacity.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG)")
    capacity.set_defaults(func=_cmd_capacity)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "docparser-operator") -> int:
    args = build_parser(prog).parse_args(argv)
    return int(args.func(args))


def kubectl_main() -> int:
    """``kubectl docparser ...``: kubectl finds the ``kubectl-docparser`` executable on PATH and
    passes the words after ``docparser``; the same commands as ``docparser-operator``."""
    return main(prog="kubectl docparser")


if __name__ == "__main__":
    sys.exit(main())
