"""Small scenarios built from the spec records (no files)."""

from commsim.scenario.spec import DDP, Cluster, Compute, Link, Model, Scenario

from tests.conftest import NO_DDP_COSTS


def tiny(nodes=2, gpus=2, params=2_000_000, fwd=0.01, bwd=0.02, opt=0.001, steps=10, stragglers=(), seed=0,
         inter_bw=1e9, inter_lat=1e-5, bucket_cap=2e6, first_bucket=1e6, overlap=True, accumulation=1, dtype="fp32",
         costs=NO_DDP_COSTS):
    return Scenario(
        cluster=Cluster(nodes=nodes, gpus_per_node=gpus, intra_node=Link(1e10, 2e-6), inter_node=Link(inter_bw, inter_lat)),
        model=Model(parameters=params, grad_dtype=dtype),
        compute=Compute(forward=fwd, backward=bwd, optimizer=opt, batch_size=4),
        steps=steps, seed=seed, stragglers=tuple(stragglers),
        ddp=DDP(bucket_cap=bucket_cap, first_bucket=first_bucket, overlap=overlap, gradient_accumulation=accumulation,
                costs=costs))
