"""openapi.yaml as data, and validators of its schemas, for tests that check what is served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from openapi_schema_validator import OAS31Validator

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMAS = "#/components/schemas/"


def load_spec() -> dict[str, Any]:
    spec = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    assert isinstance(spec, dict)
    return spec


def validator(spec: dict[str, Any], name: str) -> OAS31Validator:
    """A validator of ``components.schemas[name]`` that resolves the document's references."""
    return OAS31Validator({"$ref": SCHEMAS + name, "components": spec["components"]})
