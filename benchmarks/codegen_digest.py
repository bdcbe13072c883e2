#!/usr/bin/env python3
"""A SHA-256 digest of every file tinyc generates, for refactorings that must not change the C.

Compiles digits (float and tinyc's own int8 PTQ), the onnx package's two light models and the
eight MLPerf Tiny models (float ONNX and the shipped int8 QDQ) for the host, every emulated board
ISA (Cortex-M3, M4 + DSP, M7, M55 + MVE; firmware projects, and the library format on the M4) and
OpenCL, each with its default schedule and with a few seeded random schedules drawn from the
layers' knob spaces, and prints one digest per generated file.

    python benchmarks/codegen_digest.py --out before.json            # run before the change
    python benchmarks/codegen_digest.py --against before.json        # after: same schedules, compare

``--against`` reuses the random schedules recorded in the earlier JSON (so a change in how knob
spaces are built cannot hide a change in the code) and exits 1 when a generated file differs. The
firmware's ``golden_graph.pkl`` (a pickle of Python objects, which names the modules classes live
in) is left out; everything else, reports included, is compared, and C/OpenCL sources are counted
apart from the rest.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

MLPERF_DIR = ROOT.parent / "shared" / "models" / "mlperf_tiny"
MLPERF = ("mlperf_kws_dscnn", "mlperf_vww_mobilenetv1_025", "mlperf_ic_resnet8", "mlperf_ad_fc_autoencoder")
MODELS = (["digits", "digits_int8", "light_squeezenet", "light_shufflenet"]
          + list(MLPERF) + [f"{m}_int8" for m in MLPERF])
#: (label, compile options): the host, OpenCL, one board per Cortex-M ISA, and the library format.
TARGETS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("host", {"target": "host"}),
    ("opencl", {"target": "opencl"}),
    ("m3", {"board": "mps2-an385"}),
    ("m4", {"board": "mps2-an386"}),
    ("m7", {"board": "mps2-an500"}),
    ("m55", {"board": "mps3-an547"}),
    ("m4-library", {"board": "mps2-an386", "format": "library"}),
)
SKIP = {"golden_graph.pkl"}
SOURCE_SUFFIXES = (".c", ".h", ".cl")


def load_graph(name: str, work: Path) -> Any:
    """The prepared graph of a model (import, passes, quantization)."""
    import numpy as np

    import tinyc
    from host_vs_onnxruntime import light_dir

    if name.startswith("digits"):
        path = ROOT / "examples" / "digits" / "digits_cnn.onnx"
        if name == "digits":
            return tinyc.load(path)
        sys.path.insert(0, str(ROOT / "examples" / "digits"))
        from data import load_split
        x_train = load_split()[0]
        calib = work / "digits_calib.npz"
        np.savez(calib, input=x_train[:300])
        return tinyc.load(path, quantize="int8", calib=calib)
    if name.startswith("light_"):
        return tinyc.load(light_dir() / f"{name}.onnx")
    if name.endswith("_int8"):
        return tinyc.load(MLPERF_DIR / name[:-5] / "model_int8_qdq.onnx")
    return tinyc.load(MLPERF_DIR / name / "model.onnx")


def random_schedules(graph: Any, target: str, seed: str, count: int) -> list[dict[str, dict[str, Any]]]:
    """`count` schedules, each layer's knobs drawn (seeded) among the values its target allows."""
    from tinyc.ops import get_op
    from tinyc.schedule import knob_allowed, target_knobs

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        sched: dict[str, dict[str, Any]] = {}
        for node in graph.nodes:
            opdef = get_op(node.op)
            knobs = target_knobs(opdef, node, graph, target)
            pick = {}
            for knob, values in sorted(knobs.items()):
                allowed = [v for v in values if knob_allowed(opdef, knob, v, target)]
                if allowed:
                    pick[knob] = rng.choice(allowed)
            if pick:
                sched[node.name] = pick
        out.append(sched)
    return out


def schedule_target(options: dict[str, Any]) -> str:
    from tinyc.schedule import board_target
    from tinyc.targets.boards import load_board

    if "board" in options:
        return board_target(load_board(options["board"]))
    return str(options["target"])


def digest_dir(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in SKIP}


def compile_digest(graph: Any, options: dict[str, Any], schedules: dict | None, work: Path) -> dict[str, str]:
    import tinyc
    from tinyc.errors import TinycError

    out = Path(tempfile.mkdtemp(dir=work))
    try:
        tinyc.compile(copy.deepcopy(graph), out, schedules=schedules, **options)
    except TinycError as exc:  # e.g. a model too big for the board: what was written still counts
        return {**digest_dir(out), "<error>": f"{type(exc).__name__}: {exc}"}
    return digest_dir(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--random", type=int, default=2, help="random schedules per model and target (default 2)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "codegen_digest.json")
    ap.add_argument("--against", type=Path, help="an earlier run's JSON: reuse its schedules, compare digests")
    args = ap.parse_args()
    earlier = json.loads(args.against.read_text()) if args.against else None
    from tqdm import tqdm

    result: dict[str, Any] = {"schedules": {}, "digests": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        jobs = [(m, t) for m in args.models for t in TARGETS]
        bar = tqdm(jobs, disable=not sys.stderr.isatty(), desc="render")
        graphs: dict[str, Any] = {}
        for model, (label, options) in bar:
            if model not in graphs:
                graphs = {model: load_graph(model, work)}
            graph = graphs[model]
            key = f"{model}/{label}"
            if earlier is not None:
                scheds = earlier["schedules"].get(key, [])
            else:
                scheds = random_schedules(graph, schedule_target(options), key, args.random)
            result["schedules"][key] = scheds
            for i, sched in enumerate([None] + scheds):
                variant = f"{key}/{'default' if i == 0 else f'random{i}'}"
                for path, digest in compile_digest(graph, options, sched, work).items():
                    result["digests"][f"{variant}/{path}"] = digest
                    if not sys.stderr.isatty():
                        print(f"{digest[:16]}  {variant}/{path}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    digests = result["digests"]
    n_src = sum(1 for k in digests if k.endswith(SOURCE_SUFFIXES))
    print(f"{len(digests)} generated files ({n_src} C/OpenCL sources) in {len(result['schedules'])} "
          f"model x target pairs; digests in {args.out}")
    if earlier is None:
        return 0
    # a run over some models compares those models only
    before = {k: v for k, v in earlier["digests"].items() if k.split("/")[0] in args.models}
    changed = sorted(k for k in set(before) | set(digests) if before.get(k) != digests.get(k))
    src = [k for k in changed if k.endswith(SOURCE_SUFFIXES)]
    for k in changed:
        print(f"DIFFERS  {k}: {str(before.get(k, '-'))[:16]} -> {str(digests.get(k, '-'))[:16]}")
    print(f"against {args.against}: {len(changed)} files differ ({len(src)} C/OpenCL sources), "
          f"{len(digests) - len(changed)} identical")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
