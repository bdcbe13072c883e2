"""Train a small CNN on scikit-learn's digits data set and export it to ONNX.

Usage:
    pip install torch
    python examples/digits/train.py [--out PATH]

The exported model has input ``input`` (float32, [1, 1, 8, 8], pixels / 16)
and output ``logits`` (float32, [1, 10]), opset 13.
"""

import argparse
import inspect
import os
import random
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import load_split  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "digits_cnn.onnx")


def build_model():
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1, groups=16),  # depthwise
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 32),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(32, 10),
    )


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    return float((pred == y).mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help="output .onnx path")
    parser.add_argument("--epochs", type=int, default=60)
    args = parser.parse_args()

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    x_train, y_train, x_test, y_test = load_split()
    model = build_model()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params}")

    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    loss_fn = nn.CrossEntropyLoss()
    xt = torch.from_numpy(x_train)
    yt = torch.from_numpy(y_train)
    gen = torch.Generator().manual_seed(0)
    batch = 32

    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(xt), generator=gen)
        total = 0.0
        for i in range(0, len(xt), batch):
            idx = perm[i : i + batch]
            opt.zero_grad()
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        sched.step()
        if (epoch + 1) % 10 == 0:
            print(
                f"epoch {epoch + 1:3d}  loss {total / len(xt):.4f}  "
                f"test acc {accuracy(model, x_test, y_test):.4f}"
            )

    model.eval()
    acc = accuracy(model, x_test, y_test)
    print(f"torch test accuracy: {acc:.4f} ({round(acc * len(y_test))}/{len(y_test)})")

    dummy = torch.zeros(1, 1, 8, 8, dtype=torch.float32)
    kwargs = dict(
        input_names=["input"],
        output_names=["logits"],
        opset_version=13,
        do_constant_folding=True,
    )
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False  # classic TorchScript exporter: plain graph
    torch.onnx.export(model, dummy, args.out, **kwargs)
    print(f"wrote {args.out}")
    verify(args.out, x_test, y_test)


def verify(path, x_test, y_test):
    """Check the exported file and re-measure accuracy with onnxruntime."""
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as exc:  # optional: only needed for the check
        print(f"skipping ONNX verification ({exc})")
        return
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    ops = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    print("onnx ops:", ", ".join(f"{k} x{v}" for k, v in ops.items()))
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    pred = np.array(
        [sess.run(["logits"], {"input": x[None]})[0].argmax() for x in x_test]
    )
    acc = float((pred == y_test).mean())
    print(f"onnxruntime test accuracy: {acc:.4f} ({int((pred == y_test).sum())}/{len(y_test)})")


if __name__ == "__main__":
    main()
