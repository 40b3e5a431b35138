#!/usr/bin/env python3
"""An independent safetensors reader and writer (json + struct only) for cross-checking ours.

  safetensors_ref.py read FILE           prints {"metadata", "header_len", "tensors": [...]} as JSON,
                                         tensors in header order with decoded values; exits 1 on a
                                         file that breaks the format.
  safetensors_ref.py write FILE [--no-pad]
                                         writes a fixed set of tensors (header order differs from
                                         data order, metadata included) and prints what it wrote.
"""
import json
import struct
import sys

FORMATS = {"F32": ("f", 4), "F16": ("e", 2), "I64": ("q", 8), "I32": ("i", 4), "U8": ("B", 1), "BOOL": ("?", 1)}


def decode(dtype, raw):
    if dtype == "BF16":  # the top half of a float32
        return [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    code, size = FORMATS[dtype]
    return list(struct.unpack("<%d%s" % (len(raw) // size, code), raw))


def encode(dtype, values):
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    code, _ = FORMATS[dtype]
    return struct.pack("<%d%s" % (len(values), code), *values)


def element_size(dtype):
    return 2 if dtype == "BF16" else FORMATS[dtype][1]


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", None)
    spans = sorted((tuple(v["data_offsets"]), k) for k, v in header.items())
    position = 0
    for (begin, end), name in spans:
        if begin != position:
            raise SystemExit("tensor %s starts at %d, expected %d" % (name, begin, position))
        position = end
    if position != len(data):
        raise SystemExit("data section %d bytes, tensors cover %d" % (len(data), position))
    tensors = []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        count = 1
        for d in info["shape"]:
            count *= d
        if count * element_size(info["dtype"]) != end - begin:
            raise SystemExit("tensor %s: size mismatch" % name)
        tensors.append({"name": name, "dtype": info["dtype"], "shape": info["shape"],
                        "values": decode(info["dtype"], data[begin:end])})
    raw_header = blob[8:8 + n]
    padding = len(raw_header) - len(raw_header.rstrip(b" "))
    print(json.dumps({"metadata": metadata, "header_len": n, "padding": padding, "tensors": tensors}))


def write(path, pad):
    # (name, dtype, shape, values); data is laid out in this order, the header lists it reversed.
    tensors = [
        ("model.embed_tokens.weight", "F32", [2, 2], [0.25, -1.5, 3.0, 1e-3]),
        ("layer.f16", "F16", [3], [1.0, -0.333251953125, 65504.0]),
        ("layer.bf16", "BF16", [2], [2.5, -0.0078125]),
        ("ids", "I64", [2], [-(2 ** 40), 123456789012]),
        ("counts", "I32", [1, 2], [-7, 2 ** 31 - 1]),
        ("bytes", "U8", [3], [0, 128, 255]),
        ("mask", "BOOL", [2, 1], [True, False]),
        ("scalar", "F32", [], [7.0]),
        ("nothing", "I32", [0], []),
    ]
    header = {"__metadata__": {"format": "pt", "source": "python"}}
    data = b""
    entries = []
    for name, dtype, shape, values in tensors:
        raw = encode(dtype, values)
        entries.append((name, {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}))
        data += raw
    for name, entry in reversed(entries):
        header[name] = entry
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    print(json.dumps([{"name": n, "dtype": d, "shape": s, "values": v} for n, d, s, v in tensors]))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "read":
        read(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "write":
        write(sys.argv[2], "--no-pad" not in sys.argv[3:])
    else:
        raise SystemExit(__doc__)
