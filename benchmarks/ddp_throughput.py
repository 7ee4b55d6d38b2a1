"""DDP step-time check against published data-parallel training throughput tables.

    python benchmarks/ddp_throughput.py [--json OUT.json] [--txl-overlap off] [--breakdown]

Data: tests/data/training-throughput (NVIDIA DeepLearningExamples READMEs, each file's first
line cites its source): PyTorch Transformer-XL base/large on one DGX A100 (40 GB) and one
DGX-1 (V100 16 GB) at 1/2/4/8 GPUs (weak scaling, fixed batch per GPU), PyTorch BERT-large
pre-training on DGX A100 (80 GB) at 1 and 8 GPUs and at 1-32 nodes (strong scaling: the
accumulated batch per GPU halves as the node count doubles).

Protocol, the same for every row (nothing is tuned per table or per row):

- Per-GPU compute per micro-batch from the table's base row (1 GPU, or 1 node for the
  multi-node table): the compute time for which the simulator reproduces the base row's
  measured step time (for 1 GPU, simply its step time: there is nothing to all-reduce).
  Backward is twice the forward (the usual 2:1 FLOP ratio). The optimizer (LAMB in both
  sources) runs once per optimizer step, after the all-reduce: its time is estimated from the
  bytes its kernels move per parameter at the GPU's memory bandwidth (:func:`optimizer_time`;
  its share is not published) and taken out of the base row before the compute is fitted, so a
  row with fewer accumulation steps is not charged a fraction of it.
- Gradient bytes: the model's parameter count (:data:`MODELS`, cited) times 2 bytes with
  mixed precision (Apex AMP O2 / the fp16 post-accumulation all-reduce reduce fp16
  gradients), 4 bytes in TF32/FP32.
- Gradient accumulation as the table says (micro-batches per optimizer step; a table entry
  contradicting its own accumulated batch is corrected from it and noted).
- How gradients are reduced: Transformer-XL uses torch DDP (25 MiB buckets, 1 MiB first,
  overlapped with backward), its buckets built from the model's layout
  (:func:`txl_gradients`, :func:`ddp_bucket_layout`: ``ddp.bucket_sizes``/``ddp.bucket_ready``):
  the embedding tied to the softmax (71% of the base model's gradient bytes) is ready only at
  the end of backward. The column "1MiB step" is the predicted step time with 1 MiB buckets
  over the 25 MiB one (the source measured 25 MiB only); the BERT scripts all-reduce one flat fp16 buffer after the last
  micro-batch (``allreduce_post_accumulation``: no overlap, one bucket).
- Hardware: one description per system (:data:`HARDWARE`), from datasheets: the nominal
  :mod:`commsim.network.system` presets (``dgx-a100``, ``dgx1-v100``) plus the GPU memory
  bandwidth. DGX-1's hybrid cube-mesh gives a job on GPUs 0..n-1 only the NVLinks its rings
  can drive among them (the preset's description, ``job_intra_bw_GBps``: 1/4/6 links for
  2/4/8 GPUs); NVSwitch gives every GPU its full NVLink rate at any n. The
  BERT tables do not state the inter-node network: the DGX A100 datasheet's 8x HDR 200 Gb/s
  per node is assumed.
- ``--txl-overlap off`` (a diagnostic, not the protocol): Transformer-XL's all-reduces after
  the whole backward.
- Two model variants: with DDP's own costs (``ddp.bucket_overhead``, copies at
  ``ddp.memory_bandwidth``, ``ddp.overlap_slowdown``, their documented defaults) and
  without them (``ddp: {bucket_overhead: 0, overlap_slowdown: 0, gradient_as_bucket_view: true}``).

- ``--breakdown`` (a diagnostic): per row, ms per optimizer step of the model's compute; on top
  of it what the model adds (exposed communication, DDP's costs) and what the measurement leaves;
  every all-reduce run after the backward (no overlap) at the model's rate and, where a one-node
  nccl-tests log of the same box exists (:data:`NCCL_LOGS`), at that log's measured busbw for the
  same bucket sizes; and what the measurement leaves beyond the larger of the two. A positive
  "beyond" is time that no overlap or bandwidth assumption about the all-reduce can produce.

Error = predicted / measured throughput - 1, per row; the summary gives the median and max
|error| over the predicted rows (the base rows are inputs, not predictions).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from commsim.atomic import atomic_write_text  # noqa: E402
from commsim.cli.outputs import check_script_outputs  # noqa: E402
from commsim.network.system import PRESETS, job_intra_bw_GBps  # noqa: E402
from commsim.scenario.schema import parse_scenario  # noqa: E402
from commsim.sim.ddp_costs import step_overhead  # noqa: E402
from commsim.sim.engine import simulate  # noqa: E402

DATA = os.path.join(os.path.dirname(HERE), "tests", "data", "training-throughput")
TXL_FILE = "DGXA100-40GB+DGX1_1x1-8_DLE-PyTorch-TransformerXL-throughput.txt"
BERT_FILE = "DGXA100-80GB_1-32x8_DLE-PyTorch-BERT-pretrain-throughput.txt"

# Transformer-XL as DLE builds it (pytorch/mem_transformer.py, utils/proj_adaptive_softmax.py;
# hyperparameters from the README's "Parameters" section and wt103_{base,large}.yaml): WikiText-103's
# 267,735-word vocabulary, adaptive embedding/softmax with cutoffs 19997/39997/199997 (train.py),
# the softmax's cluster tables tied to the embedding's (tie_weight) and, with div_val 4, its
# projections of clusters 1-3 too (tie_projs [false, true, true, true]). Per layer
# (RelPartialLearnableDecoderLayer): qkv (d_model x 3 n_head d_head), output and relative-position
# projections (no biases), FF d_model x d_inner x 2 with biases, two LayerNorms; r_w_bias and
# r_r_bias shared by all layers. Counted: base 191,950,298 (DLE's base differs from the paper's:
# d_model 512, d_inner 2048, 8x64 heads; the paper's base hyperparameters give 151.1M, its 151M);
# large 285,167,482 (the paper's Table 1 says 257M for the same hyperparameters; the count of
# DLE's code, whose gradients DDP reduces, is used).
TXL_VOCAB, TXL_CUTOFFS = 267_735, (19_997, 39_997, 199_997)
TXL_ARCH = {
    "txl-base": {"n_layer": 16, "d_model": 512, "n_head": 8, "d_head": 64, "d_inner": 2048, "div_val": 1,
                 "tgt_len": 192, "mem_len": 192},
    "txl-large": {"n_layer": 18, "d_model": 1024, "n_head": 16, "d_head": 64, "d_inner": 4096, "div_val": 4,
                  "tgt_len": 384, "mem_len": 384},
}


def txl_gradients(name: str) -> List[Tuple[str, int, float]]:
    """(parameter, elements, ready point) of Transformer-XL `name` in the order its gradients
    become ready in backward; the ready point is the share of the backward done by then.

    The backward runs the adaptive softmax first, then the layers from the last to the first,
    then the embedding lookup. Its time is split in proportion to each part's forward FLOPs per
    token (backward costs about twice the forward for every matrix product, so the shares are
    the same): head softmax 2 d_emb0 (shortlist + clusters) (+ 2 d_model d_emb0 for its
    projection), per layer FF 4 d_model d_inner, attention 8 d_model H d_head for the
    projections + 6 (tgt_len + mem_len) H d_head for the scores, the position term and the
    weighted sum. The tail clusters' logits are left out (their cost scales with the share of
    target words outside the 20K shortlist, which the sources do not give), the lookup costs
    nothing. The tied embedding's gradient is complete only when the lookup's part is added:
    ready at 1.0; so are r_w_bias/r_r_bias (used by every layer) after the first layer's part."""
    a = TXL_ARCH[name]
    d, hd, inner, layers, div = a["d_model"], a["n_head"] * a["d_head"], a["d_inner"], a["n_layer"], a["div_val"]
    ends = list(TXL_CUTOFFS) + [TXL_VOCAB]
    sizes = [hi - lo for lo, hi in zip([0] + ends[:-1], ends)]
    dims = [d] * len(sizes) if div == 1 else [d // div ** i for i in range(len(sizes))]
    clusters = len(TXL_CUTOFFS)
    softmax = 2 * dims[0] * (TXL_CUTOFFS[0] + clusters) + (2 * d * dims[0] if div > 1 else 0)
    ff, attn = 4 * d * inner, 8 * d * hd + 6 * (a["tgt_len"] + a["mem_len"]) * hd
    total = softmax + layers * (ff + attn)
    out: List[Tuple[str, int, float]] = []
    done = softmax / total
    biases = [TXL_VOCAB] if div == 1 else sizes
    out += [(f"crit.out_layers_biases.{i}", n, done) for i, n in enumerate(biases)]
    out += [("crit.cluster_weight", clusters * d, done), ("crit.cluster_bias", clusters, done)]
    if div > 1:
        out.append(("crit.out_projs.0", d * dims[0], done))  # tie_projs[0] is false
    for layer in reversed(range(layers)):
        done += ff / total
        p = f"layers.{layer}"
        out += [(f"{p}.pos_ff.layer_norm", 2 * d, done), (f"{p}.pos_ff.CoreNet.3", inner * d + d, done),
                (f"{p}.pos_ff.CoreNet.0", d * inner + inner, done)]
        done = min(done + attn / total, 1.0)  # rounding: the first layer ends the backward's FLOPs
        out += [(f"{p}.dec_attn.o_net", hd * d, done), (f"{p}.dec_attn.layer_norm", 2 * d, done),
                (f"{p}.dec_attn.qkv_net", d * 3 * hd, done), (f"{p}.dec_attn.r_net", d * hd, done)]
    out += [("r_w_bias", hd, 1.0), ("r_r_bias", hd, 1.0)]
    out += [(f"word_emb.emb_layers.{i}", n * e, 1.0) for i, (n, e) in enumerate(zip(sizes, dims))]
    if div > 1:
        out += [(f"word_emb.emb_projs.{i}", d * e, 1.0) for i, e in enumerate(dims)]
    return out


def ddp_bucket_layout(gradients: Sequence[Tuple[str, int, float]], bytes_per_element: int,
                      first_bucket: int = 2**20, bucket_cap: int = 25 * 2**20) -> Tuple[List[int], List[float]]:
    """(bucket sizes in bytes, ready points) of torch DDP's buckets over `gradients` (in ready
    order, as DDP rebuilds its buckets after the first iteration): a bucket takes gradients
    until it holds at least its limit (1 MiB for the first, then ``bucket_cap``; torch
    reducer.cpp ``compute_bucket_assignment_by_size``), so a tensor larger than the cap closes
    the open bucket; a bucket is ready when its last gradient is."""
    sizes: List[int] = []
    ready: List[float] = []
    size, last, limit = 0, 0.0, first_bucket
    for _, elements, point in gradients:
        size += elements * bytes_per_element
        last = max(last, point)
        if size >= limit:
            sizes.append(size)
            ready.append(last)
            size, limit = 0, bucket_cap
    if size:
        sizes.append(size)
        ready.append(last)
    return sizes, ready


MODELS = {
    "txl-base": {"parameters": sum(n for _, n, _ in txl_gradients("txl-base")), "tokens_per_sample": 192},
    "txl-large": {"parameters": sum(n for _, n, _ in txl_gradients("txl-large")), "tokens_per_sample": 384},
    # BERT-large: Devlin et al., "BERT", NAACL 2019, Sec. 3: 340M.
    "bert-large": {"parameters": 340_000_000, "tokens_per_sample": 1},   # throughput in sequences
}


@dataclass(frozen=True)
class Hardware:
    """One system: a nominal preset (links) and its GPU's memory bandwidth (the DDP copies)."""

    preset: str
    memory_GBps: float
    memory_source: str
    network_note: str = ""

    def intra_bandwidth(self, gpus: int) -> float:
        """Per-GPU ring bandwidth (bytes/s, achievable) of a job on GPUs 0..gpus-1 of one node
        (the preset's description: on DGX-1 only the NVLinks among those GPUs)."""
        return job_intra_bw_GBps(PRESETS[self.preset], gpus) * 1e9

    def cluster(self, nodes: int, gpus: int) -> dict:
        """The scenario's ``cluster`` keys for `nodes` nodes of `gpus` GPUs each."""
        s = PRESETS[self.preset]
        return {
            "nodes": nodes, "gpus_per_node": gpus,
            "intra_node": {"bandwidth": self.intra_bandwidth(gpus), "latency": s.intra_hop_us * 1e-6},
            "inter_node": {"bandwidth": s.nics_per_node * s.nic_bw_GBps * 1e9, "latency": s.net_hop_us * 1e-6},
            "intra_kind": {"nvswitch": "nvswitch", "nvlink": "nvlink"}[s.intra_kind],
            "nics_per_node": s.nics_per_node,
        }


HARDWARE = {
    "DGX A100 40GB": Hardware("dgx-a100", 1555.0, "A100 40GB SXM4 datasheet: 1,555 GB/s HBM2"),
    "DGX A100 80GB": Hardware("dgx-a100", 2039.0, "A100 80GB SXM4 datasheet: 2,039 GB/s HBM2e",
                              network_note="inter-node network not stated by the source: "
                                           "8x HDR 200 Gb/s per node (DGX A100 datasheet) assumed"),
    "DGX-1 V100": Hardware("dgx1-v100", 900.0, "V100 SXM2 datasheet: 900 GB/s HBM2"),
}

COSTS_OFF = {"bucket_overhead": 0, "overlap_slowdown": 0, "gradient_as_bucket_view": True}
FWD_SHARE = 1.0 / 3.0  # forward : backward = 1 : 2

# The optimizer step, once per optimizer step (not per micro-batch): both sources train with LAMB
# (DLE Transformer-XL: jitlamb, DLE BERT: apex FusedLAMB), a memory-bound pass over the parameters.
# Bytes moved per parameter, counted from the kernels (fp32 master state): stage 1 reads the
# gradient, parameter and both moments and writes the moments and the update (7 x 4 B); the
# per-tensor norms of parameter and update (2 x 4 B); stage 2 reads update and parameter and
# writes the parameter (3 x 4 B); the global gradient norm for clipping reads the gradients (4 B):
# 52 B. Mixed precision (Apex AMP O2, fp16 model with fp32 master weights) adds the master
# gradients from the fp16 ones (2 B read + 4 B written) and the fp16 model copy of the master
# weights (4 B read + 2 B written): 12 B more. At the GPU's datasheet memory bandwidth: a lower
# bound (achieved bandwidth is below the peak), an estimate, not a measurement.
LAMB_BYTES_PER_PARAMETER = 52
AMP_MASTER_BYTES_PER_PARAMETER = 12


def optimizer_time(parameters: int, precision: str, memory_GBps: float) -> float:
    """Seconds of one LAMB step over `parameters` parameters at `memory_GBps` (the bytes above)."""
    per = LAMB_BYTES_PER_PARAMETER + (AMP_MASTER_BYTES_PER_PARAMETER if precision == "mixed" else 0)
    return parameters * per / (memory_GBps * 1e9)


@dataclass(frozen=True)
class Row:
    """One measured table row: a configuration and its throughput (samples or tokens / s)."""

    table: str
    hardware: str
    model: str
    precision: str  # "mixed" or "tf32"/"fp32"
    nodes: int
    gpus: int  # per node
    micro_batch: int
    accumulation: int
    throughput: float
    note: str = ""

    @property
    def world(self) -> int:
        return self.nodes * self.gpus

    @property
    def label(self) -> str:
        scale = f"{self.nodes}x{self.gpus}" if self.nodes > 1 or self.table.endswith("multinode") else f"{self.gpus} GPU"
        return f"{self.hardware} {self.model} {self.precision} b{self.micro_batch}x{self.accumulation} {scale}"


# --- reading the tables -------------------------------------------------------------------

def markdown_tables(path: str) -> List[Tuple[Tuple[str, ...], List[str], List[List[str]]]]:
    """(headings above, header cells, rows) of every markdown table of the file."""
    out, heads, lines = [], {}, open(path, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^(#{2,6})\s+(.*)$", line)
        if m:
            level = len(m.group(1))
            heads = {k: v for k, v in heads.items() if k < level}
            heads[level] = m.group(2).strip()
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1]):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append((tuple(heads[k] for k in sorted(heads)), header, rows))
            continue
        i += 1
    return out


def _cells(line: str) -> List[str]:
    return [c.strip().strip("*").strip() for c in line.strip().strip("|").split("|")]


def _num(text: str) -> Optional[float]:
    text = text.replace(",", "").strip()
    return None if text in ("N/A", "") else float(text)


def _col(header: Sequence[str], *words: str) -> int:
    for k, h in enumerate(header):
        if all(w.lower() in h.lower() for w in words):
            return k
    raise KeyError(f"no column with {words} in {header}")


def txl_rows(path: str) -> List[Row]:
    """Transformer-XL rows: one per (system, model, batch, precision, GPU count)."""
    rows = []
    for heads, header, body in markdown_tables(path):
        hw = "DGX A100 40GB" if any("DGX A100" in h for h in heads) else "DGX-1 V100"
        model = "txl-base" if any(h.startswith("Base") for h in heads) else "txl-large"
        single = "TF32" if hw.startswith("DGX A100") else "FP32"
        cols = {"mixed": _col(header, "Throughput", "Mixed"), single.lower(): _col(header, "Throughput", single)}
        g, b = _col(header, "GPUs"), _col(header, "Batch")
        for r in body:
            for prec, c in cols.items():
                thr = _num(r[c])
                if thr is not None:
                    rows.append(Row("txl", hw, model, prec, 1, int(r[g]), int(r[b]), 1, thr))
    return rows


def _pair(text: str) -> Tuple[int, int]:
    """'128 and 256' -> (128, 256): the TF32 and FP16 values of a BERT table cell."""
    a, b = (int(x) for x in re.split(r"\s+and\s+", text.strip()))
    return a, b


def bert_rows(path: str) -> List[Row]:
    """BERT-large pre-training rows (single-node table: 1 and 8 GPUs; multi-node: 1-32 nodes)."""
    rows = []
    for heads, header, body in markdown_tables(path):
        multi = any("Multi-node" in h for h in heads)
        table = "bert-multinode" if multi else "bert-1node"
        bcol, acol, scol = _col(header, "Batch size / GPU"), _col(header, "Accumulated"), _col(header, "Accumulation steps")
        seq = _col(header, "Sequence length")
        thr = {"tf32": _col(header, "TF32 Throughput") if multi else _col(header, "Throughput - TF32"),
               "mixed": _col(header, "Mixed Precision Throughput") if multi else _col(header, "Throughput - mixed")}
        for r in body:
            nodes, gpus = (int(r[0]), int(r[1])) if multi else (1, int(r[0]))
            for k, prec in enumerate(("tf32", "mixed")):
                batch, acc, steps = _pair(r[bcol])[k], _pair(r[acol])[k], _pair(r[scol])[k]
                note = ""
                if batch * steps != acc:
                    # the table contradicts itself: trust the accumulated batch (the throughput's unit)
                    if acc % batch == 0:
                        note = f"table says {steps} accumulation steps; {acc}/{batch} = {acc // batch} used"
                        steps = acc // batch
                    else:
                        note = f"table says batch {batch}; {acc}/{steps} = {acc // steps} used"
                        batch = acc // steps
                rows.append(Row(table, "DGX A100 80GB", f"bert-large s{r[seq]}", prec, nodes, gpus, batch, steps,
                                float(r[thr[prec]]), note))
    return rows


# --- predicting ---------------------------------------------------------------------------

TXL_OVERLAP = True  # --txl-overlap


def scenario_doc(row: Row, micro_compute: float, costs: bool, bucket_cap: int = 25 * 2**20) -> dict:
    """The scenario of a row with `micro_compute` seconds of forward+backward per micro-batch
    (`bucket_cap`: DDP's bucket_cap_mb in bytes, Transformer-XL only)."""
    model = MODELS["bert-large" if row.model.startswith("bert") else row.model]
    hw = HARDWARE[row.hardware]
    width = 2 if row.precision == "mixed" else 4
    grad_bytes = model["parameters"] * width
    if row.table.startswith("bert"):  # one flat all-reduce after the last micro-batch
        ddp = {"bucket_cap": grad_bytes, "first_bucket": grad_bytes, "overlap": False}
    elif TXL_OVERLAP:  # torch DDP's buckets over the model's layout
        sizes, ready = ddp_bucket_layout(txl_gradients(row.model), width, bucket_cap=bucket_cap)
        ddp = {"bucket_sizes": sizes, "bucket_ready": ready, "overlap": True}
    else:  # diagnostic: everything all-reduced after the backward
        ddp = {"bucket_cap": bucket_cap, "first_bucket": 2**20, "overlap": False}
    ddp["gradient_accumulation"] = row.accumulation
    ddp.update(COSTS_OFF if not costs else {"memory_bandwidth": hw.memory_GBps * 1e9})
    return {
        "name": row.label.replace(" ", "_"),
        "steps": 3,
        "cluster": hw.cluster(row.nodes, row.gpus),
        "model": {"parameters": model["parameters"], "grad_dtype": "fp16" if row.precision == "mixed" else "fp32"},
        "compute": {"forward": micro_compute * FWD_SHARE, "backward": micro_compute * (1 - FWD_SHARE),
                    "optimizer": row_optimizer(row), "batch_size": row.micro_batch},
        "ddp": ddp,
        "collective": {"algorithm": "ring"},
    }


def row_optimizer(row: Row) -> float:
    """The row's optimizer seconds per optimizer step (:func:`optimizer_time`)."""
    model = MODELS["bert-large" if row.model.startswith("bert") else row.model]
    return optimizer_time(model["parameters"], row.precision, HARDWARE[row.hardware].memory_GBps)


def compute_time(row: Row, micro_compute: float) -> float:
    """A step's compute alone (s): every micro-batch's forward and backward, and the optimizer."""
    return row.accumulation * micro_compute + row_optimizer(row)


def step_time(row: Row, micro_compute: float, costs: bool, bucket_cap: int = 25 * 2**20) -> float:
    """Simulated steady-state step time (s) of the row."""
    sc = parse_scenario(scenario_doc(row, micro_compute, costs, bucket_cap), row.label)
    return float(simulate(sc).step_time[-1])


# --- where the time goes ---------------------------------------------------------------------

# One-node nccl-tests all_reduce logs of the same boxes (tests/data/nccl-tests, each file's header
# cites its source), by (system, GPUs): the measured rate at DDP's bucket sizes, independent of
# the model's. The A100 log is an 80 GB HGX board: the same NVSwitch fabric as the DGX A100 40GB.
NCCL_LOGS = {
    ("DGX-1 V100", 8): "V100-SXM2-16GB-hybridCubeMesh-1node_8ranks_gh-blog-2019.txt",
    ("DGX A100 40GB", 8): "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt",
    ("DGX A100 80GB", 8): "A100-SXM4-80GB-1node_8ranks_gh-notes-dkh.txt",
}
NCCL_DATA = os.path.join(os.path.dirname(HERE), "tests", "data", "nccl-tests")


def measured_busbw(path: str) -> List[Tuple[int, float]]:
    """(size bytes, busbw bytes/s) of an nccl-tests all_reduce log's rows (the steady column)."""
    from commsim.calibration.nccl_log import parse_nccl_log

    log = parse_nccl_log(open(path, encoding="utf-8").read(), path, collective="all_reduce")
    out = []
    for r in log.rows:
        t = r.steady()
        if t is not None and t.busbw_Bps:
            out.append((r.size_bytes, t.busbw_Bps))
    return sorted(out)


def logged_allreduce_time(sizes: Sequence[float], n: int, busbw: Sequence[Tuple[int, float]]) -> float:
    """Seconds to all-reduce buckets of `sizes` bytes one after another among `n` ranks at the
    logged bus bandwidth (busbw = algbw 2(n-1)/n, the nccl-tests definition; interpolated in
    log size between rows, the end rows' rate outside them)."""
    import math

    xs = [math.log(s) for s, _ in busbw]
    total = 0.0
    for size in sizes:
        x = math.log(size)
        if x <= xs[0]:
            bw = busbw[0][1]
        elif x >= xs[-1]:
            bw = busbw[-1][1]
        else:
            k = next(i for i in range(1, len(xs)) if xs[i] >= x)
            w = (x - xs[k - 1]) / (xs[k] - xs[k - 1])
            bw = busbw[k - 1][1] + w * (busbw[k][1] - busbw[k - 1][1])
        total += 2.0 * (n - 1) / n * size / bw
    return total


def row_buckets(row: Row, bucket_cap: int = 25 * 2**20) -> List[int]:
    """The row's all-reduce sizes (bytes) per optimizer step, as :func:`scenario_doc` lays them out."""
    model = MODELS["bert-large" if row.model.startswith("bert") else row.model]
    width = 2 if row.precision == "mixed" else 4
    if row.table.startswith("bert"):
        return [model["parameters"] * width]
    return ddp_bucket_layout(txl_gradients(row.model), width, bucket_cap=bucket_cap)[0]


def breakdown(row: Row, micro_compute: float, step: float, exposed_all: float) -> dict:
    """Where a row's step goes, in seconds: the model's compute (micro-batches and optimizer),
    what it adds on top (exposed communication and DDP's costs), what the measurement leaves on
    top of the same compute, the most communication could add were nothing overlapped
    (`exposed_all`: the model's rate; ``logged``: the nccl-tests log's rate at the same bucket
    sizes, where one exists), and what is left beyond that (positive: no overlap at that rate
    reaches the measured step; the excess is not communication at that rate)."""
    measured = samples_per_step(row) / row.throughput
    compute = compute_time(row, micro_compute)
    out = {"compute_s": compute, "model_exposed_s": step - compute, "measured_exposed_s": measured - compute,
           "no_overlap_exposed_s": exposed_all}
    log = NCCL_LOGS.get((row.hardware, row.gpus)) if row.nodes == 1 else None
    ceiling = exposed_all
    if log is not None:
        buckets = row_buckets(row)
        costs = parse_scenario(scenario_doc(row, micro_compute, True), row.label).ddp.costs
        logged = logged_allreduce_time(buckets, row.gpus, measured_busbw(os.path.join(NCCL_DATA, log)))
        out["no_overlap_logged_s"] = logged + step_overhead(buckets, costs)  # DDP's copies and launches too
        ceiling = max(ceiling, out["no_overlap_logged_s"])
    out["beyond_no_overlap_s"] = (measured - compute) - ceiling
    return out


def no_overlap_step(row: Row, micro_compute: float) -> float:
    """The row's step (s, with DDP's costs) with every all-reduce after the backward."""
    doc = scenario_doc(row, micro_compute, True)
    if row.table == "txl":  # the same buckets, all issued after the backward
        doc["ddp"] = {k: v for k, v in doc["ddp"].items() if k != "bucket_ready"}
        doc["ddp"]["overlap"] = False
    return float(simulate(parse_scenario(doc, row.label)).step_time[-1])


def samples_per_step(row: Row) -> float:
    """Throughput units (tokens or sequences) the whole job processes per optimizer step."""
    model = MODELS["bert-large" if row.model.startswith("bert") else row.model]
    return row.world * row.micro_batch * row.accumulation * model["tokens_per_sample"]


def base_compute(base: Row, costs: bool, iterations: int = 6) -> float:
    """Compute per micro-batch (s) for which the simulated base row takes its measured step time."""
    measured = samples_per_step(base) / base.throughput
    opt = row_optimizer(base)
    c = (measured - opt) / base.accumulation
    for _ in range(iterations):  # the step time is nearly linear in compute: converges fast
        c *= (measured - opt) / (step_time(base, c, costs) - opt)
    return c


def groups(rows: Sequence[Row]) -> Dict[Tuple, List[Row]]:
    """Rows that share everything but scale (and, strong scaling, the accumulation)."""
    out: Dict[Tuple, List[Row]] = {}
    for r in rows:
        out.setdefault((r.table, r.hardware, r.model, r.precision, r.micro_batch), []).append(r)
    return out


def predict(rows: Sequence[Row]) -> List[dict]:
    """Every row's measured and predicted throughput, with and without DDP's costs."""
    out = []
    for key, members in groups(rows).items():
        base = min(members, key=lambda r: (r.world, -r.accumulation))
        compute = {costs: base_compute(base, costs) for costs in (True, False)}
        for r in sorted(members, key=lambda r: r.world):
            rec = {"table": r.table, "row": r.label, "hardware": r.hardware, "model": r.model,
                   "precision": r.precision, "nodes": r.nodes, "gpus_per_node": r.gpus,
                   "micro_batch": r.micro_batch, "accumulation": r.accumulation,
                   "measured": r.throughput, "base": r is base, "base_row": base.label,
                   "micro_compute_s": compute[True], "note": r.note}
            for costs, tag in ((True, "costs"), (False, "no_costs")):
                t = step_time(r, compute[costs], costs)
                pred = samples_per_step(r) / t
                rec[f"step_time_s_{tag}"] = t
                rec[f"predicted_{tag}"] = pred
                rec[f"error_pct_{tag}"] = (pred / r.throughput - 1) * 100
            t_all = no_overlap_step(r, compute[True]) if r.world > 1 else rec["step_time_s_costs"]
            rec.update(breakdown(r, compute[True], rec["step_time_s_costs"], t_all - compute_time(r, compute[True])))
            if r.table == "txl":  # the same job with 1 MiB buckets: not measured by the source
                t = step_time(r, compute[True], True, bucket_cap=2**20)
                rec["step_time_s_1MiB"] = t
                rec["predicted_1MiB"] = samples_per_step(r) / t
                rec["slower_1MiB_pct"] = (t / rec["step_time_s_costs"] - 1) * 100
            out.append(rec)
    return out


def summary(records: Sequence[dict]) -> Dict[str, dict]:
    """Median / max |error| (%) over the predicted rows, per table and in all."""
    out = {}
    tables = sorted({r["table"] for r in records}) + ["all"]
    for t in tables:
        sel = [r for r in records if not r["base"] and (t == "all" or r["table"] == t)]
        out[t] = {"rows": len(sel)}
        for tag in ("costs", "no_costs"):
            errs = [abs(r[f"error_pct_{tag}"]) for r in sel]
            signed = [r[f"error_pct_{tag}"] for r in sel]
            out[t][tag] = {"median_abs_pct": statistics.median(errs), "max_abs_pct": max(errs),
                           "median_signed_pct": statistics.median(signed)}
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows and the summary as JSON")
    ap.add_argument("--txl-overlap", choices=("on", "off"), default="on",
                    help="diagnostic: Transformer-XL's all-reduces after the whole backward (off)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also print where each row's step goes (compute, exposed time: model, measured, unoverlapped)")
    args = ap.parse_args(argv)
    check_script_outputs(ap, {"--json": args.json})  # before the run, not after it
    global TXL_OVERLAP
    TXL_OVERLAP = args.txl_overlap == "on"
    rows = txl_rows(os.path.join(DATA, TXL_FILE)) + bert_rows(os.path.join(DATA, BERT_FILE))
    records = predict(rows)
    print(f"{'row':52s} {'measured':>10s} {'pred(costs)':>11s} {'err':>7s} {'pred(none)':>11s} {'err':>7s} "
          f"{'1MiB step':>9s}")
    for r in records:
        tag = "  (base)" if r["base"] else ""
        one = f"{r['slower_1MiB_pct']:+8.2f}%" if "slower_1MiB_pct" in r else f"{'':9s}"
        print(f"{r['row']:52s} {r['measured']:10.0f} {r['predicted_costs']:11.0f} {r['error_pct_costs']:+6.1f}% "
              f"{r['predicted_no_costs']:11.0f} {r['error_pct_no_costs']:+6.1f}% {one}{tag}")
    summ = summary(records)
    print()
    print(f"{'table':16s} {'rows':>4s} {'costs: median':>14s} {'max':>7s} {'signed':>7s} {'none: median':>13s} {'max':>7s} {'signed':>7s}")
    for t, s in summ.items():
        c, n = s["costs"], s["no_costs"]
        print(f"{t:16s} {s['rows']:4d} {c['median_abs_pct']:13.1f}% {c['max_abs_pct']:6.1f}% {c['median_signed_pct']:+6.1f}% "
              f"{n['median_abs_pct']:12.1f}% {n['max_abs_pct']:6.1f}% {n['median_signed_pct']:+6.1f}%")
    if args.breakdown:
        print()
        print("ms per optimizer step: the model's compute; on top of it: the model, the measurement, and "
              "all communication unoverlapped (model rate / nccl-tests log rate); what the measurement leaves beyond that")
        print(f"{'row':52s} {'compute':>8s} {'model':>7s} {'meas':>7s} {'no-ovl':>7s} {'logged':>7s} {'beyond':>7s}")
        for r in records:
            if r["base"]:
                continue
            logged = f"{r['no_overlap_logged_s'] * 1e3:7.1f}" if "no_overlap_logged_s" in r else f"{'':7s}"
            print(f"{r['row']:52s} {r['compute_s'] * 1e3:8.1f} {r['model_exposed_s'] * 1e3:7.1f} "
                  f"{r['measured_exposed_s'] * 1e3:7.1f} {r['no_overlap_exposed_s'] * 1e3:7.1f} {logged} "
                  f"{r['beyond_no_overlap_s'] * 1e3:+7.1f}")
        print()
    notes = sorted({f"{r['row']}: {r['note']}" for r in records if r["note"]})
    notes += sorted({f"{name}: {hw.network_note}" for name, hw in HARDWARE.items() if hw.network_note})
    for n in notes:
        print(f"note: {n}")
    if args.json:
        atomic_write_text(args.json, json.dumps({"rows": records, "summary": summ, "notes": notes,
                                                 "hardware": {k: vars(v) for k, v in HARDWARE.items()}},
                                                sort_keys=True, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
