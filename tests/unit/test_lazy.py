"""commsim.lazy: a package's public names imported from their modules on first use."""

import pytest

from commsim.lazy import lazy_names


def test_a_name_is_imported_from_its_module_on_first_use_and_kept():
    namespace = {}
    getattr_, dir_ = lazy_names("commsim.calibration", {"CalibrationError": "errors",
                                                        "Fabric": "commsim.network.fabric"}, namespace)
    from commsim.calibration.errors import CalibrationError
    from commsim.network.fabric import Fabric

    assert "CalibrationError" not in namespace
    assert getattr_("CalibrationError") is CalibrationError  # a submodule's own name
    assert getattr_("Fabric") is Fabric  # an absolute module name
    assert namespace == {"CalibrationError": CalibrationError, "Fabric": Fabric}
    assert dir_() == ["CalibrationError", "Fabric"]


def test_an_unknown_name_is_an_attribute_error_naming_the_package():
    getattr_, _ = lazy_names("commsim.traces", {}, {})
    with pytest.raises(AttributeError, match="module 'commsim.traces' has no attribute 'nope'"):
        getattr_("nope")
