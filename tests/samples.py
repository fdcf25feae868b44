"""The captures from a real Kafka 0.7.2 broker and its Java clients (shared/spec/observed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SAMPLES_PATH = (
    Path(__file__).resolve().parents[2] / "shared" / "spec" / "observed" / "wire-samples.json"
)


def load_cases() -> list[dict[str, Any]]:
    """Every captured case, in capture order."""
    if not SAMPLES_PATH.exists():  # the captures live beside the repository, in shared/
        raise FileNotFoundError(f"wire samples not found at {SAMPLES_PATH}")
    cases: list[dict[str, Any]] = json.loads(SAMPLES_PATH.read_text())
    return cases


CASES = load_cases()
SAMPLES = {case["key"]: case for case in CASES}
