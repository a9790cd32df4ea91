#!/usr/bin/env python3
"""Writes fuzz_npy's .npz seeds into tests/fuzz/corpus/npy (standard library
only): the training pair x_train.npy (uint8 (3, 2, 2)) and y_train.npy
(int64 (3,)) stored, deflated, and stored with x_train.npy twice (the
duplicated member the reader refuses). Run from the repository root."""
import io
import struct
import warnings
import zipfile


def npy(descr, shape, data):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % s for s in shape))
    while (10 + len(h) + 1) % 64:
        h += " "
    h += "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data


x = npy("|u1", (3, 2, 2), bytes(range(12)))
y = npy("<i8", (3,), struct.pack("<3q", 0, 1, 2))
for name, comp, dup in [("train_stored.npz", zipfile.ZIP_STORED, False),
                        ("train_deflated.npz", zipfile.ZIP_DEFLATED, False),
                        ("train_duplicate.npz", zipfile.ZIP_STORED, True)]:
    b = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the duplicate name
        with zipfile.ZipFile(b, "w", comp) as z:
            for member, data in [("x_train.npy", x), ("y_train.npy", y)] + (
                    [("x_train.npy", x)] if dup else []):
                # a fixed time stamp: the same bytes on every run
                info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
                z.writestr(info, data, compress_type=comp)
    with open("tests/fuzz/corpus/npy/" + name, "wb") as f:
        f.write(b.getvalue())
