# The Python references of the benchmarks (bench/engine/rollout_ref.py, bench/train/grpo_step_ref.py)
# read a model directory's float32 safetensors with json + struct into torch tensors: Debian has no
# safetensors module. One reader for both. (tests/model/reference_forward.py keeps its own: it is the
# independent reference the C++ decoder is tested against and runs alone in scripts/gpu-check.sh.)
import json
import struct
import sys

import torch


def load_safetensors(path, who):
    """{name: float32 tensor} of the file at `path`; exits naming `who` on a tensor that is not F32."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{who}: {path}: tensor {name} is {info['dtype']}, only F32 is supported")
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=torch.float32)
        out[name] = t.view(info["shape"]).clone()
    return out
