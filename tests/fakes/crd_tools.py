"""Offline stand-in for what the API server does with a DocParser: default, validate, run CEL.

The order is the server's: structural defaults first, then the OpenAPI schema (jsonschema),
then every ``x-kubernetes-validations`` rule with ``self`` bound to the (defaulted) value at
its node (cel-python). Paths and messages are reported like the server's field errors.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "docparser.yaml"
EXAMPLES_DIR = REPO / "examples"
INVALID_DIR = REPO / "tests" / "operator" / "invalid"


@functools.lru_cache(maxsize=1)
def _crd_text_parsed(text: str) -> dict:
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_crd() -> dict:
    """The CRD file, parsed (a fresh copy: callers may mutate it)."""
    return copy.deepcopy(_crd_text_parsed(CRD_FILE.read_text()))


def root_schema(crd: dict | None = None) -> dict:
    crd = crd or load_crd()
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def apply_defaults(schema: dict, value: Any) -> Any:
    """Fill ``default`` of absent properties, recursively (also inside filled defaults)."""
    if isinstance(value, dict) and schema.get("type") == "object":
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in list(value):
                if key not in schema.get("properties", {}):
                    value[key] = apply_defaults(extra, value[key])
    elif isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def schema_errors(schema: dict, value: Any) -> list[str]:
    """``path: message`` for every OpenAPI schema violation."""
    validator = jsonschema.Draft202012Validator(schema)
    return sorted(
        f"{'.'.join(str(p) for p in err.absolute_path)}: {err.message}"
        for err in validator.iter_errors(value)
    )


@dataclass(frozen=True)
class CelRule:
    path: str
    rule: str
    message: str


def iter_rules(schema: dict, path: str = "") -> list[CelRule]:
    """Every CEL rule of the schema with the schema path where it applies."""
    found = [
        CelRule(path, r["rule"], r["message"]) for r in schema.get("x-kubernetes-validations", [])
    ]
    for key, sub in schema.get("properties", {}).items():
        found += iter_rules(sub, f"{path}.{key}" if path else key)
    if "items" in schema:
        found += iter_rules(schema["items"], f"{path}[]")
    return found


_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def _program(rule: str) -> Any:
    if rule not in _PROGRAMS:
        _PROGRAMS[rule] = _ENV.program(_ENV.compile(rule))
    return _PROGRAMS[rule]


def cel_errors(schema: dict, value: Any, path: str = "") -> list[str]:
    """``path: message`` for every CEL rule that does not evaluate to true."""
    errors: list[str] = []
    for rule in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"]:
            continue  # transition rules only run on updates
        try:
            result = _program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        except Exception as exc:  # an evaluation error rejects the object, as on the server
            result = exc
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            errors.append(f"{path}: {rule['message']}" if path else rule["message"])
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                errors += cel_errors(sub, value[key], f"{path}.{key}" if path else key)
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += cel_errors(schema["items"], item, f"{path}[{index}]")
    return errors


@dataclass(frozen=True)
class Admission:
    defaulted: dict
    schema: list[str]
    cel: list[str]

    @property
    def accepted(self) -> bool:
        return not self.schema and not self.cel


def admit(resource: dict, crd: dict | None = None) -> Admission:
    """Default, then validate ``resource`` like the API server would on create."""
    schema = root_schema(crd)
    defaulted = apply_defaults(schema, copy.deepcopy(resource))
    return Admission(defaulted, schema_errors(schema, defaulted), cel_errors(schema, defaulted))


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def expectations(path: Path) -> list[tuple[str, str]]:
    """``(layer, text)`` pairs from ``# expect: <schema|cel|model>: <text>`` header lines."""
    found = []
    for line in path.read_text().splitlines():
        if line.startswith("# expect:"):
            layer, _, text = line.removeprefix("# expect:").strip().partition(":")
            found.append((layer.strip(), text.strip()))
    return found
