"""Fixtures the gloo tests share."""

import pytest


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """A one-rank gloo process group for the requesting module (a FileStore rendezvous), destroyed
    after it. torch is imported here, not at the top: without torch the modules skip themselves."""
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(scope="session")
def numerics_run(tmp_path_factory):
    """validate.numerics' four checks, launched once on 2 gloo ranks: every rank's records. Both
    the checks' own tests and `validate --numerics`' report read this one run (a launch is ~10 s
    here, nearly all of it the ranks' start-up)."""
    from validate.launch import launch
    from validate.numerics import rank_numerics

    return launch(rank_numerics, 2, "gloo", timeout_s=120, result_dir=str(tmp_path_factory.mktemp("num")))
