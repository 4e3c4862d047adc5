#!/usr/bin/env python3
"""Interoperability check run by tests/integration_safetensors_python.c.

  safetensors_interop.py check FILE   loads FILE (written by fleet) with the reference
                                      `safetensors.numpy.load_file` and NumPy, and checks
                                      every tensor's dtype, shape and values and the
                                      metadata against the pattern both sides know
  safetensors_interop.py write FILE   writes FILE with `safetensors.numpy.save_file` in the
                                      same pattern, for fleet to read

Pattern: tensor "t.<dtype>" holds element k = (k * 7 + 3) % 251 - 100 as that dtype
(unsigned types: % 251), shapes as in SHAPES; metadata {"format": "fleet.interop",
"answer": "42"}. Exit status 0 on success, 1 on a mismatch (printed).
"""
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

SHAPES = {"float32": (3, 4), "float64": (5,), "uint8": (2, 3, 2), "int32": (7,), "int64": (2, 2)}


def expected(dtype):
    n = int(np.prod(SHAPES[dtype]))
    k = np.arange(n, dtype=np.int64)
    v = (k * 7 + 3) % 251
    if dtype != "uint8":
        v = v - 100
    return v.astype(dtype).reshape(SHAPES[dtype])


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "write":
        save_file({f"t.{d}": expected(d) for d in SHAPES}, path, metadata={"format": "fleet.interop", "answer": "42"})
        return 0
    tensors = load_file(path)
    if sorted(tensors) != sorted(f"t.{d}" for d in SHAPES):
        print("tensors:", sorted(tensors))
        return 1
    for d in SHAPES:
        t = tensors[f"t.{d}"]
        e = expected(d)
        if t.dtype != e.dtype or t.shape != e.shape or not np.array_equal(t, e):
            print(f"t.{d}: got {t.dtype} {t.shape} {t.ravel()[:8]}, expected {e.dtype} {e.shape} {e.ravel()[:8]}")
            return 1
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    if meta != {"format": "fleet.interop", "answer": "42"}:
        print("metadata:", meta)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
