"""Common ground of every scenario section: the strict base model (unknown keys are errors)
and the filler that lets a tagged section leave its ``kind`` out.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict


def default_kind(kind: str) -> BeforeValidator:
    """Fill in ``kind`` when a mapping leaves it out, so a section's defaults work without it."""

    def fill(value: Any) -> Any:
        if isinstance(value, dict) and "kind" not in value:
            return {"kind": kind, **value}
        return value

    return BeforeValidator(fill)


class StrictModel(BaseModel):
    """Base for every scenario section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
