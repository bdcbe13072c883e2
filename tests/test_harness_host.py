"""The serial harness end to end on the host port: real models compiled by tinyc, the real
firmware harness and generated main built with the C compiler, talking TCP to the real client.
Outputs must equal tinyc's own host build and the golden model, bit for bit for int8."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinyc
import tinyc.reference
from tinyc.device import protocol as P
from tinyc.device.client import HarnessClient
from tinyc.device.hostsim import (
    HOST_CFLAGS,
    HostHarness,
    build_host_harness,
    harness_context,
    model_hash,
    model_sources,
    render_harness_main,
)
from tinyc.device.transport import open_link
from tinyc.errors import DeviceError, UsageError
from tinyc.resources import runtime_dir

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def _model(nodes, inputs, outputs, inits, name):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def mlp_model():
    """Gemm -> Relu -> MatMul: two layers after fusion, float32."""
    r = np.random.default_rng(1)
    return _model([helper.make_node("Gemm", ["x", "W", "B"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                   helper.make_node("MatMul", ["r", "W2"], ["y"])], [("x", [1, 16])], [("y", [1, 4])],
                  {"W": r.standard_normal((16, 8)), "B": r.standard_normal(8), "W2": r.standard_normal((8, 4))}, "mlp")


def conv_model():
    """Two 3x3 convolutions, pooling and a fully connected layer: enough work per layer to time."""
    r = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "wf"], ["y"])]
    inits = {"w1": r.standard_normal((8, 3, 3, 3)) * 0.3, "b1": r.standard_normal(8) * 0.1,
             "w2": r.standard_normal((8, 8, 3, 3)) * 0.2, "b2": r.standard_normal(8) * 0.1,
             "wf": r.standard_normal((8, 10)) * 0.5}
    return _model(nodes, [("x", [1, 3, 16, 16])], [("y", [1, 10])], inits, "convnet")


def two_io_model():
    """Two inputs and two outputs whose sizes do not line up with the data chunks."""
    r = np.random.default_rng(3)
    return _model([helper.make_node("Relu", ["a"], ["ya"]), helper.make_node("MatMul", ["b", "W"], ["yb"])],
                  [("a", [1, 70]), ("b", [1, 33])], [("ya", [1, 70]), ("yb", [1, 5])], {"W": r.standard_normal((33, 5))},
                  "two_io")


def build(tmp: Path, name: str, model, cflags: str = HOST_CFLAGS, **compile_kw) -> tuple[Path, Path]:
    project = tmp / name
    tinyc.compile(model, project, **compile_kw)
    return project, build_host_harness(project, cflags=cflags)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("harness")
    calib = {"x": np.random.default_rng(4).standard_normal((16, 3, 16, 16)).astype(np.float32)}
    small = HOST_CFLAGS + " -DTINYC_HARNESS_MAX_PAYLOAD=64 -DTINYC_HARNESS_FRAME_TIMEOUT_MS=200"
    return {"mlp": build(tmp, "mlp", mlp_model()),
            "int8": build(tmp, "int8", conv_model(), quantize="int8", calib=calib),
            "two_io": build(tmp, "two_io", two_io_model(), cflags=small)}


def session(exe: Path, timeout: float = 2.0):
    dev = HostHarness(exe)
    client = HarnessClient(open_link(dev.url, timeout=2.0), timeout=timeout)
    return dev, client


def test_hello_reports_the_model(built):
    project, exe = built["mlp"]
    report = json.loads((project / "report.json").read_text())
    dev, c = session(exe)
    with dev, c:
        info = c.hello()
    assert info == {"protocol_version": P.PROTOCOL_VERSION, "max_payload": 256, "board": "host", "model": "mlp",
                    "model_hash": model_hash(project), "tinyc_version": tinyc.__version__, "counter": "ns",
                    "arena_bytes": report["arena_bytes"], "num_layers": 2, "input_bytes": 16 * 4,
                    "output_bytes": 4 * 4, "num_inputs": 1, "num_outputs": 1}
    assert len(info["model_hash"]) == 16


def test_int8_outputs_are_bit_exact_over_many_inferences(built):
    project, exe = built["int8"]
    graph = tinyc.load(conv_model(), quantize="int8",
                       calib={"x": np.random.default_rng(4).standard_normal((16, 3, 16, 16)).astype(np.float32)})
    xs = np.random.default_rng(5).standard_normal((6, 1, 3, 16, 16)).astype(np.float32)
    host = tinyc.run(project, {"x": xs})["y"]
    dev, c = session(exe)
    with dev, c:
        for k, x in enumerate(xs):
            c.write_input(x.tobytes())
            assert c.run() > 0
            got = np.frombuffer(c.read_output(), np.float32).reshape(1, 10)
            golden = tinyc.reference.run_graph(graph, {"x": x})["y"]
            np.testing.assert_array_equal(got, host[k])
            np.testing.assert_array_equal(got, golden)


def test_float_model_matches_host_build(built):
    project, exe = built["mlp"]
    x = np.random.default_rng(6).standard_normal((1, 16)).astype(np.float32)
    dev, c = session(exe)
    with dev, c:
        c.write_input(x.tobytes())
        c.run(repeat=3)
        got = np.frombuffer(c.read_output(), np.float32)
    np.testing.assert_allclose(got, tinyc.run(project, {"x": x})["y"].ravel(), rtol=1e-6, atol=1e-6)


def test_several_inputs_and_outputs_with_small_frames(built):
    """max_payload 64: the client chunks by what HELLO says; chunks straddle tensor borders."""
    project, exe = built["two_io"]
    r = np.random.default_rng(7)
    a, b = r.standard_normal((1, 70)).astype(np.float32), r.standard_normal((1, 33)).astype(np.float32)
    want = tinyc.run(project, {"a": a, "b": b})
    dev, c = session(exe)
    with dev, c:
        info = c.hello()
        assert (info["max_payload"], info["input_bytes"], info["output_bytes"]) == (64, 103 * 4, 75 * 4)
        assert (info["num_inputs"], info["num_outputs"]) == (2, 2)
        c.write_input(a.tobytes() + b.tobytes())
        c.run()
        out = c.read_output()
    np.testing.assert_allclose(np.frombuffer(out[:280], np.float32), want["ya"].ravel(), rtol=1e-6)
    np.testing.assert_allclose(np.frombuffer(out[280:], np.float32), want["yb"].ravel(), rtol=1e-6)


def test_profile_sums_to_the_pass_and_matches_run(built):
    project, exe = built["int8"]
    report = json.loads((project / "report.json").read_text())
    names = [layer["name"] for layer in sorted((la for la in report["layers"] if la["kernel"] is not None),
                                               key=lambda la: la["kernel"])]
    x = np.random.default_rng(8).standard_normal((1, 3, 16, 16)).astype(np.float32)
    dev, c = session(exe)
    with dev, c:
        n = c.hello()["num_layers"]
        c.write_input(x.tobytes())
        c.run()
        ref_out = c.read_output()
        c.reset()
        assert c.read_output() == bytes(len(ref_out))  # RESET cleared the outputs
        c.write_input(x.tobytes())
        profiles = [c.profile() for _ in range(5)]
        assert c.read_output() == ref_out  # the profiling pass computes the same outputs
        runs = [c.run(repeat=10) / 10 for _ in range(5)]
        assert c.layer_names() == names
    for p in profiles:
        assert len(p) == n
        assert sum(p) + p.set_inputs + p.get_outputs == p.total
        assert all(t > 0 for t in p)
    best = min(p.total for p in profiles)
    assert 0.5 < best / min(runs) < 2.0, (best, min(runs))


def _raw_exchange(link, wire: bytes, timeout: float = 2.0) -> P.Packet:
    """Send raw bytes, return the first packet that comes back."""
    link.write(wire)
    dec = P.FrameDecoder()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for raw in dec.feed(link.read_some(deadline)):
            return P.parse_packet(raw)
    raise AssertionError("no reply")


def _corrupt_crc(wire: bytes) -> bytes:
    raw = P.cobs_decode(wire[1:-1])
    return b"\x00" + P.cobs_encode(raw[:-1] + bytes([raw[-1] ^ 0x5A])) + b"\x00"


@pytest.mark.parametrize("wire,cmd,status", [
    (_corrupt_crc(P.frame(P.Cmd.RUN, 1, P.run_request(1))), 0xFF, P.Status.BAD_CRC),
    (b"\x00" + P.cobs_encode(bytes(range(1, 200)) * 5) + b"\x00", 0xFF, P.Status.OVERSIZE),
    (b"\x00\x03\x11\x22\x00", 0xFF, P.Status.TRUNCATED),
    (b"\x00\x05\x11\x22\x00", 0xFF, P.Status.BAD_COBS),
    (P.frame(0x42, 3), 0xC2, P.Status.UNKNOWN_CMD),
    (P.frame(P.Cmd.RUN, 4, b"\x01\x00"), 0x83, P.Status.BAD_LENGTH),
    (P.frame(P.Cmd.RUN, 5, P.run_request(0)), 0x83, P.Status.BAD_ARG),
    (P.frame(P.Cmd.READ_OUTPUT, 6, P.read_output_request(10, 7)), 0x84, P.Status.BAD_RANGE),
    (P.frame(P.Cmd.WRITE_INPUT, 7, P.write_input_request(60, b"12345")), 0x82, P.Status.BAD_RANGE),
    (P.frame(P.Cmd.PROFILE_READ, 8, P.profile_read_request(3, 2)), 0x86, P.Status.BAD_RANGE),
    (P.frame(P.Cmd.LAYER_NAME, 9, P.layer_name_request(2)), 0x87, P.Status.BAD_RANGE),
    (P.frame(P.Cmd.HELLO, 10, P.hello_request(99)), 0x81, P.Status.VERSION),
])
def test_bad_requests_get_error_replies_and_the_next_request_works(built, wire, cmd, status):
    project, exe = built["mlp"]
    x = np.arange(16, dtype=np.float32)
    with HostHarness(exe) as dev, open_link(dev.url, 2.0) as link:
        reply = _raw_exchange(link, wire)
        assert (reply.cmd, reply.status) == (cmd, status)
        assert len(reply.body) == 4  # the u32 detail
        if status == P.Status.VERSION:
            assert reply.detail == P.PROTOCOL_VERSION
        c = HarnessClient(link, timeout=2.0)
        c.write_input(x.tobytes())
        c.run()
        np.testing.assert_allclose(np.frombuffer(c.read_output(), np.float32),
                                   tinyc.run(project, {"x": x[None]})["y"].ravel(), rtol=1e-6)


def test_error_replies_become_device_errors(built):
    _, exe = built["mlp"]
    dev, c = session(exe)
    with dev, c:
        c.hello()
        with pytest.raises(UsageError, match="takes 64 input bytes, got 8"):
            c.write_input(bytes(8))
        with pytest.raises(DeviceError, match=r"device socket://127\.0\.0\.1:\d+: RUN failed: device answered error "
                                              r"8: invalid argument"):
            c._transact(P.Cmd.RUN, P.run_request(0))
        c.run()  # still serving


def test_partial_frame_is_dropped_after_silence(built):
    """A frame whose end never comes: after the firmware's inter-byte timeout (200 ms in this
    build) it answers TRUNCATED, and the next request is served normally."""
    _, exe = built["two_io"]
    with HostHarness(exe) as dev, open_link(dev.url, 2.0) as link:
        wire = P.frame(P.Cmd.RESET, 1)
        t0 = time.monotonic()
        reply = _raw_exchange(link, wire[:-3])
        assert 0.15 < time.monotonic() - t0 < 1.5
        assert (reply.cmd, reply.status) == (0xFF, P.Status.TRUNCATED)
        assert HarnessClient(link).hello()["model"] == "two_io"


def test_a_retried_request_is_answered_from_the_cache(built):
    """Same seq, same bytes: the firmware resends its reply instead of running again (the
    nanosecond tick count would differ on a second run)."""
    _, exe = built["int8"]
    with HostHarness(exe) as dev, open_link(dev.url, 2.0) as link:
        assert _raw_exchange(link, P.frame(P.Cmd.HELLO, 1, P.hello_request())).status == P.Status.OK
        run = P.frame(P.Cmd.RUN, 2, P.run_request(3))
        first, again = _raw_exchange(link, run), _raw_exchange(link, run)
        assert first.status == P.Status.OK and first == again
        fresh = _raw_exchange(link, P.frame(P.Cmd.RUN, 3, P.run_request(3)))
        assert fresh.status == P.Status.OK and fresh.body != first.body


def test_exit_code_and_clean_shutdown(built):
    _, exe = built["mlp"]
    dev, c = session(exe)
    with dev, c:
        c.hello()
        c.exit(7)
        assert dev.wait(5) == 7


def test_disconnecting_ends_the_host_harness(built):
    _, exe = built["mlp"]
    with HostHarness(exe) as dev:
        open_link(dev.url, 2.0).close()
        assert dev.wait(5) == 0
        assert "client disconnected" in dev.log


def test_round_trip_time(built, capsys):
    """Not a benchmark, a sanity bound: a small request/reply over local TCP is sub-millisecond."""
    _, exe = built["mlp"]
    dev, c = session(exe)
    with dev, c:
        c.hello()
        t0 = time.perf_counter()
        for _ in range(200):
            c.reset()
        rtt = (time.perf_counter() - t0) / 200
    with capsys.disabled():
        print(f"\n  harness round trip (RESET, host port): {rtt * 1e6:.0f} us")
    assert rtt < 0.01


def test_harness_main_renders_for_any_io_and_escapes_names(tmp_path):
    ctx = {"prefix": "m", "model": 'we"ird\\name??=\n', "inputs": [], "outputs": [{"ident": "out_y", "ctype": "int8_t",
                                                                                 "count": 0}],
           "arena_bytes": 0, "nlayers": 0, "version": "9"}
    text = render_harness_main(ctx)
    assert '"we\\"ird\\\\name\\?\\?=\\n"' in text
    # outputs are read where the model leaves them (the context API, docs/c-api.md): no copy
    assert "{harness_arena + M_OUT_Y_OFFSET, 0u * (uint32_t)sizeof(int8_t)}" in text and '"cycles"' in text
    import jinja2
    with pytest.raises(jinja2.exceptions.UndefinedError):
        render_harness_main({k: v for k, v in ctx.items() if k != "nlayers"})


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="needs arm-none-eabi-gcc")
def test_harness_cross_compiles_small_for_cortex_m4(built, tmp_path):
    """The harness and the generated main build warning-free for a Cortex-M4 (no heap, no
    printf: nothing to link but the port), and the harness stays small."""
    project, _ = built["int8"]
    (tmp_path / "harness_main.c").write_text(render_harness_main(harness_context(project, counter_kind="systick")))
    rt = runtime_dir()
    flags = ["-std=c99", "-Os", "-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard",
             "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffunction-sections", "-I", str(project), "-I", str(rt / "include")]
    srcs = [tmp_path / "harness_main.c", rt / "src" / "tinyc_harness.c",
            *[p for p in model_sources(project) if p.suffix == ".c"]]
    for src in srcs:
        proc = subprocess.run(["arm-none-eabi-gcc", *flags, "-c", str(src), "-o", str(tmp_path / (src.stem + ".o"))],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    size = subprocess.run(["arm-none-eabi-size", str(tmp_path / "tinyc_harness.o")], capture_output=True, text=True,
                          check=True).stdout.splitlines()[1].split()
    text_bytes, bss = int(size[0]), int(size[2])
    assert text_bytes < 2600 and bss < 1024, size


def test_write_input_length_check_names_the_port(built):
    _, exe = built["two_io"]
    dev, c = session(exe)
    with dev, c:
        with pytest.raises(UsageError, match=r"socket://127\.0\.0\.1:\d+ takes 412 input bytes"):
            c.write_input(b"\x00" * 5)


def test_run_layer_times_one_layer_and_exposes_its_outputs(built):
    """RUN_LAYER: set_inputs, the layer `repeat` times (each timed), get_outputs. On the mlp model
    (two layers) running every layer in order gives the RUN output; out-of-range requests are
    refused with the limits, and a ranged READ_OUTPUT returns exactly that slice."""
    project, exe = built["mlp"]
    x = np.random.default_rng(9).standard_normal(16).astype(np.float32)
    dev, c = session(exe)
    with dev, c:
        n = c.hello()["num_layers"]
        c.write_input(x.tobytes())
        c.run()
        want = c.read_output()
        c.reset()
        c.write_input(x.tobytes())
        ticks = c.run_layer(0, repeat=5)
        assert len(ticks) == 5 and all(t >= 0 for t in ticks)
        ticks = c.run_layer(n - 1, repeat=3)   # layer 1 reads what layer 0 left in the arena
        assert len(ticks) == 3
        assert c.read_output() == want
        assert c.read_output(4, 8) == want[4:12]
        with pytest.raises(UsageError, match="layer index 2 out of range"):
            c.run_layer(n, 1)
        with pytest.raises(UsageError, match="repeat must be between 1 and 62"):
            c.run_layer(0, 63)
        with pytest.raises(UsageError, match="outside the 16 output bytes"):
            c.read_output(8, 12)
