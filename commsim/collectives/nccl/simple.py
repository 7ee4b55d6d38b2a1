"""The Simple protocol's steps, slices, rendezvous and loops (src/enqueue.cc, prims_simple.h,
src/transport/net.cc): a Tree/Simple channel's chunks (:func:`tree_simple_chunks`), the two
slices of a Simple ring step (:func:`simple_ring_slices`) and a ring's loops
(:func:`simple_ring_loops`, :func:`ring_loop_bubble_us`).

Where the network plugin sends long messages by rendezvous (:attr:`System.net_rdzv_threshold_bytes`,
libfabric CXI), a Simple ring step across nodes lasts at least its slices' rendezvous costs, which
the other slice's transfer overlaps (:func:`net_rendezvous_step_us`), and a Simple tree pays one per
chunk; NCCL's estimate knows nothing of it.
"""

from __future__ import annotations

import math

import numpy as np

from commsim.collectives.nccl.scale import MAX_THREADS, SIMPLE, Scale, log2i
from commsim.network.system import System


# Simple's step: the default buffer (NCCL_BUFFSIZE 4 MiB, src/init.cc DEFAULT_BUFFSIZE) over
# NCCL_STEPS = 8 slots (src/include/device.h): a tree's chunk before enqueue.cc shrinks it.
SIMPLE_STEP_BYTES = (4 << 20) // 8


def tree_depth(scale: Scale) -> int:
    """NCCL's tree depth (src/graph/connect.cc connectTrees, 2.18-2.29: ``nRanks/nNodes - 1 +
    log2i(nNodes)``, "not an exact value but a good approximation"): the intra-node chain plus
    the network levels of the double binary tree."""
    return scale.local - 1 + log2i(scale.domains)


def tree_simple_chunks(sizes, channels_launched, depth: int) -> np.ndarray:
    """Chunks each channel's Tree/Simple all-reduce moves (src/enqueue.cc, 2.18-2.29, "Optimize
    chunkSize / nSteps"): the 512 KiB step halves while a channel has fewer than depth*8 chunks
    (down to 128 KiB), depth*4 (down to 64 KiB) and depth (down to 32 KiB). A deeper tree gets
    smaller chunks, so more of them for the same bytes. :func:`physical_time_us` prices them only
    where the network plugin has a rendezvous threshold (one rendezvous per chunk): a per-chunk
    proxy cost on it for every system trades rows across systems (see the calibration notes)."""
    S = np.asarray(sizes, dtype=float)
    nc = np.broadcast_to(np.asarray(channels_launched, dtype=float), S.shape)
    out = np.empty(S.shape)
    for i, (b, c) in enumerate(zip(S.ravel(), nc.ravel())):
        chunk = SIMPLE_STEP_BYTES
        for need, floor in ((8, 131072), (4, 65536), (1, 32768)):
            while b // (c * chunk) < depth * need and chunk > floor:
                chunk //= 2
        out.ravel()[i] = max(1.0, math.ceil(b / (c * chunk)))
    return out


# A Simple ring step's chunk per channel (src/collectives/device/all_gather.h, all_reduce.h,
# reduce_scatter.h runRing, v2.18.3-1; the same sizes from the host-side split in 2.21): at most
# stepSize x CHUNKSTEPS (ALLGATHER/ALLREDUCE/REDUCESCATTER_CHUNKSTEPS = NCCL_STEPS/2 = 4 steps,
# 2 MiB), else the channel's share of a rank's bytes rounded up to (nthreads - WARP_SIZE) x 8 bytes
# (enqueue.cc getAlgoInfo: 512 Simple threads plus the ring's sync warp -> 4096 B). The primitives
# (prims_simple.h) cut the chunk into SlicePerChunk = CHUNKSTEPS/SLICESTEPS = 2 slices of
# max(chunk/2, stepSize x StepPerSlice / 32 = 32 KiB), and the network proxy posts one message
# per slice (src/transport/net.cc sendProxyProgress, one isend per sliceSteps).
SIMPLE_RING_CHUNK_BYTES = 4 * SIMPLE_STEP_BYTES
SIMPLE_RING_GRAIN_BYTES = MAX_THREADS[SIMPLE] * 8  # (512 + the sync warp - WARP_SIZE) threads x 8 B
SIMPLE_RING_MIN_SLICE_BYTES = 2 * SIMPLE_STEP_BYTES // 32


