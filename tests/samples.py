"""The captures from a real Kafka 0.7.2 broker and its Java clients (tests/data, see its README)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SAMPLES_PATH = Path(__file__).resolve().parent / "data" / "wire-samples.json"


def load_cases() -> list[dict[str, Any]]:
    """Every captured case, in capture order."""
    cases: list[dict[str, Any]] = json.loads(SAMPLES_PATH.read_text())
    return cases


CASES = load_cases()
SAMPLES = {case["key"]: case for case in CASES}
