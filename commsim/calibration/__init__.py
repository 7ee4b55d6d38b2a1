"""Calibration: measured link and compute constants, their fit, file format and log parser.

`records` holds what a calibration is, `fit` the alpha-beta fit, `prediction` what the
calibration predicts, `model` the pricing of a calibrated ring hop, `file` the YAML format,
`nccl_log` the nccl-tests log parser and `from_logs` a calibration fitted from such logs.
This module is the package's public surface.

The names below are loaded on first use (PEP 562 ``__getattr__``): a plain ``commsim run``
needs the records and the hop model (``commsim.sim.links``), not the file reader with its
physical-fit and NCCL-table modules, and importing the package must not cost it those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict

from commsim.lazy import lazy_names

# public name -> the submodule that defines it
_EXPORTS: Dict[str, str] = {
    "CalibrationError": "errors",
    **dict.fromkeys(("FORMAT", "load_calibration", "save_calibration", "utc_now_iso"), "file"),
    **dict.fromkeys(("FIT_ERROR_MIN_SIZE", "MAX_RANGES", "MIN_BANDWIDTH_SHARE", "MIN_SIZES_PER_RANGE",
                     "MIN_TRANSFER_SHARE", "RESIDUAL_FLOOR", "fit_alpha_beta", "fit_error", "fit_link",
                     "fit_ranges", "make_link"), "fit"),
    **dict.fromkeys(("fitted_level_constants", "hop_level_names", "hop_time", "measured_level_constants"),
                    "model"),
    **dict.fromkeys(("calibrated_world_sizes", "extrapolation_note", "interpolate_busbw", "predict_allreduce_time",
                     "predict_with_source"), "prediction"),
    **dict.fromkeys(("LEVELS", "Calibration", "ComputeTiming", "FitError", "LinkCalibration", "Measurement",
                     "Provenance", "RankCompute", "SizeRange", "SourceFile", "allreduce_factor", "default_level",
                     "model_time"), "records"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # the same names, for type checkers and readers
    from commsim.calibration.errors import CalibrationError  # noqa: F401
    from commsim.calibration.file import FORMAT, load_calibration, save_calibration, utc_now_iso  # noqa: F401
    from commsim.calibration.fit import (  # noqa: F401
        FIT_ERROR_MIN_SIZE,
        MAX_RANGES,
        MIN_BANDWIDTH_SHARE,
        MIN_SIZES_PER_RANGE,
        MIN_TRANSFER_SHARE,
        RESIDUAL_FLOOR,
        fit_alpha_beta,
        fit_error,
        fit_link,
        fit_ranges,
        make_link,
    )
    from commsim.calibration.model import (  # noqa: F401
        fitted_level_constants,
        hop_level_names,
        hop_time,
        measured_level_constants,
    )
    from commsim.calibration.prediction import (  # noqa: F401
        calibrated_world_sizes,
        extrapolation_note,
        interpolate_busbw,
        predict_allreduce_time,
        predict_with_source,
    )
    from commsim.calibration.records import (  # noqa: F401
        LEVELS,
        Calibration,
        ComputeTiming,
        FitError,
        LinkCalibration,
        Measurement,
        Provenance,
        RankCompute,
        SizeRange,
        SourceFile,
        allreduce_factor,
        default_level,
        model_time,
    )
