"""Shared fixtures of the verl adapter tests."""

import pytest


@pytest.fixture(scope="module")
def local_tq():
    """A local Ray instance with a real TransferQueue (controller + one storage unit), per test module."""
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf

    # 2-vCPU CI: TQ's controller + storage actors need more logical CPUs than Ray detects, and one
    # storage unit is enough (a bare tq.init() hangs on small machines, see the verl notes §10)
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=256 * 1024**2, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield
    tq.close()
    ray.shutdown()