def simple_ring_slices(sizes, ranks: int, channels_launched) -> np.ndarray:
    """Bytes of the two slices (messages) a Simple ring channel posts per step, per size: shape
    ``sizes.shape + (2,)``, a slice NCCL leaves empty being 0 (its proxy still posts a 0-byte
    message, which any plugin sends eagerly). The channel is the first one, the fullest."""
    S = np.asarray(sizes, dtype=float)
    nc = np.broadcast_to(np.asarray(channels_launched, dtype=float), S.shape)
    share = np.ceil(S / ranks / nc)
    chunk = np.minimum(SIMPLE_RING_CHUNK_BYTES, np.ceil(share / SIMPLE_RING_GRAIN_BYTES) * SIMPLE_RING_GRAIN_BYTES)
    chunk = np.minimum(chunk, np.ceil(S / ranks))  # the last (only) channel's chunk holds what is left
    # divUp(nelem, 16 x SlicePerChunk) x 16 in elements: nccl-tests' float (4 bytes)
    first = np.minimum(chunk, np.maximum(np.ceil(chunk / 128.0) * 64.0, SIMPLE_RING_MIN_SLICE_BYTES))
    return np.stack([first, chunk - first], axis=-1)


def rendezvous_work_us(system: System, slices) -> np.ndarray:
    """The proxy's rendezvous work (us) on each of a Simple ring step's slices (`slices`, bytes, as
    :func:`simple_ring_slices` gives them): the plugin's per-message rendezvous cost
    (:attr:`System.net_rdzv_us`) for a slice longer than the largest message it sends eagerly
    (:attr:`System.net_rdzv_threshold_bytes`), else 0; 0 everywhere where the system has no
    threshold. The work alone, without the transfer it overlaps: :func:`net_rendezvous_step_us`
    prices the step. Polaris (libfabric CXI, software receive matching) measures ~25-27 us per
    step with one such message (32 KiB chunks) and ~44-52 us with two (64 KiB and up) at 8x4 and
    128x4, all_gather and all_reduce alike; 38 and 62 at 2x4."""
    b = np.asarray(slices, dtype=float)
    thr = system.net_rdzv_threshold_bytes
    if thr is None:
        return np.zeros(b.shape)
    return np.where(b > thr, system.net_rdzv_us, 0.0)


def net_rendezvous_step_us(system: System, sizes, ranks: int, channels_launched, floor_us, transfer_us) -> np.ndarray:
    """A Simple ring step's duration (us) across nodes where the plugin sends long messages by
    rendezvous, less its transfer `transfer_us` (the step's chunk at the channel's rate), per size:
    what the step adds to the ring's bandwidth term. `floor_us` is the step's latency otherwise
    (the hop or the proxy's per-step floor).

    Each of the step's two slices (:func:`simple_ring_slices`) is one message. The rank's one proxy
    thread handles a channel's messages one after the other, each for at least the per-step floor
    (on such a plugin the per-message CPU work, :attr:`System.net_step_per_channel`) and, for a
    rendezvous message, for :attr:`System.net_rdzv_us` (libfabric CXI with software receive
    matching: the receiver's progress call matches the header and issues the GET):
    w_k = max(floor, c_k). The GET's payload then moves in the NIC while the proxy handles the
    next posted message: a Simple connection keeps NCCL_STEPS = 8 slots (4 two-step slices) in
    flight (src/include/device.h; src/transport/net.cc sendProxyProgress/recvProxyProgress post
    every slot that is ready), so the data of one slice overlaps the proxy work of the next. In
    steady state a step lasts the longest of its resources and of each slice's own chain (exact
    against a per-message event simulation of the ring, tests/unit/collectives):

        max(w_k + t_k for each slice k,  w_1 + w_2 (proxy),  t_1 + t_2 (link))

    With one message a step (chunks up to 32 KiB) that is max(floor, c_1) + t_1, the unpipelined
    price; with two (64 KiB and up) the proxy work hides behind the transfer once t_1 + t_2
    exceeds w_1 + w_2. Polaris 8x4 measures ~49-55 us per ring step at 64-256 KiB chunks
    (t = 7-29 us), ~66 at 512 KiB and ~118 at 1 MiB (t = 58, 115): the transfer plus 3-8 us, where
    a rendezvous floor in series with the transfer charged ~46 us more. Returns ``floor_us``
    where the system has no rendezvous threshold."""
    S = np.asarray(sizes, dtype=float)
    floor = np.broadcast_to(np.asarray(floor_us, dtype=float), S.shape)
    thr = system.net_rdzv_threshold_bytes
    if thr is None:
        return np.array(floor, dtype=float)
    T = np.broadcast_to(np.asarray(transfer_us, dtype=float), S.shape)
    b = simple_ring_slices(S, ranks, channels_launched)
    total = np.maximum(np.sum(b, axis=-1), 1.0)
    t = T[..., None] * b / total[..., None]              # each slice's share of the step's transfer
    c = rendezvous_work_us(system, b)                    # its rendezvous work
    w = np.where(b > 0, np.maximum(floor[..., None], c), 0.0)  # the proxy's time on it (0: no message)
    chain = np.max(np.where(b > 0, w + t, 0.0), axis=-1)
    step = np.maximum(np.maximum(chain, np.sum(w, axis=-1)), T)
    return step - T


