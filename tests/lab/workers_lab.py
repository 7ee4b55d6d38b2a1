"""Rank functions for the lab's failure tests (run by validate.multinode_rank inside the nodes)."""


def allreduce_loop(ctx, iterations, size_bytes):
    """All-reduce a buffer `iterations` times, recording each iteration before it starts."""
    import torch
    import torch.distributed as dist

    t = torch.ones(max(1, size_bytes // 4))
    for i in range(iterations):
        ctx.progress({"iteration": i})
        dist.all_reduce(t)
    return {"rank": ctx.rank, "sum": float(t[0])}
