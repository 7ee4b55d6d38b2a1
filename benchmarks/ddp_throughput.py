"""DDP step-time check against published data-parallel training throughput tables.

    python benchmarks/ddp_throughput.py [--json OUT.json] [--txl-overlap off]

Data: tests/data/training-throughput (NVIDIA DeepLearningExamples READMEs, each file's first
line cites its source): PyTorch Transformer-XL base/large on one DGX A100 (40 GB) and one
DGX-1 (V100 16 GB) at 1/2/4/8 GPUs (weak scaling, fixed batch per GPU), PyTorch BERT-large
pre-training on DGX A100 (80 GB) at 1 and 8 GPUs and at 1-32 nodes (strong scaling: the
accumulated batch per GPU halves as the node count doubles).

Protocol, the same for every row (nothing is tuned per table or per row):

- Per-GPU compute per micro-batch from the table's base row (1 GPU, or 1 node for the
  multi-node table): the compute time for which the simulator reproduces the base row's
  measured step time (for 1 GPU, simply its step time: there is nothing to all-reduce).
  Backward is twice the forward (the usual 2:1 FLOP ratio); the optimizer is folded into
  them (its share is not published).
- Gradient bytes: the model's parameter count (:data:`MODELS`, cited) times 2 bytes with
  mixed precision (Apex AMP O2 / the fp16 post-accumulation all-reduce reduce fp16
  gradients), 4 bytes in TF32/FP32.
- Gradient accumulation as the table says (micro-batches per optimizer step; a table entry
  contradicting its own accumulated batch is corrected from it and noted).
- How gradients are reduced: Transformer-XL uses torch DDP (25 MiB buckets, 1 MiB first,
  overlapped with backward); the BERT scripts all-reduce one flat fp16 buffer after the last
  micro-batch (``allreduce_post_accumulation``: no overlap, one bucket).
- Hardware: one description per system (:data:`HARDWARE`), from datasheets: the nominal
  :mod:`commsim.network.system` presets (``dgx-a100``, ``dgx1-v100``) plus the GPU memory
  bandwidth. DGX-1's hybrid cube-mesh gives a job on GPUs 0..n-1 only the NVLinks among
  them (:data:`DGX1_NVLINKS`); NVSwitch gives every GPU its full NVLink rate at any n. The
  BERT tables do not state the inter-node network: the DGX A100 datasheet's 8x HDR 200 Gb/s
  per node is assumed.
- ``--txl-overlap off`` (a diagnostic, not the protocol): Transformer-XL's all-reduces after
  the whole backward. Its embedding is tied to the softmax (71% of the base model's
  parameters), so that gradient is complete only at the end of backward, while the engine
  assumes gradient bytes are produced uniformly through backward.
- Two model variants: with DDP's own costs (``ddp.bucket_overhead``, copies at
  ``ddp.memory_bandwidth``, ``ddp.overlap_slowdown``, their documented defaults) and
  without them (``ddp: {bucket_overhead: 0, overlap_slowdown: 0, gradient_as_bucket_view: true}``).

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

from commsim.network.system import ACHIEVABLE_FRACTION, PRESETS  # noqa: E402
from commsim.scenario.schema import parse_scenario  # noqa: E402
from commsim.sim.engine import simulate  # noqa: E402

DATA = os.path.join(os.path.dirname(HERE), "tests", "data", "training-throughput")
TXL_FILE = "DGXA100-40GB+DGX1_1x1-8_DLE-PyTorch-TransformerXL-throughput.txt"
BERT_FILE = "DGXA100-80GB_1-32x8_DLE-PyTorch-BERT-pretrain-throughput.txt"

# Parameter counts. Transformer-XL large: the paper's WikiText-103 large model (Dai et al.,
# "Transformer-XL", ACL 2019, Table 1: 257M), which the DLE README says it uses unchanged.
# Transformer-XL base: DLE changed the paper's base (d_model 410 -> 512, d_inner 2100 -> 2048,
# 10x41 -> 8x64 heads), so the paper's 151M does not apply; counted from the README's
# hyperparameters (16 layers; per layer qkv 512x1536, output 512x512, relative-position
# 512x512, FF 512x2048x2 with biases, two LayerNorms) and WikiText-103's 267,735-word vocabulary
# with the embedding tied to the adaptive softmax (div_val 1): 191.95M. The same count with the
# paper's base hyperparameters gives 151.1M, the paper's 151M. BERT-large: Devlin et al.,
# "BERT", NAACL 2019, Sec. 3: 340M.
MODELS = {
    "txl-base": {"parameters": 191_950_298, "tokens_per_sample": 192},   # tgt_len 192 (README)
    "txl-large": {"parameters": 257_000_000, "tokens_per_sample": 384},  # tgt_len 384 (README)
    "bert-large": {"parameters": 340_000_000, "tokens_per_sample": 1},   # throughput in sequences
}

# DGX-1 (V100) NVLink2 hybrid cube-mesh, links per GPU pair (NVIDIA, "NVIDIA DGX-1 With Tesla
# V100 System Architecture" white paper, Fig. 4; `nvidia-smi topo -m` on a DGX-1V): 6 links per
# GPU, 25 GB/s each way per link. A job on GPUs 0..n-1 builds its rings from the links among
# them only, so its ring bandwidth per GPU is the fewest links any of its GPUs has into the set.
DGX1_NVLINKS = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)
NVLINK2_GBPS = 25.0  # per link, each way (NVLink 2.0)


@dataclass(frozen=True)
class Hardware:
    """One system: a nominal preset (links) and its GPU's memory bandwidth (the DDP copies)."""

    preset: str
    memory_GBps: float
    memory_source: str
    cube_mesh: bool = False
    network_note: str = ""

    def intra_bandwidth(self, gpus: int) -> float:
        """Per-GPU ring bandwidth (bytes/s, achievable) of a job on GPUs 0..gpus-1 of one node."""
        system = PRESETS[self.preset]
        if not self.cube_mesh or gpus < 2:
            return system.intra_bw_GBps * 1e9
        links = min(sum(DGX1_NVLINKS[i][j] for j in range(gpus)) for i in range(gpus))
        return links * NVLINK2_GBPS * ACHIEVABLE_FRACTION["nvlink"] * 1e9

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
    "DGX-1 V100": Hardware("dgx1-v100", 900.0, "V100 SXM2 datasheet: 900 GB/s HBM2", cube_mesh=True),
}

