#!/usr/bin/env python3
"""Writes the seed corpus of the libFuzzer targets (tests/fuzz/corpus/<target>/).

Usage: /usr/bin/python3 tests/fuzz/make_corpus.py BATCHCAST_CLI [OUT_DIR]

Images come from PIL (small JPEG and PNG files of every kind the decoder handles), the
HDF5 datasets from the project's own converter (`batchcast convert`, encoded and raw), the
IDX files, spec strings and control-socket scripts are written here. Every seed is small
(the HDF5 ones about 25 KB) so the corpus stays in the repository. Regression inputs found by
fuzzing are kept beside the seeds as regress-*, and fuzz_hdf5's legacy-*.h5 are the same
datasets as written before the converters stored checksums and used HDF5's newer format
bounds, its v1-*.h5 as written in layout version 1 (encoded samples as vlen, before issue 33):
older files users still have; this script never removes any of them. The seeds it writes are
layout version 2 (encoded bytes + sample_offsets/sample_lengths, with and without offline
buckets), raw pixels uncompressed and gzip, and stored pixels, so the fuzzer starts from every
read path (direct, inflate, per sample).
"""
import gzip
import io
import os
import struct
import subprocess
import sys
import tempfile

from PIL import Image


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def image(mode, size, fmt, **kw):
    w, h = size
    im = Image.new(mode, size)
    px = im.load()
    for y in range(h):
        for x in range(w):
            v = (x * 37 + y * 91) % 256
            if mode in ("L", "P"):
                px[x, y] = v
            elif mode == "I;16":
                px[x, y] = v * 257
            elif mode == "CMYK":
                px[x, y] = (v, 255 - v, x * 16 % 256, y * 16 % 256)
            elif mode == "RGBA":
                px[x, y] = (v, 255 - v, x * 16 % 256, 128)
            elif mode == "LA":
                px[x, y] = (v, 200)
            else:
                px[x, y] = (v, 255 - v, (x * y) % 256)
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def images(out):
    t = "fuzz_image"
    write(out, t, "rgb.jpg", image("RGB", (16, 12), "JPEG", quality=80))
    write(out, t, "rgb-420-odd.jpg", image("RGB", (17, 9), "JPEG", quality=50, subsampling=2))
    write(out, t, "gray.jpg", image("L", (8, 8), "JPEG"))
    write(out, t, "cmyk.jpg", image("CMYK", (8, 8), "JPEG"))
    write(out, t, "progressive.jpg", image("RGB", (24, 16), "JPEG", progressive=True))
    # A restart marker at every MCU row (as some cameras write files): the crop decoder
    # enters such a file at the box's interval. jpegtran (libjpeg-turbo-progs) adds them.
    tall = image("RGB", (24, 80), "JPEG", quality=75)
    rst = subprocess.run(["jpegtran", "-restart", "1"], input=tall, capture_output=True,
                         check=True).stdout
    write(out, t, "rgb-restart-rows.jpg", rst + bytes([0x41, 0x07, 0x30, 0x15, 0x02]))
    write(out, t, "rgb.png", image("RGB", (9, 7), "PNG"))
    write(out, t, "gray.png", image("L", (8, 5), "PNG"))
    write(out, t, "gray16.png", image("I;16", (4, 4), "PNG"))
    write(out, t, "rgba.png", image("RGBA", (6, 6), "PNG"))
    write(out, t, "gray-alpha.png", image("LA", (5, 3), "PNG"))
    write(out, t, "palette.png", image("P", (7, 7), "PNG"))
    return {
        "jpg": image("RGB", (16, 12), "JPEG", quality=70),
        "png": image("RGB", (12, 10), "PNG"),
    }


