import pytest

from op_tests.utils.inputs import poison_allocations


@pytest.fixture(autouse=True)
def _poison_allocations(monkeypatch):
    """Every float tensor allocated during a fusion test (the ops' outputs included) starts as NaN."""
    poison_allocations(monkeypatch)
