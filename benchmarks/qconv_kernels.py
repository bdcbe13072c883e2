"""QConv kernels on this machine: the original one-pixel kernel vs the tiled ones, per layer.

    python benchmarks/qconv_kernels.py                      # the MLPerf-Tiny-like layers below
    python benchmarks/qconv_kernels.py --layers kws_pw kws_dw --repeat 9
    python benchmarks/qconv_kernels.py --configs baseline tiled tiled_i16 tiled_i32

Each layer is one int8 convolution made by ``build_qconv`` (the int8 lowering's builder) from
random float weights, compiled by tinyc once per configuration (``baseline`` = schedule knob
``variant="baseline"``, the original kernel; ``tiled`` = the default schedule; ``tiled_i16`` /
``tiled_i32`` = the default schedule with another ``mac`` form), built with the host flags and
timed with the generated ``<prefix>_main`` runner (a C loop of N inferences, no Python in it).
Every configuration's output is first checked bit for bit against the golden model
(``tinyc.reference``); a mismatch aborts. Timing runs are interleaved over configurations; the
table shows the median of ``--repeat`` runs in ns per multiply-accumulate and each
configuration's speed-up over ``baseline``. Raw numbers go to ``--out`` (JSON).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tinyc.reference  # noqa: E402
from tinyc.codegen.pipeline import generate  # noqa: E402
from tinyc.ir import Graph  # noqa: E402
from tinyc.ops import get_op  # noqa: E402
from tinyc.ops.qconv import build_qconv  # noqa: E402
from tinyc.numerics.qparams import add_qtensor  # noqa: E402
from tinyc.schedule import default_schedules  # noqa: E402
from tinyc.targets import host  # noqa: E402

#: name -> (input NHWC, output channels, kernel, stride, pad, group): MLPerf Tiny layer shapes
#: (KWS DS-CNN, VWW MobileNetV1-0.25, IC ResNet-8).
LAYERS: dict[str, tuple[tuple[int, int, int, int], int, int, int, int, int]] = {
    "kws_pw_64": ((1, 25, 5, 64), 64, 1, 1, 0, 1),
    "kws_dw_64": ((1, 25, 5, 64), 64, 3, 1, 1, 64),
    "vww_pw_16_32": ((1, 24, 24, 16), 32, 1, 1, 0, 1),
    "vww_pw_32_64": ((1, 12, 12, 32), 64, 1, 1, 0, 1),
    "vww_pw_128": ((1, 6, 6, 128), 128, 1, 1, 0, 1),
    "vww_pw_256": ((1, 3, 3, 256), 256, 1, 1, 0, 1),
    "vww_dw_8": ((1, 48, 48, 8), 8, 3, 1, 1, 8),
    "vww_dw_32": ((1, 24, 24, 32), 32, 3, 1, 1, 32),
    "vww_dw_128": ((1, 6, 6, 128), 128, 3, 1, 1, 128),
    "vww_dw_64_s2": ((1, 12, 12, 64), 64, 3, 2, 1, 64),
    "ic_3x3_16": ((1, 32, 32, 16), 16, 3, 1, 1, 1),
    "ic_3x3_32": ((1, 16, 16, 32), 32, 3, 1, 1, 1),
    "ic_3x3_64": ((1, 8, 8, 64), 64, 3, 1, 1, 1),
}
CONFIGS: dict[str, dict[str, Any]] = {
    "baseline": {"variant": "baseline"},
    "tiled": {},
    "tiled_i16": {"mac": "i16"},
    "tiled_i32": {"mac": "i32"},
}
TIMING_RE = re.compile(r"([0-9.eE+-]+) us/inference over (\d+) runs")


def layer_graph(name: str, seed: int = 0) -> Graph:
    """One QConv (with a fused ReLU) on random data, as the int8 lowering would build it."""
    (n, h, w, c), oc, k, s, p, grp = LAYERS[name]
    r = np.random.default_rng(seed)
    g = Graph(name)
    add_qtensor(g, "x", (n, h, w, c), 0.05, 3)
    g.inputs = ["x"]
    g.add_constant("w", r.normal(0, 0.3, (k, k, c // grp, oc)).astype(np.float32))
    g.add_constant("b", r.normal(0, 0.3, oc).astype(np.float32))
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    # an output scale that keeps most outputs unclamped: ~3 standard deviations of the sum
    add_qtensor(g, "y", (n, oh, ow, oc), 3 * 0.3 * 0.05 * 74 * math.sqrt(k * k * c / grp) / 128, -5)
    attrs = dict(kernel=[k, k], strides=[s, s], pads=[p] * 4, dilations=[1, 1], group=grp, layout="NHWC")
    g.nodes.append(build_qconv(g, "conv", "x", "w", "b", "y", attrs, (0.0, None), source=name))
    g.outputs, g.output_names = ["y"], ["y"]
    return g


class Build:
    """One layer compiled with one configuration, ready to time."""

    def __init__(self, g: Graph, config: str, work: Path, x: np.ndarray) -> None:
        sched = default_schedules(g)
        node = g.nodes[0]
        sched[node.name] = {**sched[node.name], **CONFIGS[config]}
        ks = get_op("QConv").knobs(node, g)
        if any(v not in ks[k] for k, v in sched[node.name].items() if k in ks):
            raise ValueError(f"{config}: schedule {sched[node.name]} not among {ks}")
        self.schedule = sched[node.name]
        gen = generate(g, prefix="qb", schedules=sched)
        host.write_project(work, gen.files, gen.manifest, host.default_cflags())
        host.build(work)
        self.exe = work / "build" / "qb_main"
        x.tofile(work / "x.bin")
        self.cmd = [str(self.exe), str(work / "x.bin"), str(work / "y.bin")]
        subprocess.run(self.cmd, check=True, capture_output=True)
        self.y = np.fromfile(work / "y.bin", dtype=np.int8).reshape(g.tensor("y").shape)
        self.scratch = int(gen.report.get("arena_bytes", 0))

    def us(self, repeat: int) -> float:
        out = subprocess.run(self.cmd + [str(repeat)], check=True, capture_output=True, text=True).stdout
        m = TIMING_RE.search(out)
        if not m:
            raise RuntimeError(f"no timing in {out!r}")
        return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    ap.add_argument("--configs", nargs="+", default=["baseline", "tiled"], choices=list(CONFIGS))
    ap.add_argument("--repeat", type=int, default=7, help="timing runs per configuration (median)")
    ap.add_argument("--run-seconds", type=float, default=0.1, help="length of one timing run")
    ap.add_argument("--work-dir", type=Path, default=ROOT / "benchmarks" / "results" / "build" / "qconv")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "qconv_kernels.json")
    args = ap.parse_args()
    if "baseline" not in args.configs:
        args.configs.insert(0, "baseline")
    rows: list[dict[str, Any]] = []
    for name in args.layers:
        g = layer_graph(name)
        x = np.random.default_rng(1).integers(-128, 128, g.tensor("x").shape).astype(np.int8)
        golden = tinyc.reference.run_graph(g, {"x": x})["y"]
        macs = get_op("QConv").macs(g.nodes[0], g)
        builds = {c: Build(g, c, args.work_dir / name / c, x) for c in args.configs}
        for c, b in builds.items():
            if not np.array_equal(b.y, golden):
                raise SystemExit(f"{name} / {c}: C output differs from the golden model")
        reps = {}
        for c, b in builds.items():  # calibrate: one run lasts about --run-seconds
            us = b.us(3)
            reps[c] = max(3, int(args.run_seconds / max(us * 1e-6, 1e-9)))
        times: dict[str, list[float]] = {c: [] for c in builds}
        for _ in range(args.repeat):
            for c, b in builds.items():
                times[c].append(b.us(reps[c]))
        med = {c: statistics.median(t) for c, t in times.items()}
        row = {"layer": name, "shape": LAYERS[name], "macs": macs,
               "clamped_fraction": float(np.mean((golden == -128) | (golden == 127) | (golden == -5))),
               "configs": {c: {"schedule": builds[c].schedule, "runs_us": times[c], "median_us": med[c],
                               "ns_per_mac": med[c] * 1e3 / macs, "speedup": med["baseline"] / med[c]}
                           for c in builds}}
        rows.append(row)
        print(f"{name:14s} " + "  ".join(f"{c} {row['configs'][c]['ns_per_mac']:.4f} ns/MAC"
                                          f" (x{row['configs'][c]['speedup']:.2f})" for c in builds), flush=True)
    # Markdown table
    cols = args.configs
    print()
    print("| layer | MACs | " + " | ".join(f"{c} ns/MAC" for c in cols) + " | "
          + " | ".join(f"{c}/baseline" for c in cols if c != "baseline") + " |")
    print("|---|---:|" + "---:|" * (len(cols) + len(cols) - 1))
    for r in rows:
        cf = r["configs"]
        print(f"| {r['layer']} | {r['macs']:,} | " + " | ".join(f"{cf[c]['ns_per_mac']:.4f}" for c in cols) + " | "
              + " | ".join(f"{cf[c]['speedup']:.2f}x" for c in cols if c != "baseline") + " |")
    total = {c: sum(r["configs"][c]["median_us"] for r in rows) for c in cols}
    print(f"| all layers (sum of us) | {sum(r['macs'] for r in rows):,} | "
          + " | ".join(f"{total[c]:.1f} us" for c in cols) + " | "
          + " | ".join(f"{total['baseline'] / total[c]:.2f}x" for c in cols if c != "baseline") + " |")
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    except OSError:
        pass
    cc = subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    doc = {"machine": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu,
                       "nproc": os.cpu_count(), "platform": platform.platform(), "cc": cc[0] if cc else "",
                       "cflags": host.default_cflags(), "loadavg": os.getloadavg()},
           "repeat": args.repeat, "run_seconds": args.run_seconds, "layers": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