def hdf5(out, cli, seeds):
    t = "fuzz_hdf5"
    with tempfile.TemporaryDirectory() as tmp:
        for cls in ("cat", "dog"):
            os.makedirs(os.path.join(tmp, "folder", cls))
        with open(os.path.join(tmp, "folder", "cat", "a.jpg"), "wb") as f:
            f.write(seeds["jpg"])
        with open(os.path.join(tmp, "folder", "dog", "b.png"), "wb") as f:
            f.write(seeds["png"])
        # IDX pair for the raw layout: 3 images of 4x4, 3 labels.
        idx_images = struct.pack(">BBBBIII", 0, 0, 8, 3, 3, 4, 4) + bytes(range(48))
        idx_labels = struct.pack(">BBBBI", 0, 0, 8, 1, 3) + bytes([0, 1, 2])
        with open(os.path.join(tmp, "train-images-idx3-ubyte"), "wb") as f:
            f.write(idx_images)
        with open(os.path.join(tmp, "train-labels-idx1-ubyte"), "wb") as f:
            f.write(idx_labels)
        runs = {
            "encoded.h5": ["convert", "imagefolder", os.path.join(tmp, "folder"), "--threads", "1",
                           "--out"],
            "raw.h5": ["convert", "idx", "--images", os.path.join(tmp, "train-images-idx3-ubyte"),
                       "--labels", os.path.join(tmp, "train-labels-idx1-ubyte"), "--threads", "1",
                       "--no-compress", "--out"],
            # Stored pixels of per-sample shapes (convert --store decoded): the 1-D layout.
            "pixels.h5": ["convert", "imagefolder", os.path.join(tmp, "folder"), "--threads", "1",
                          "--store", "decoded", "--compression", "gzip:1", "--out"],
            "png.h5": ["convert", "idx", "--images", os.path.join(tmp, "train-images-idx3-ubyte"),
                       "--labels", os.path.join(tmp, "train-labels-idx1-ubyte"), "--threads", "1",
                       "--encode", "png", "--out"],
            # Layout version 2 with offline buckets: an index per bytes dataset.
            "buckets.h5": ["convert", "imagefolder", os.path.join(tmp, "folder"), "--threads",
                           "1", "--buckets", "6,8", "--bucket-encoding", "png", "--out"],
            # gzip raw pixels: the inflate path (chunks read with pread, inflated by zlib).
            "raw-gzip.h5": ["convert", "idx", "--images",
                            os.path.join(tmp, "train-images-idx3-ubyte"), "--labels",
                            os.path.join(tmp, "train-labels-idx1-ubyte"), "--threads", "1",
                            "--out"],
        }
        for name, args in runs.items():
            dst = os.path.join(tmp, name)
            subprocess.run([cli] + args + [dst], check=True, stdout=subprocess.DEVNULL)
            with open(dst, "rb") as f:
                write(out, t, name, f.read())


def idx(out):
    t = "fuzz_idx"
    images = struct.pack(">BBBBIII", 0, 0, 8, 3, 2, 3, 3) + bytes(range(18))
    labels = struct.pack(">BBBBI", 0, 0, 8, 1, 4) + bytes([3, 1, 4, 1])
    write(out, t, "images.idx", images)
    write(out, t, "labels.idx", labels)
    write(out, t, "images.idx.gz", gzip.compress(images, mtime=0))
    write(out, t, "four-dims.idx", struct.pack(">BBBBIIII", 0, 0, 8, 4, 1, 2, 2, 1) + bytes(4))
    write(out, t, "float.idx", struct.pack(">BBBBI", 0, 0, 0x0D, 1, 1) + bytes(4))


