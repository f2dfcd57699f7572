"""The measurement worker turns failures into trial results instead of exceptions (CPU-checkable part)."""

import pytest
import torch

from cutlass_nm.families import KernelTypes, get_family
from cutlass_nm.tune.worker import MeasureWorker


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU failure path")
def test_worker_reports_failure_as_a_result():
    sm90 = get_family("sptc24_sm90")
    worker = MeasureWorker(timeout_s=120)
    try:
        res = worker.measure("sptc24_sm90", sm90.Config(), KernelTypes("f16", "f16", False), (64, 256, 256), reps=3)
        assert res["status"] == "runtime_error" and res["error"]
        again = worker.measure("sptc24_sm90", sm90.Config(), KernelTypes("f16", "f16", False), (64, 256, 256))
        assert again["status"] == "runtime_error"
    finally:
        worker.close()


def test_worker_timeout_kills_and_reports():
    worker = MeasureWorker(timeout_s=0.001)
    try:
        res = worker.measure("sptc24_sm90", get_family("sptc24_sm90").Config(), KernelTypes("f16", "f16", False),
                             (64, 256, 256))
        assert res["status"] == "timeout"
    finally:
        worker.close()
