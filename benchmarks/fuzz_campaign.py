"""A fuzz campaign against tinyc: malformed models, data files, board files, tuning logs and
protocol frames, each case judged by the oracle in tests/mutators.py (refused cleanly, or ran
with onnxruntime's outputs; never a traceback, a wrong result, a hang or injected code).

    python benchmarks/fuzz_campaign.py                       # the full campaign, a fresh seed
    python benchmarks/fuzz_campaign.py --seed 7 --models 60 --data 10 --boards 10 --logs 10 --frames 20000

Default sizes are those of the original campaign: 710 models (digits + the 8 MLPerf Tiny models),
46 data files x 4 commands (run, validate, profile, quantize), 91 board files, 41 tuning logs,
220,000 protocol frames, and sanitizer (ASan+UBSan) runs of accepted mutated models. Cases run in
a process pool (--jobs); each in a forked child with its own timeout. Prints a table (class x
outcome) and the distinct failure signatures, writes JSON (--out), and saves one reproducer per
signature (up to 3) under --findings.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import mutators as M  # noqa: E402

#: Share of the model cases per base model (the rest of the 710 go to digits).
MODEL_SHARE = {"kws_qdq": 0.14, "kws": 0.08, "ad": 0.07, "ad_qdq": 0.07, "ic": 0.07, "ic_qdq": 0.07, "vww": 0.06,
               "vww_qdq": 0.06}
SUFFIX = {"model": ".onnx", "data": ".npz", "board": ".toml", "log": ".jsonl"}


def plan(args: argparse.Namespace, bases: list[str]) -> list[dict]:
    """The case list: pure data (seeds), so a worker regenerates each input itself."""
    cases: list[dict] = []
    counts = {b: int(round(args.models * MODEL_SHARE.get(b, 0))) for b in bases if b != "digits"}
    counts["digits"] = max(0, args.models - sum(counts.values()))
    k = 0
    for base in ["digits"] + [b for b in bases if b != "digits"]:
        for j in range(counts.get(base, 0)):
            mode = "bytes" if k % 10 in (2, 5, 8) else "proto"
            cases.append({"cls": f"model-{mode}", "id": f"m{k:04d}-{base}", "base": base, "mode": mode,
                          "seed": args.seed * 100003 + k})
            k += 1
    for i in range(args.data):
        kind = M.DATA_MUTATIONS[i % len(M.DATA_MUTATIONS)]
        for cmd in ("run", "validate", "profile", "quantize"):
            cases.append({"cls": f"data-{cmd}", "id": f"d{i:03d}-{cmd}", "kind": kind, "cmd": cmd,
                          "seed": args.seed * 100003 + 50000 + i})
    for i in range(args.boards):
        cases.append({"cls": "board", "id": f"b{i:03d}", "kind": M.BOARD_MUTATIONS[i % len(M.BOARD_MUTATIONS)],
                      "seed": args.seed * 100003 + 60000 + i})
    for i in range(args.logs):
        cases.append({"cls": "log", "id": f"l{i:03d}", "seed": args.seed * 100003 + 70000 + i})
    chunk = 10000
    dec_frames = int(args.frames * 0.9)
    for i in range(0, dec_frames, chunk):
        cases.append({"cls": "frames-decoder", "id": f"f{i // chunk:03d}", "count": min(chunk, dec_frames - i),
                      "seed": args.seed * 100003 + 80000 + i // chunk})
    # client sessions send ~14 frames each: the rest of the frames
    sessions = max(1, (args.frames - dec_frames) // 14) if args.frames else 0
    for i in range(0, sessions, 100):
        cases.append({"cls": "frames-client", "id": f"c{i // 100:03d}", "count": min(100, sessions - i),
                      "seed": args.seed * 100003 + 90000 + i // 100})
    return cases


_CTX: dict = {}


def _context(args: dict) -> dict:
    """Per-worker fixtures (built once per worker process, cached on disk across workers)."""
    if not _CTX:
        shared = Path(args["work"]) / "_shared"
        lock = shared / ".lock"
        shared.mkdir(parents=True, exist_ok=True)
        import fcntl
        with open(lock, "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            _CTX["data"] = M.data_context(shared)
            _CTX["run"] = M.digits_run_context(shared)
        _CTX["models"] = M.seed_models()
        _CTX["boards"] = M.board_texts()
        _CTX["log_records"] = M.digits_log_records()
    return _CTX


def make_input(case: dict, ctx: dict) -> tuple[bytes, str]:
    """The mutated input of a file case, from its seed."""
    if case["cls"].startswith("model"):
        path, _ = ctx["models"][case["base"]]
        raw = path.read_bytes()
        if case["mode"] == "bytes":
            return M.mutate_bytes(raw, case["seed"])
        return M.mutate_model(raw, case["seed"])
    if case["cls"].startswith("data"):
        return M.mutate_data({"input": (1, 1, 8, 8)}, case["seed"], case["kind"])
    if case["cls"] == "board":
        names = sorted(ctx["boards"])
        base = names[case["seed"] % len(names)]
        data, what = M.mutate_board(ctx["boards"][base], case["seed"], case["kind"])
        return data, f"{base}: {what}"
    if case["cls"] == "log":
        return M.make_log(case["seed"], ctx["log_records"])
    raise ValueError(case["cls"])


def run_case(case: dict, args: dict) -> dict:
    """One case in a worker: the outcome as a dict (plus where its reproducer was saved)."""
    ctx = _context(args)
    cls = case["cls"]
    t0 = time.time()
    if cls.startswith("frames"):
        fn = M.fuzz_decoder if cls == "frames-decoder" else M.fuzz_client
        stats = fn(case["seed"], case["count"])
        return {**case, "stats": {k: v for k, v in stats.items() if k != "failures"}, "failures": stats["failures"],
                "seconds": time.time() - t0}
    data, what = make_input(case, ctx)
    work = Path(args["work"]) / case["id"]
    shutil.rmtree(work, ignore_errors=True)
    try:
        if cls.startswith("model"):
            _, feeds = ctx["models"][case["base"]]
            o = M.check_model(data, work, feeds, Path(args["cache"]), timeout=args["timeout"],
                              qdq_steps=M.QDQ_STEPS.get(case["base"], 1.0))
        elif cls.startswith("data"):
            o = M.check_data(case["cmd"], data, work, ctx["data"], timeout=args["timeout"])
        elif cls == "board":
            base = what.split(":")[0]
            o = M.check_board(data, work, ctx["run"], timeout=args["timeout"] + 60, base_text=ctx["boards"].get(base))
        else:
            o = M.check_log(data, work, ctx["run"], timeout=args["timeout"])
        result = {**case, "what": what, "outcome": o.outcome, "detail": o.detail, "signature": o.signature,
                  "ort": o.ort, "seconds": round(o.seconds, 2)}
        if o.failed:
            feeds = None
            if cls.startswith("model"):
                feeds = M.ort_reference(data, ctx["models"][case["base"]][1], Path(args["cache"])).get("feeds")
            result["reproducer"] = save_reproducer(args["findings"], case, data, dict(result, feeds=feeds))
        san = args.get("sanitize_every", 0)
        if cls.startswith("model") and o.outcome == "ok-equal" and san and case["seed"] % san == 0:
            s = sanitize(data, work, feeds, Path(args["cache"]), args["timeout"])
            result["sanitizer"] = {"outcome": s.outcome, "detail": s.detail, "signature": s.signature}
            if s.failed:
                result["sanitizer"]["reproducer"] = save_reproducer(args["findings"], case, data,
                                                                    {**result, "signature": s.signature,
                                                                     "detail": s.detail})
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _sanitize_body(model_bytes: bytes, work: str, feeds: dict) -> M.Outcome:
    import subprocess

    import tinyc
    from tests.util import sanitized_project
    w = Path(work) / "san"
    w.mkdir(parents=True, exist_ok=True)
    (w / "model.onnx").write_bytes(model_bytes)
    graph = tinyc.compile(str(w / "model.onnx"), w / "p").graph
    try:
        sanitized_project(w / "p", graph, feeds, w)
    except AssertionError as exc:
        text = str(exc)
        kind = "AddressSanitizer" if "AddressSanitizer" in text else ("runtime error" if "runtime error" in text
                                                                          else "exit")
        line = next((ln for ln in text.splitlines() if "runtime error" in ln or "ERROR:" in ln), text[:200])
        return M.Outcome("crash", line[:300], f"sanitizer: {kind}: " + M._normalise(line)[:100])
    except subprocess.CalledProcessError as exc:
        return M.Outcome("build-error", (exc.stderr or "")[-300:], "sanitizer: strict C99 build failed")
    return M.Outcome("ok-equal")


def sanitize(model_bytes: bytes, work: Path, base_feeds: dict, cache: Path, timeout: float) -> M.Outcome:
    """The accepted model's generated C built with ASan+UBSan and run once on onnxruntime's feeds."""
    ref = M.ort_reference(model_bytes, base_feeds, cache)
    feeds = ref.get("feeds") or {}
    # no address-space limit: ASan reserves terabytes of shadow memory
    res, status, output = M.isolated(_sanitize_body, (model_bytes, str(work), feeds), timeout, mem_limit=None)
    return M._finish(res, status, output, work, 0.0)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:90] or "unknown"


def save_reproducer(findings: str, case: dict, data: bytes, result: dict) -> str:
    """Save the input of a failing case under findings/<signature>/ (at most 3 per signature)."""
    folder = Path(findings) / _slug(result["signature"] or result["outcome"])
    folder.mkdir(parents=True, exist_ok=True)
    if len(list(folder.glob("*.json"))) >= 3:
        existing = sorted(folder.glob("*" + SUFFIX[case["cls"].split("-")[0]]))
        return str(existing[0]) if existing else str(folder)
    cls = case["cls"].split("-")[0]
    path = folder / f"{case['id']}{SUFFIX[cls]}"
    if cls == "board":
        (folder / case["id"]).mkdir(exist_ok=True)
        path = folder / case["id"] / "fuzzboard.toml"
    path.write_bytes(data)
    digits = "examples/digits/digits_cnn.onnx"
    x_hint = "X.npz"
    if cls == "model" and result.get("feeds") is not None:
        import numpy as np
        try:
            np.savez(folder / f"{case['id']}_x.npz", **result["feeds"])
            x_hint = str(folder / f"{case['id']}_x.npz")
        except Exception:
            pass
    project = {"run": f"tinyc compile {digits} -o out/d --build && tinyc run out/d --input {path}",
               "validate": f"tinyc compile {digits} -o out/fw --board mps2-an386 --build && "
                           f"tinyc validate out/fw --data {path}",
               "profile": f"tinyc compile {digits} -o out/fw --board mps2-an386 --build && "
                          f"tinyc profile out/fw --input {path}",
               "quantize": f"tinyc quantize {digits} --calib {path} -o out/q.onnx"}
    how = {"model": f"tinyc compile {path} -o out/m --build && tinyc run out/m --input {x_hint} "
                    f"(compare with onnxruntime, graph optimisations off)",
           "data": project.get(case.get("cmd", ""), ""),
           "board": f"tinyc compile {digits} -o out/m --board fuzzboard --board-dir {path.parent} --build",
           "log": f"tinyc compile {digits} -o out/m --tuning-log {path} --build && tinyc run out/m --input X.npz"}[cls]
    (folder / f"{case['id']}.json").write_text(json.dumps({**{k: v for k, v in result.items()
                                                              if k not in ("reproducer", "feeds")},
                                                           "reproduce": how}, indent=2, default=str) + "\n")
    return str(path)


def table(results: list[dict]) -> tuple[str, dict]:
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        if "stats" in r:
            s = r["stats"]
            c = counts[r["cls"]]
            c["frames"] += s["frames"]
            for k in ("refused", "ok-equal", "traceback", "wrong"):
                c["cases"] += s[k]
                c[k] += s[k]
            continue
        counts[r["cls"]]["cases"] += 1
        counts[r["cls"]][r["outcome"]] += 1
        if "sanitizer" in r:
            counts["sanitizer"]["cases"] += 1
            counts["sanitizer"][r["sanitizer"]["outcome"]] += 1
    cols = ["cases"] + [o for o in M.OUTCOMES if any(c[o] for c in counts.values())]
    order = sorted(counts, key=lambda k: ["model", "data", "board", "log", "frames", "sanitizer"].index(
        next(p for p in ["model", "data", "board", "log", "frames", "sanitizer"] if k.startswith(p))))
    width = max([len(k) for k in order] + [10])
    lines = ["class".ljust(width) + "".join(f"{c:>17}" for c in cols)]
    total = collections.Counter()
    for k in order:
        lines.append(k.ljust(width) + "".join(f"{counts[k][c]:>17,}" for c in cols))
        total.update(counts[k])
    lines.append("total".ljust(width) + "".join(f"{total[c]:>17,}" for c in cols))
    if "frames-decoder" in counts or "frames-client" in counts:
        lines.append(f"(frames-decoder: one case per frame sent; frames-client: one case per client call, "
                     f"{counts['frames-client']['frames']:,} reply frames; protocol frames in all: "
                     f"{counts['frames-decoder']['frames'] + counts['frames-client']['frames']:,})")
    return "\n".join(lines), {k: dict(v) for k, v in counts.items()}


def signatures(results: list[dict]) -> dict[str, dict]:
    sigs: dict[str, dict] = {}
    for r in results:
        items = []
        if "stats" in r:
            items = [(f["signature"], r["cls"], json.dumps({k: v for k, v in f.items() if k != "signature"})[:300],
                      f.get("kind", f.get("step", "")), "") for f in r["failures"]]
        else:
            if r["outcome"] in M.FAILURES:
                items.append((r["signature"] or r["outcome"], r["cls"], r["detail"], r["what"], r.get("reproducer", "")))
            s = r.get("sanitizer")
            if s and s["outcome"] in M.FAILURES:
                items.append((s["signature"], "sanitizer", s["detail"], r["what"], s.get("reproducer", "")))
        for sig, cls, detail, what, repro in items:
            e = sigs.setdefault(sig, {"count": 0, "classes": collections.Counter(), "detail": detail, "what": what,
                                      "reproducer": repro, "outcome": sig.split(":")[0]})
            e["count"] += 1
            e["classes"][cls] += 1
            if not e["reproducer"] and repro:
                e["reproducer"] = repro
    for e in sigs.values():
        e["classes"] = dict(e["classes"])
    return dict(sorted(sigs.items(), key=lambda kv: -kv[1]["count"]))


def write_summary(findings: Path, args: argparse.Namespace, text: str, sigs: dict) -> None:
    """findings/SUMMARY.md: the table and one line per distinct failure signature."""
    findings.mkdir(parents=True, exist_ok=True)
    lines = [f"# fuzz campaign, seed {args.seed}", "", "```", text, "```", "",
             f"{len(sigs)} distinct failure signatures:", ""]
    for sig, e in sigs.items():
        lines += [f"- **{sig}** ({e['count']}x; {', '.join(f'{k} {v}' for k, v in e['classes'].items())})",
                  f"  - e.g. `{e['what'][:120]}`: {e['detail'][:300]}",
                  f"  - reproducer: `{e['reproducer'] or '(in-process frames: see the JSON)'}`"]
    (findings / "SUMMARY.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {findings / 'SUMMARY.md'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=None, help="campaign seed (default: from the clock; printed)")
    p.add_argument("--models", type=int, default=710, help="malformed models (default 710)")
    p.add_argument("--data", type=int, default=46, help="bad data files, each given to 4 commands (default 46)")
    p.add_argument("--boards", type=int, default=91, help="bad board files (default 91)")
    p.add_argument("--logs", type=int, default=41, help="corrupted tuning logs (default 41)")
    p.add_argument("--frames", type=int, default=220_000, help="fuzzed protocol frames (default 220000)")
    p.add_argument("--sanitize-every", type=int, default=6,
                   help="ASan+UBSan run of every Nth accepted model case (by seed; 0: none; default 6)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per case (default 180)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "fuzz_campaign.json"))
    p.add_argument("--findings", default=str(REPO / "benchmarks" / "results" / "fuzz_findings"),
                   help="reproducers of failures go here")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "tinyc-fuzz-ort"),
                   help="onnxruntime results cache")
    p.add_argument("--only", help="comma-separated class prefixes to run (model,data,board,log,frames)")
    p.add_argument("--ids", help="comma-separated case ids to rerun (as in the JSON/findings, e.g. m0010-digits); "
                                 "give the same --seed and sizes")
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = int(time.time()) % 1_000_000
    import tempfile
    work = Path(args.work or tempfile.mkdtemp(prefix="tinyc-fuzz-"))
    bases = list(M.seed_models())
    cases = plan(args, bases)
    if args.only:
        prefixes = tuple(args.only.split(","))
        cases = [c for c in cases if c["cls"].startswith(prefixes)]
    if args.ids:
        wanted = set(args.ids.split(","))
        cases = [c for c in cases if c["id"] in wanted]
    wargs = {"work": str(work), "cache": args.cache, "findings": args.findings, "timeout": args.timeout,
             "sanitize_every": args.sanitize_every}
    print(f"fuzz campaign: seed {args.seed}, {len(cases)} cases ({args.models} models over {', '.join(bases)}; "
          f"{args.data} data files x 4; {args.boards} boards; {args.logs} logs; {args.frames:,} frames), "
          f"{args.jobs} jobs, work {work}", flush=True)
    # the slow cases first, so the pool does not end on one long straggler
    weight = {"model-proto": 0, "model-bytes": 1, "board": 2, "log": 3}
    cases.sort(key=lambda c: weight.get(c["cls"], 4))
    results: list[dict] = []
    t0 = time.time()
    tty = sys.stderr.isatty()
    bar = None
    if tty:
        from tqdm import tqdm
        bar = tqdm(total=len(cases), unit="case", dynamic_ncols=True)
    fails = 0
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=__import__("multiprocessing").get_context("fork")) as ex:
        futs = {ex.submit(run_case, c, wargs): c for c in cases}
        for n, fut in enumerate(as_completed(futs), start=1):
            case = futs[fut]
            try:
                r = fut.result()
            except Exception as exc:  # a worker died: count it, keep going
                r = {**case, "what": "", "outcome": "crash", "detail": f"worker: {exc!r}",
                     "signature": f"harness: worker failed ({type(exc).__name__})", "ort": "", "seconds": 0}
            results.append(r)
            bad = r.get("outcome") in M.FAILURES or bool(r.get("failures"))
            fails += bad
            if bar is not None:
                bar.update(1)
                bar.set_postfix(failures=fails)
            elif n % max(1, len(cases) // 40) == 0 or n == len(cases):
                print(f"  {n}/{len(cases)} cases, {fails} with failures, {time.time() - t0:.0f} s", flush=True)
    if bar is not None:
        bar.close()
    text, counts = table(results)
    sigs = signatures(results)
    print()
    print(text)
    print(f"\n{len(sigs)} distinct failure signatures ({time.time() - t0:.0f} s):")
    for sig, e in sigs.items():
        print(f"  {e['count']:>5}  {sig}\n         e.g. {e['what'][:90]}: {e['detail'][:160]}"
              + (f"\n         reproducer: {e['reproducer']}" if e["reproducer"] else ""))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"seed": args.seed, "args": vars(args), "seconds": round(time.time() - t0, 1),
                               "table": counts, "signatures": sigs,
                               "cases": [{k: v for k, v in r.items() if k != "failures"} for r in results],
                               "frame_failures": [f for r in results for f in r.get("failures", [])][:200]},
                              indent=1, default=str) + "\n")
    print(f"wrote {out}")
    write_summary(Path(args.findings), args, text, sigs)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if sigs else 0


if __name__ == "__main__":
    sys.exit(main())
