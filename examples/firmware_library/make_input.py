"""Write src/input.h: one image of the digits test set as the firmware's fixed model input.

    python examples/firmware_library/make_input.py --index 0 -o examples/firmware_library/src/input.h
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def c_float(v: np.float32) -> str:
    """The shortest decimal that reads back as exactly this float32, as a C float literal."""
    if v == 0 or 1e-4 <= abs(v) < 1e6:
        return np.format_float_positional(v, unique=True, trim="0") + "f"
    return np.format_float_scientific(v, unique=True, trim="0") + "f"


def input_header(values: np.ndarray, label: int, what: str) -> str:
    """C99 header defining `model_input` (float) and INPUT_LABEL."""
    flat = np.asarray(values, dtype=np.float32).ravel()
    rows = [", ".join(c_float(v) for v in flat[i:i + 8]) for i in range(0, flat.size, 8)]
    body = ",\n    ".join(rows)
    return (f"/* input.h - written by make_input.py: {what}. */\n"
            "#ifndef INPUT_H\n#define INPUT_H\n\n"
            f"#define INPUT_LABEL {int(label)}u\n\n"
            f"static const float model_input[{flat.size}] = {{\n    {body}\n}};\n\n"
            "#endif /* INPUT_H */\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=int, default=0, help="image of the held-out test set (default 0)")
    ap.add_argument("-o", "--output", type=Path, default=HERE / "src" / "input.h")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE.parent / "digits"))
    from data import load_split
    _, _, x_test, y_test = load_split()
    what = f"digits test image {args.index}, label {int(y_test[args.index])}"
    args.output.write_text(input_header(x_test[args.index], int(y_test[args.index]), what))
    print(f"wrote {args.output} ({what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
