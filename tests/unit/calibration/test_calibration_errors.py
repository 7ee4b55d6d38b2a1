"""Tests for commsim.calibration.errors: the calibration's input error is an InputError."""

import pytest

from commsim.calibration import CalibrationError
from commsim.calibration.nccl_log import NcclLogError
from commsim.errors import InputError, ScenarioError


@pytest.mark.parametrize("cls", [CalibrationError, NcclLogError])
def test_source_key_and_message_read_as_every_input_error(cls):
    err = cls("expected a finite number, got 'x'", "cal.yaml", "levels.flat.alpha_s")
    assert str(err) == "cal.yaml: levels.flat.alpha_s: expected a finite number, got 'x'"
    assert (err.source, err.path, err.message) == ("cal.yaml", "levels.flat.alpha_s", "expected a finite number, got 'x'")
    assert str(err) == str(InputError("cal.yaml", "levels.flat.alpha_s", "expected a finite number, got 'x'"))
    assert isinstance(err, InputError) and isinstance(err, ScenarioError) and isinstance(err, ValueError)


@pytest.mark.parametrize("cls", [CalibrationError, NcclLogError])
def test_one_argument_form_is_the_message_alone(cls):
    err = cls("an alpha-beta fit needs sizes and times > 0")
    assert str(err) == err.message == "an alpha-beta fit needs sizes and times > 0"
    assert err.source == "" and err.path is None
    assert str(cls("needs more sizes", key="levels.flat")) == "levels.flat: needs more sizes"


def test_messages_stay_on_one_line():
    err = CalibrationError("first\nsecond", "file\nname.yaml", "a\nb")
    assert "\n" not in str(err) and str(err) == "file name.yaml: a b: first second"
