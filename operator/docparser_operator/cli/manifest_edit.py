"""``promote -f`` / ``resume -f`` / ``set-weight -f``: edit a committed manifest in place.

WHY a round trip instead of load-and-dump: the file is what a GitOps user commits, and a
promotion should read in review as what it is: the canary's weights in ``spec.weights``, its
runtime settings in ``spec.runtime``, the canary block gone. A plain YAML dump rewrites the whole
file (comments dropped, flow maps such as ``{min: 2, max: 8}`` expanded, quoting changed).
ruamel.yaml's round-trip mode keeps comments, key order, flow style and quoting; on top of it:

- only the documents that change are re-emitted; the others, and the ``---`` lines between
  them, are copied byte for byte;
- values are replaced key by key inside the existing mappings (``spec.weights[uri] = ...``), so a
  comment on a line whose value stays stays too;
- the sequence indentation of the file is detected and kept (``- x`` under its key, or indented);
- the result is read back and must equal what the pure functions of cli/rollout.py produce from
  the same document; otherwise nothing is written.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Callable, MutableMapping
from typing import Any

import yaml
from ruamel.yaml import YAML

SEPARATOR = re.compile(r"^(---|\.\.\.)(\s.*)?$")
Edit = Callable[[MutableMapping[str, Any]], None]


def split_documents(text: str) -> list[tuple[str, str]]:
    """[(separator line or "", document text)] in order; joined back they are ``text``."""
    chunks: list[tuple[str, str]] = []
    separator, lines = "", list[str]()
    for line in text.splitlines(keepends=True):
        if SEPARATOR.match(line.rstrip("\r\n")):
            chunks.append((separator, "".join(lines)))
            separator, lines = line, []
        else:
            lines.append(line)
    chunks.append((separator, "".join(lines)))
    return chunks


def _round_trip(text: str) -> YAML:
    rt = YAML()  # round-trip mode: comments, order, flow style
    rt.preserve_quotes = True
    rt.width = 4096  # never re-wrap a long line
    rt.brace_single_entry_mapping_in_flow_sequence = True  # [{name: x}] stays, not [name: x]
    offset = _sequence_offset(text)
    rt.indent(mapping=2, sequence=offset + 2, offset=offset)
    return rt


def _sequence_offset(text: str) -> int:
    """How far this file indents ``-`` under its key (0: at the key's column)."""
    lines = text.splitlines()
    for before, line in itertools.pairwise(lines):
        key = re.match(r"^(\s*)[^\s#-][^:]*:\s*(#.*)?$", before)
        dash = re.match(r"^(\s*)- ", line)
        if key and dash:
            return max(0, len(dash.group(1)) - len(key.group(1)))
    return 0


def set_in_place(target: MutableMapping[str, Any], source: MutableMapping[str, Any]) -> None:
    """Make ``target`` hold ``source``'s keys and values, key by key: a key whose value stays
    keeps its line and comment; keys ``source`` lacks go."""
    for key in [k for k in target if k not in source]:
        del target[key]
    for key, value in source.items():
        if key not in target or target[key] != value:
            target[key] = value


def edit_document(text: str, edit: Edit, expected: dict[str, Any]) -> str:
    """Apply ``edit`` to one document's round-trip tree and return its new text, which must
    read back as ``expected`` (the pure function's result)."""
    rt = _round_trip(text)
    tree = rt.load(text)
    edit(tree)
    out = io.StringIO()
    rt.dump(tree, out)
    written = out.getvalue()
    if yaml.safe_load(written) != expected:
        raise ValueError("the round trip would not write the expected document; file unchanged")
    return written


def promote_tree(doc: MutableMapping[str, Any]) -> None:
    spec = doc["spec"]
    canary = spec["canary"]
    weights = canary.get("weights")
    if weights:
        if isinstance(spec.get("weights"), MutableMapping):
            set_in_place(spec["weights"], weights)
        else:
            spec["weights"] = weights
    runtime = {k: v for k, v in (canary.get("runtime") or {}).items() if k != "env"}
    if runtime:
        if not isinstance(spec.get("runtime"), MutableMapping):
            spec["runtime"] = {}
        for key, value in runtime.items():
            spec["runtime"][key] = value
    env = (canary.get("runtime") or {}).get("env")
    if env:  # into spec.pod.env, replacing entries of the same name
        if not isinstance(spec.get("pod"), MutableMapping):
            spec["pod"] = {}
        names = {e.get("name") for e in env}
        kept = [e for e in spec["pod"].get("env") or [] if e.get("name") not in names]
        spec["pod"]["env"] = kept + list(env)
    del spec["canary"]


def resume_tree(token: str) -> Edit:
    def edit(doc: MutableMapping[str, Any]) -> None:
        doc["spec"]["canary"]["analysis"]["resume"] = token

    return edit


def weight_tree(weight: int) -> Edit:
    def edit(doc: MutableMapping[str, Any]) -> None:
        doc["spec"]["canary"]["weight"] = weight

    return edit
