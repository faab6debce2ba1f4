"""A Python trainer consuming device batches (device/items.sh, item python_trainer).

The machine's Python (3.12) and torch (2.11) with no compiled extension: the bundle's C shim
(device/src/device_shim.cc, over the public GpuConsumer API) is loaded with ctypes, and each
device view becomes a torch tensor through __cuda_array_interface__ (zero copy). For every
batch: the tensor aliases the device slot (same address), its bytes equal the host batch's
(pixel checksums against the host path), each sample arrives once per epoch, and a small
model takes a training step on it on the GPU. Prints and writes one JSON line.
"""
import argparse
import ctypes
import json
import sys
import time

import numpy as np
import torch


class View(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 4), ("nbytes", ctypes.c_uint64), ("device", ctypes.c_int32)]


class BatchOut(ctypes.Structure):
    _fields_ = [("images", View), ("labels", View), ("host_images", ctypes.c_void_p),
                ("ids", ctypes.POINTER(ctypes.c_int64)), ("size", ctypes.c_int64),
                ("epoch", ctypes.c_uint64), ("index", ctypes.c_uint64)]


TYPESTR = {0: "|u1", 1: "<f4", 2: "<i8", 3: "<f2", 4: "<i4", 5: "<f8"}
NUMPY = {0: np.uint8, 1: np.float32, 2: np.int64, 3: np.float16, 4: np.int32, 5: np.float64}


class DeviceArray:
    """__cuda_array_interface__ (v3) over one device view; the slot stays valid until release.

    The slot is shared by every trainer and must not be written, but the read-only flag stays
    False: torch refuses read-only CUDA arrays ("the read only flag is not supported", seen
    with torch 2.11 on the GPU machine). Nothing here writes into the tensor."""

    def __init__(self, view):
        shape = tuple(int(view.shape[i]) for i in range(view.ndim))
        self.__cuda_array_interface__ = {"shape": shape, "typestr": TYPESTR[view.dtype],
                                         "data": (int(view.data), False), "version": 3,
                                         "strides": None, "stream": None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim", required=True)
    ap.add_argument("--address", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--samples", type=int, required=True)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device: torch.cuda.is_available() is False")
        return 77
    lib = ctypes.CDLL(a.shim)
    lib.bcd_attach.restype = ctypes.c_void_p
    lib.bcd_attach.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_char_p, ctypes.c_int]
    lib.bcd_next.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(BatchOut), ctypes.c_char_p,
                             ctypes.c_int]
    lib.bcd_release.argtypes = [ctypes.c_void_p]
    lib.bcd_detach.argtypes = [ctypes.c_void_p]
    lib.bcd_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                              ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int)]
    err = ctypes.create_string_buffer(1024)
    torch.cuda.init()
    trainer = lib.bcd_attach(a.address.encode(), 0, a.batch_size, a.epochs, 0, err, len(err))
    if not trainer:
        print("FAIL: " + err.value.decode())
        return 1
    stream = torch.cuda.current_stream()
    seen, bad_bytes, not_aliased, batches, losses = {}, 0, 0, 0, []
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(8, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    t0 = time.time()
    out = BatchOut()
    while True:
        r = lib.bcd_next(trainer, ctypes.c_void_p(stream.cuda_stream), ctypes.byref(out), err, len(err))
        if r == 0:
            break
        if r < 0:
            print("FAIL: next: " + err.value.decode())
            return 1
        images = torch.as_tensor(DeviceArray(out.images), device="cuda")
        labels = torch.as_tensor(DeviceArray(out.labels), device="cuda")
        not_aliased += images.data_ptr() != out.images.data
        n = int(out.size)
        host = np.ctypeslib.as_array(ctypes.cast(out.host_images, ctypes.POINTER(ctypes.c_uint8)),
                                     shape=(int(out.images.nbytes),))
        device_bytes = images.view(torch.uint8).reshape(-1).cpu().numpy()  # ordered after the wait
        bad_bytes += int(np.count_nonzero(device_bytes != host))
        for i in range(n):
            seen.setdefault(int(out.epoch), []).append(int(out.ids[i]))
        x = images.float() / 255.0
        if x.dim() == 4 and x.shape[-1] == 3:  # NHWC
            x = x.permute(0, 3, 1, 2)
        loss = torch.nn.functional.cross_entropy(model(x), labels.long() % 10)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
        lib.bcd_release(trainer)  # after the step's work on this stream
        batches += 1
    stats = (ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int())
    lib.bcd_stats(trainer, *(ctypes.byref(s) for s in stats))
    lib.bcd_detach(trainer)
    torch.cuda.synchronize()
    epochs_ok = len(seen) == a.epochs and all(sorted(v) == sorted(set(v)) and len(v) == a.samples
                                              for v in seen.values())
    result = {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": np.__version__,
              "gpu": torch.cuda.get_device_name(0), "batches": batches, "epochs": len(seen),
              "exactly_once": epochs_ok, "bad_bytes": bad_bytes, "not_aliased": not_aliased,
              "handles_opened": stats[1].value, "lane": stats[2].value,
              "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
              "seconds": round(time.time() - t0, 2)}
    line = json.dumps(result)
    print(line)
    open(a.json, "w").write(line + "\n")
    if not epochs_ok or bad_bytes or not_aliased or not batches:
        print(f"FAIL: exactly_once={epochs_ok} bad_bytes={bad_bytes} not_aliased={not_aliased}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
