"""Shared test helpers: device, tolerances, input factories, poisoning, assertions."""

from op_tests.utils.checks import assert_close, tolerance
from op_tests.utils.device import DEVICE, ON_GPU, by_device
from op_tests.utils.inputs import DTYPES, ODD_SIZES, make_rows, poisoned

__all__ = [
    "DEVICE",
    "DTYPES",
    "ODD_SIZES",
    "ON_GPU",
    "assert_close",
    "by_device",
    "make_rows",
    "poisoned",
    "tolerance",
]
