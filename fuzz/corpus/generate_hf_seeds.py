#!/usr/bin/env python3
"""Writes the seed corpora of fuzz_safetensors and fuzz_hf_config (small valid and invalid inputs).

Run from anywhere: python3 fuzz/corpus/generate_hf_seeds.py. Outputs are committed; rerun only to
change them.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def st(header, data=b"", pad=True, raw_header=None):
    text = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad and raw_header is None:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def safetensors_seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    every = b""
    header = {"__metadata__": {"format": "pt"}}
    for name, dtype, shape, raw in [
        ("w.f32", "F32", [2, 2], f32),
        ("w.f16", "F16", [2], struct.pack("<2e", 1.0, -0.5)),
        ("w.bf16", "BF16", [2], b"\x80\x3f\x00\xc0"),
        ("ids", "I64", [1], struct.pack("<q", -1)),
        ("n", "I32", [2], struct.pack("<2i", 7, -7)),
        ("u", "U8", [3], b"\x00\x7f\xff"),
        ("mask", "BOOL", [2], b"\x01\x00"),
        ("scalar", "F32", [], struct.pack("<f", 42.0)),
        ("empty", "F32", [0, 4], b""),
    ]:
        header[name] = entry(dtype, shape, len(every), len(every) + len(raw))
        every += raw
    return {
        "valid_every_dtype": st(header, every),
        "valid_unpadded": st({"a": entry("U8", [4], 0, 4)}, b"abcd", pad=False),
        "valid_empty": st({}),
        "valid_metadata_only": st({"__metadata__": {"k": "v", "u": "\u00fc"}}),
        "valid_reversed_header": st({"b": entry("U8", [2], 2, 4), "a": entry("U8", [2], 0, 2)}, b"abcd"),
        "valid_zero_size_shared_offset": st({"z": entry("F32", [0], 0, 0), "a": entry("U8", [1], 0, 1)}, b"a"),
        "bad_short": b"\x02\x00\x00",
        "bad_length_past_end": struct.pack("<Q", 1 << 40) + b"{}",
        "bad_length_over_limit": struct.pack("<Q", 200_000_000) + b"{}",
        "bad_json": st(None, raw_header=b'{"a":{"dtype":'),
        "bad_not_object": st(None, raw_header=b"[1,2]   "),
        "bad_duplicate_key": st(None, raw_header=b'{"a":{},"a":{}}', pad=False),
        "bad_dtype_f64": st({"w": entry("F64", [1], 0, 8)}, b"\x00" * 8),
        "bad_offsets_out_of_range": st({"w": entry("U8", [16], 0, 16)}, b"\x00" * 8),
        "bad_size_mismatch": st({"w": entry("F32", [3], 0, 8)}, b"\x00" * 8),
        "bad_overlap": st({"a": entry("U8", [8], 0, 8), "b": entry("U8", [8], 4, 12)}, b"\x00" * 12),
        "bad_gap": st({"a": entry("U8", [4], 0, 4), "b": entry("U8", [4], 8, 12)}, b"\x00" * 12),
        "bad_negative_shape": st(None, raw_header=b'{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}'),
        "bad_overflow_shape": st({"a": entry("U8", [1 << 32, 1 << 32, 16], 0, 0)}),
        "bad_metadata_value": st(None, raw_header=b'{"__metadata__":{"n":1}}'),
        "bad_number_overflow": st(None, raw_header=b'{"a":{"dtype":"U8","shape":[1e+600],"data_offsets":[0,0]}}'),
    }


QWEN25 = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936,
}
LLAMA = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 2048,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 32000,
}


def with_(base, **changes):
    out = dict(base)
    for k, v in changes.items():
        if v is ...:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def hf_config_seeds():
    seeds = {
        "valid_qwen2.5_0.5b": QWEN25,
        "valid_qwen3_0.6b": QWEN3,
        "valid_tinyllama": LLAMA,
        "valid_minimal": {"model_type": "qwen2", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
                          "num_hidden_layers": 1, "num_attention_heads": 2},
        "valid_eos_list": with_(LLAMA, eos_token_id=[2, 3, 4], dtype="float16", torch_dtype=...),
        "bad_rope_scaling": with_(LLAMA, rope_scaling={"rope_type": "llama3", "factor": 32.0}),
        "bad_missing_hidden": with_(QWEN25, hidden_size=...),
        "bad_indivisible": with_(QWEN25, hidden_size=900),
        "bad_kv_heads": with_(QWEN25, num_key_value_heads=3),
        "bad_act": with_(QWEN25, hidden_act="gelu"),
        "bad_float_size": with_(QWEN25, hidden_size=1e300),
        "bad_eos_range": with_(QWEN3, eos_token_id=[1, 999999]),
        "bad_model_type": with_(QWEN25, model_type="mistral"),
    }
    out = {k: json.dumps(v, indent=1).encode() for k, v in seeds.items()}
    out["bad_truncated"] = json.dumps(QWEN25).encode()[:57]
    out["bad_not_object"] = b"[1, 2, 3]"
    out["bad_number_overflow"] = b'{"model_type": "qwen2", "hidden_size": 1e+600}'  # found by fuzzing
    return out


def write_all(name, seeds):
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    for file_name, blob in seeds.items():
        with open(os.path.join(folder, file_name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    write_all("safetensors", safetensors_seeds())
    write_all("hf_config", hf_config_seeds())
