"""Calibration: measured link and compute constants, their fit, file format and log parser.

`records` holds what a calibration is, `fit` the alpha-beta fit, `prediction` what the
calibration predicts, `model` the pricing of a calibrated ring hop, `file` the YAML format,
`nccl_log` the nccl-tests log parser and `from_logs` a calibration fitted from such logs.
This module is the package's public surface.
"""

from commsim.calibration.errors import CalibrationError  # noqa: F401 - re-exported
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
