#!/usr/bin/env bash
# Idempotent setup on a fresh Debian machine (as root): system packages, then a virtual
# environment with tinyc installed editable plus its dev extras. Safe to run repeatedly:
# each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v make >/dev/null 2>&1 || need+=(make)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# generated C must also build warning-free for Cortex-M (tests check it with the cross compiler)
command -v arm-none-eabi-gcc >/dev/null 2>&1 || need+=(gcc-arm-none-eabi)
[ -f /usr/lib/arm-none-eabi/newlib/libc.a ] || need+=(libnewlib-arm-none-eabi)
# the emulated boards (mps2-an385/386/500, mps3-an547) run the firmware under QEMU
command -v qemu-system-arm >/dev/null 2>&1 || need+=(qemu-system-arm)
# the OpenCL target's tests run on the CPU through PoCL (an OpenCL driver) and the ICD loader
[ -f /etc/OpenCL/vendors/pocl.icd ] || need+=(pocl-opencl-icd)
[ -f /usr/include/CL/cl.h ] || need+=(ocl-icd-opencl-dev)
# --format arduino is built by a real Arduino builder in the tests (Debian's, with arduino-ctags)
command -v arduino-builder >/dev/null 2>&1 || need+=(arduino-builder)
# report.html is checked as a person sees it: rendered by headless Chromium, its text read back
# from the printed PDF (pdftotext); the plots' text needs a font installed
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v pdftotext >/dev/null 2>&1 || need+=(poppler-utils)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    need+=(python3-venv)
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "[tinyc setup] apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

VENV="${TINYC_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "[tinyc setup] creating virtual environment $VENV"
    python3 -m venv "$VENV"
fi
stamp="$VENV/.tinyc-install-stamp"
want="$(cat pyproject.toml .ci/constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! "$VENV/bin/python" -c 'import tinyc' >/dev/null 2>&1; then
    echo "[tinyc setup] pip install -e .[dev]"
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$VENV/bin/python" -m pip install -q -e ".[dev]" -c .ci/constraints.txt
    echo "$want" > "$stamp"
fi