COSTS_OFF = {"bucket_overhead": 0, "overlap_slowdown": 0, "gradient_as_bucket_view": True}
FWD_SHARE = 1.0 / 3.0  # forward : backward = 1 : 2


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


def scenario_doc(row: Row, micro_compute: float, costs: bool) -> dict:
    """The scenario of a row with `micro_compute` seconds of forward+backward per micro-batch."""
    model = MODELS["bert-large" if row.model.startswith("bert") else row.model]
    hw = HARDWARE[row.hardware]
    grad_bytes = model["parameters"] * (2 if row.precision == "mixed" else 4)
    if row.table.startswith("bert"):  # one flat all-reduce after the last micro-batch
        ddp = {"bucket_cap": grad_bytes, "first_bucket": grad_bytes, "overlap": False}
    else:  # torch DDP defaults
        ddp = {"bucket_cap": 25 * 2**20, "first_bucket": 2**20, "overlap": TXL_OVERLAP}
    ddp["gradient_accumulation"] = row.accumulation
    ddp.update(COSTS_OFF if not costs else {"memory_bandwidth": hw.memory_GBps * 1e9})
    return {
        "name": row.label.replace(" ", "_"),
        "steps": 3,
        "cluster": hw.cluster(row.nodes, row.gpus),
        "model": {"parameters": model["parameters"], "grad_dtype": "fp16" if row.precision == "mixed" else "fp32"},
        "compute": {"forward": micro_compute * FWD_SHARE, "backward": micro_compute * (1 - FWD_SHARE),
                    "optimizer": 0, "batch_size": row.micro_batch},
        "ddp": ddp,
        "collective": {"algorithm": "ring"},
    }


def step_time(row: Row, micro_compute: float, costs: bool) -> float:
    """Simulated steady-state step time (s) of the row."""
    sc = parse_scenario(scenario_doc(row, micro_compute, costs), row.label)
    return float(simulate(sc).step_time[-1])


def samples_per_step(row: Row) -> float:
    """Throughput units (tokens or sequences) the whole job processes per optimizer step."""
    model = MODELS["bert-large" if row.model.startswith("bert") else row.model]
    return row.world * row.micro_batch * row.accumulation * model["tokens_per_sample"]


def base_compute(base: Row, costs: bool, iterations: int = 6) -> float:
    """Compute per micro-batch (s) for which the simulated base row takes its measured step time."""
    measured = samples_per_step(base) / base.throughput
    c = measured / base.accumulation
    for _ in range(iterations):  # the step time is nearly proportional to compute: converges fast
        c *= measured / step_time(base, c, costs)
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
    args = ap.parse_args(argv)
    global TXL_OVERLAP
    TXL_OVERLAP = args.txl_overlap == "on"
    rows = txl_rows(os.path.join(DATA, TXL_FILE)) + bert_rows(os.path.join(DATA, BERT_FILE))
    records = predict(rows)
    print(f"{'row':52s} {'measured':>10s} {'pred(costs)':>11s} {'err':>7s} {'pred(none)':>11s} {'err':>7s}")
    for r in records:
        tag = "  (base)" if r["base"] else ""
        print(f"{r['row']:52s} {r['measured']:10.0f} {r['predicted_costs']:11.0f} {r['error_pct_costs']:+6.1f}% "
              f"{r['predicted_no_costs']:11.0f} {r['error_pct_no_costs']:+6.1f}%{tag}")
    summ = summary(records)
    print()
    print(f"{'table':16s} {'rows':>4s} {'costs: median':>14s} {'max':>7s} {'signed':>7s} {'none: median':>13s} {'max':>7s} {'signed':>7s}")
    for t, s in summ.items():
        c, n = s["costs"], s["no_costs"]
        print(f"{t:16s} {s['rows']:4d} {c['median_abs_pct']:13.1f}% {c['max_abs_pct']:6.1f}% {c['median_signed_pct']:+6.1f}% "
              f"{n['median_abs_pct']:12.1f}% {n['max_abs_pct']:6.1f}% {n['median_signed_pct']:+6.1f}%")
    notes = sorted({f"{r['row']}: {r['note']}" for r in records if r["note"]})
    notes += sorted({f"{name}: {hw.network_note}" for name, hw in HARDWARE.items() if hw.network_note})
    for n in notes:
        print(f"note: {n}")
    if args.json:
        from commsim.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps({"rows": records, "summary": summ, "notes": notes,
                                                 "hardware": {k: vars(v) for k, v in HARDWARE.items()}},
                                                sort_keys=True, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
