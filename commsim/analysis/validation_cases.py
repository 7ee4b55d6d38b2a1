"""Predicted against measured step time from ``commsim validate --json`` files: the data of
the ``predicted_vs_measured`` plot.

Cases are ordered by name with their numbers compared as quantities
(:func:`commsim.analysis.sweep_table.natural_key`: bucket_1MB, bucket_25MB, bucket_100MB),
not as text, which puts 100MB before 1MB.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence

import numpy as np

from commsim.analysis.sweep_table import ResultsError, natural_key, read_json_document


def _dig(doc: Mapping[str, Any], dotted: str) -> Optional[float]:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def is_validation(doc: Any) -> bool:
    """Does this JSON look like `commsim validate --json` output?"""
    return isinstance(doc, Mapping) and _dig(doc, "measured.step_time_s.mean") is not None \
        and _dig(doc, "predicted.step_time_s.mean") is not None


@dataclass(frozen=True)
class ValidationCase:
    """One validated scenario: measured and predicted step time (seconds)."""

    name: str
    measured_mean: float
    predicted_mean: float
    measured_p95: Optional[float]
    predicted_p95: Optional[float]

    @property
    def error_pct(self) -> float:
        """Signed error of the predicted mean, (predicted - measured) / measured in %."""
        return (self.predicted_mean - self.measured_mean) / self.measured_mean * 100

    def values(self) -> List[float]:
        return [v for v in (self.measured_mean, self.predicted_mean, self.measured_p95, self.predicted_p95)
                if v is not None]


def load_cases(files: Sequence[Path]) -> List[ValidationCase]:
    """One case per file, named by its ``scenario`` (or file stem; a repeated name gets the
    stem appended), ordered by :func:`natural_key` of the name."""
    cases: List[ValidationCase] = []
    for f in files:
        doc = read_json_document(f, "commsim validate JSON")
        if not is_validation(doc):
            raise ResultsError(str(f), "expected commsim validate JSON with measured.step_time_s.mean and "
                                       "predicted.step_time_s.mean")
        name = str(doc.get("scenario") or Path(f).stem)
        if any(c.name == name for c in cases):
            name = f"{name} ({Path(f).stem})"
        measured = _dig(doc, "measured.step_time_s.mean")
        if not measured or measured <= 0:
            raise ResultsError(str(f), f"expected a positive measured step time, got {measured}",
                               "measured.step_time_s.mean")
        cases.append(ValidationCase(name, measured, _dig(doc, "predicted.step_time_s.mean"),
                                    _dig(doc, "measured.step_time_s.p95"), _dig(doc, "predicted.step_time_s.p95")))
    return sorted(cases, key=lambda c: natural_key(c.name))


def median_abs_error(cases: Sequence[ValidationCase]) -> float:
    """Median |error| of the predicted mean step time over the cases (%)."""
    return float(np.median([abs(c.error_pct) for c in cases]))
