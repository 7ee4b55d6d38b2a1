"""Calibration: measured link and compute constants, their fit, file format and log parser.

`model` holds the records and the pricing (what a calibrated hop costs), `file` the YAML
format, `nccl_log` the nccl-tests log parser. This module is the package's public surface.
"""

from commsim.calibration.model import (  # noqa: F401 - re-exported
    Calibration,
    CalibrationError,
    ComputeTiming,
    FIT_ERROR_MIN_SIZE,
    FORMAT,
    FitError,
    LEVELS,
    LinkCalibration,
    MAX_RANGES,
    MIN_SIZES_PER_RANGE,
    MIN_TRANSFER_SHARE,
    Measurement,
    Provenance,
    RESIDUAL_FLOOR,
    RankCompute,
    SizeRange,
    SourceFile,
    allreduce_factor,
    default_level,
    fit_alpha_beta,
    fit_error,
    fit_link,
    fit_ranges,
    fitted_level_constants,
    hop_level_names,
    hop_time,
    interpolate_busbw,
    make_link,
    measured_level_constants,
    model_time,
    predict_allreduce_time,
    predict_with_source,
)
from commsim.calibration.file import load_calibration, save_calibration, utc_now_iso  # noqa: F401