def simple_ring_loops(sizes, ranks: int, channels_launched) -> np.ndarray:
    """Loop iterations of a Simple ring kernel, per size: each channel's block walks its share of
    the buffer ``nranks * chunkSize`` elements at a time (src/device/all_reduce.h runRing,
    ``for (elemOffset = 0; elemOffset < channelCount; elemOffset += loopCount)``, ``loopCount =
    nranks * chunkCount``, the same in v2.17.1-1's collectives/device/all_reduce.h with ``loopSize
    = nChannels*nranks*chunkSize``; all_gather.h and reduce_scatter.h alike), chunkSize =
    ALLREDUCE_CHUNKSTEPS x stepSize (2 MiB at the default 4 MiB buffer, enqueue.cc
    calcCollChunking). `sizes` are the collective's full buffer (all_gather's output)."""
    S = np.asarray(sizes, dtype=float)
    nc = np.broadcast_to(np.asarray(channels_launched, dtype=float), S.shape)
    return np.maximum(1.0, np.ceil(S / (nc * ranks * SIMPLE_RING_CHUNK_BYTES)))


def ring_loop_bubble_us(system: System, sizes, ranks: int, channels_launched) -> np.ndarray:
    """Time (us) a Simple ring across nodes leaves its NICs idle at its loop boundaries, per size.

    A channel's block runs its loop's steps one after the other (send, recvReduceSend ...,
    recv: src/device/all_reduce.h runRing) and starts the next loop's send only when its last
    recv is done (:func:`simple_ring_loops`). Across the network a slice is stored and
    forwarded: the proxy hands a received slice to the GPU only once it has arrived whole, and
    posts a send only once the block has written the whole slice into the send FIFO
    (prims_simple.h ``postPeer`` once per slice). Within a loop those copies overlap other
    slices' transfers; at each loop boundary they do not: the NIC waits while the block copies
    the loop's last received slice out and writes the next loop's first slice in, two slices at
    one channel's Simple copy rate (:attr:`System.simple_ch_GBps`), the wire's one-way latency
    overlapping the peer's last slice. Channels run the same partition in step, so their gaps
    coincide.

    A loop holds 2(n-1) sends of all_reduce and n-1 of all_gather/reduce_scatter, so the idle
    share falls as 1/n: at 2 ranks (one GPU per node on 2 nodes) it is about a quarter of
    all_reduce's transfer and half of all_gather's. That is the Azure NDmv4 2x1 pair (NCCL
    2.17.1: 18.65 and 15.84 GB/s per NIC where 2x8 drives each NIC at ~23 GB/s and MSCCL++
    drives the same 2x1 at 23.3); at 2x8 it is 1-3%. On NVLink the sender's copy is the
    transfer (direct writes into the peer's buffer), so rings inside a node have no such gap."""
    loops = simple_ring_loops(sizes, ranks, channels_launched)
    first_slice = simple_ring_slices(sizes, ranks, channels_launched)[..., 0]
    return (loops - 1.0) * 2.0 * first_slice / (1000.0 * system.simple_ch_GBps)