SPECS = [
    "resize(min=96,max=224,step=32)",
    "resize(min=96,max=224,step=32,upgrade=0.25,mode=mixed,lr=linear,max_batch=512,"
    "final_epochs=1,policy=random)",
    "resize(sizes=96:128:160:224,upgrade=0.5,mode=exhaustive,lr=sqrt)",
    "resize(min=64,max=64,lr=none,final_epochs=0)",
    "resize = \"resize(min=96,max=224)\"\nresize_upgrade = 0.5\n# comment\n[table]\n",
    "resize_min = 32\nresize_max = 128\nresize_step = 16\nresize_policy = \"random\"\n",
    "telemetry(hdf5=run.h5,interval=1s,rows=100,spans=on,gpu=off,summary=on)",
    "telemetry(csv=run.csv,json=run.json,trace=trace.json,interval=250ms,)",
    "on",
    "off",
    "view(resize=96@0:160@2:224@4,crop=random,scale=0.25:1,flip=1)",
    "view(resize=96:128:160:224,normalize=1,mean=0.5,std=0.25,dtype=float32)",
    "view( resize = 32@0 : 16@3 , crop=center , draw=7 )",
    "view(flip=0,\n\tresize=24@0:16@1\n)",
]


def specs(out):
    for i, s in enumerate(SPECS):
        write(out, "fuzz_spec", "spec-%02d.txt" % i, s.encode())


# Control-socket scripts (tests/fuzz/fuzz_control.cc): op bytes 0 connect, 1 raw bytes,
# 2 protocol message, 3 admit, 4 close, 5 a member writes its control entry, 6 publish.
def join(conn, batch=2, depth=1, flags=0, name=b"trainer", resume=None):
    payload = struct.pack(">IIBBBI", 4242, 0, batch, depth, flags, 7) + name.ljust(32, b"\0")
    epoch, sample = resume if resume else (0, 0)  # protocol 3: the join's resume point
    payload += struct.pack(">BII", 1 if resume else 0, epoch, sample)
    return bytes([2, conn, 0, 0]) + payload


def member(conn, kind, position=0):  # kind 2 drain, 3 leave
    return bytes([2, conn, kind, 0]) + struct.pack(">I", position)


def control(out):
    t = "fuzz_control"
    seeds = {
        "join-close": [0], "join-admit-drain-leave": [0], "status": [0],
        "two-members": [0, 0], "raw-garbage": [0], "truncated-join": [0],
        "join-resume": [0], "old-protocol-join": [0],
    }
    seeds["join-resume"] += [join(0, resume=(3, 24)), join(1), bytes([3]), 6, bytes([4, 0])]
    # kind 0x30: version from the script (2, the previous protocol), length from the script
    # (72 bytes, protocol 2's join size)
    seeds["old-protocol-join"] += [join(0)[:2] + bytes([0x30]) + join(0)[3:] + bytes([2, 72])]
    seeds["join-close"] += [join(0), bytes([4, 0])]
    seeds["join-admit-drain-leave"] += [join(0), bytes([3]), member(0, 2, 1), member(0, 3, 1)]
    seeds["status"] += [bytes([2, 0, 1, 0])]
    seeds["two-members"] += [join(0, 4, 2, 1), join(1, 1, 3, 2), bytes([3]), member(1, 2),
                             bytes([4, 0])]
    seeds["raw-garbage"] += [bytes([1, 0, 10]) + b"BCC1garbag"]
    seeds["truncated-join"] += [join(0)[:3] + bytes([0x20]) + join(0)[4:] + bytes([40])]
    # member write: 5, member, what (0 heartbeat, 2 position, 4 release), 8 value bytes
    seeds["publish-heartbeat-release"] = [0, join(0), 3, 6, bytes([5, 0, 0]) + bytes(8),
                                          bytes([5, 0, 4]) + bytes(8), bytes([5, 0, 2]) + bytes(8),
                                          6, member(0, 2), bytes([4, 0])]
    for name, parts in seeds.items():
        write(out, t, name, b"".join(bytes([p]) if isinstance(p, int) else p for p in parts))


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: make_corpus.py BATCHCAST_CLI [OUT_DIR]")
    cli = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "corpus")
    seeds = images(out)
    hdf5(out, cli, seeds)
    idx(out)
    specs(out)
    control(out)


if __name__ == "__main__":
    main()
