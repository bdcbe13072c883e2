"""Deterministic train/test split of scikit-learn's bundled digits data set.

Needs only numpy and scikit-learn (no torch), so the exact split used to
train ``digits_cnn.onnx`` can be reproduced anywhere, e.g. by tests that
check the compiled C model against onnxruntime.
"""

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def load_split():
    """Return ``(x_train, y_train, x_test, y_test)``.

    ``x`` arrays are float32 with shape (N, 1, 8, 8) and values in [0, 1]
    (raw pixel values 0..16 divided by 16); ``y`` arrays are int64 labels 0..9.
    """
    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=0, stratify=y
    )
    return (
        np.ascontiguousarray(x_train, dtype=np.float32),
        np.ascontiguousarray(y_train, dtype=np.int64),
        np.ascontiguousarray(x_test, dtype=np.float32),
        np.ascontiguousarray(y_test, dtype=np.int64),
    )
