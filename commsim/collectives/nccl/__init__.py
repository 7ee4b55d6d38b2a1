"""NCCL's collectives as NCCL runs them, in modules of one responsibility each; the plan and the
kernel that use them are :mod:`commsim.collectives.nccl_tuner`. Each module imports only those
listed above it:

- :mod:`.scale`: the release tables NCCL's tuner reads, the protocols' constants, a job's
  :class:`~commsim.collectives.nccl.scale.Scale`;
- :mod:`.runnable`: which (algorithm, protocol) pairs NCCL can run, NCCL_ALGO / NCCL_PROTO
  selections;
- :mod:`.graph`: NCCL's topology search: link speeds, speed arrays, the ring graph, channels;
- :mod:`.simple`: the Simple protocol's steps, slices, rendezvous and loops;
- :mod:`.nvls`: NVLS: its graph, heads, channels, chunks, tree and pipelines;
- :mod:`.estimate`: NCCL's own a-priori estimate (a port of tuning.cc), which picks what runs;
- :mod:`.physical`: the physical time of a given (algorithm, protocol).
"""
