"""A scenario file's ``mitigation:`` section, read from the same file and overrides as the scenario.

The scenario schema accepts the section and leaves it out of the
:class:`commsim.scenario.spec.Scenario` (it sits below this package); this module reads it from
the document after the same ``--set`` / grid overrides the loader applied, and hands it to
:func:`commsim.mitigations.spec.parse_section`. ``commsim compare`` compares its remedies,
``commsim sweep`` adds their rows to each point (``--grid 'mitigation[0].r=1,4'``: the section is a
list, so a remedy's parameter is swept by its index), and ``commsim run``, which simulates the
scenario as it is, refuses a file that has one (:func:`refuse_section`).

``commsim run`` hands :func:`refuse_section` the document its loader already read
(:func:`commsim.scenario.loader.load_scenario_document`), and imports this module only for
that: the remedies' parser and models (:mod:`commsim.mitigations.spec`, ``.compare``) are
imported where a section is parsed or a refusal raised, not with the module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, Mapping, Optional, Tuple

from commsim.scenario.loader import apply_overrides, load_document
from commsim.scenario.schema import MITIGATION_KEY

if TYPE_CHECKING:
    from commsim.mitigations.spec import Mitigation

RUN_REFUSAL = ("this command simulates the scenario as it is, without remedies; compare them with "
               "`commsim compare SCENARIO` or sweep them with `commsim sweep SCENARIO --grid "
               "'mitigation[0].KEY=V1,V2'` (or remove the section)")


_ABSENT = object()


def _raw(path, overrides: Iterable[str], document: Optional[Mapping[Any, Any]] = None) -> Any:
    """The section's value after `overrides`, or _ABSENT: from `document` (the file after the
    overrides, as the loader read it) when given, else read and parsed here. Raises the loader's
    ScenarioError for a file or an override it cannot read."""
    doc = apply_overrides(load_document(path), list(overrides)) if document is None else document
    return doc.get(MITIGATION_KEY, _ABSENT) if isinstance(doc, Mapping) else _ABSENT


def mitigation_section(path, overrides: Iterable[str] = ()) -> Optional[Tuple[Mitigation, ...]]:
    """The parsed section (:func:`commsim.mitigations.spec.parse_section`), or None without one."""
    section = _raw(path, overrides)
    if section is _ABSENT:
        return None
    from commsim.mitigations.spec import parse_section

    return parse_section(section, str(path))


def refuse_section(path, overrides: Iterable[str] = (), document: Optional[Mapping[Any, Any]] = None) -> None:
    """Raise a one-line MitigationError if the scenario (after `overrides`) has a section.
    `document`: the mapping the loader validated (``load_scenario_document``), which spares a
    second read and parse of the file; without it the file and `overrides` are read here."""
    if _raw(path, overrides, document) is not _ABSENT:
        from commsim.mitigations.spec import MitigationError

        raise MitigationError(str(path), MITIGATION_KEY, RUN_REFUSAL)


def section_rows(scenario, mitigations: Tuple[Mitigation, ...]) -> Dict[str, Dict[str, Any]]:
    """Each remedy's ``commsim compare`` row, keyed by its position in the section ("0", "1", ...),
    so that a sweep's columns (``mitigation.0.step_time_s.mean``) stay the same across points
    whose labels (``powersgd:r=1``, ``powersgd:r=4``) differ."""
    # the remedies' models are imported here, not with the module: `commsim run` imports this
    # module only to refuse a section (refuse_section) and never simulates a remedy
    from commsim.mitigations.compare import compare

    rows = compare([scenario], mitigations)[1:]
    return {str(i): row for i, row in enumerate(rows)}
