#!/usr/bin/python3
"""Independent reference forward pass for the C++ Qwen2/Qwen3/Llama decoder test.

Reads a HF model directory (config.json + model.safetensors, parsed here with json/struct: Debian has
no `safetensors` or `transformers` package), runs the decoder in float64 following the formulas of
transformers' modeling_qwen2.py / modeling_qwen3.py (eager attention, repeat_kv, rotate_half RoPE),
and writes the logits for the given ids as raw little-endian float64, shape (T, V).

usage: reference_forward.py MODEL_DIR IDS_COMMA_SEPARATED OUT_FILE
"""
import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[base + begin : base + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        tensors[name] = t.to(torch.float64)
    return tensors


def expected_names(cfg, n_layers):
    qwen2 = cfg["model_type"] == "qwen2"
    qkv_bias = True if qwen2 else cfg.get("attention_bias", False)
    o_bias = False if qwen2 else cfg.get("attention_bias", False)
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not cfg.get("tie_word_embeddings", False):
        names.add("lm_head.weight")
    for i in range(n_layers):
        p = f"model.layers.{i}."
        names |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names.add(p + f"self_attn.{proj}.weight")
        for proj in ("q_proj", "k_proj", "v_proj"):
            if qkv_bias:
                names.add(p + f"self_attn.{proj}.bias")
        if o_bias:
            names.add(p + "self_attn.o_proj.bias")
        if cfg["model_type"] == "qwen3":
            names |= {p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"}
        for proj in ("gate_proj", "up_proj", "down_proj"):
            names.add(p + f"mlp.{proj}.weight")
    return names


def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def forward(cfg, w, ids):
    n_layers = cfg["num_hidden_layers"]
    h_heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", h_heads)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // h_heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    n_rep = h_heads // kv_heads
    T = len(ids)

    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    cos, sin = emb.cos()[None], emb.sin()[None]  # (1, T, D), broadcast over heads

    x = w["model.embed_tokens.weight"][torch.tensor(ids)]  # (T, C)
    causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(n_layers):
        p = f"model.layers.{i}."
        g = lambda name: w.get(p + name)
        hn = rms_norm(x, g("input_layernorm.weight"), eps)
        q = linear(hn, g("self_attn.q_proj.weight"), g("self_attn.q_proj.bias")).view(T, h_heads, head_dim)
        k = linear(hn, g("self_attn.k_proj.weight"), g("self_attn.k_proj.bias")).view(T, kv_heads, head_dim)
        v = linear(hn, g("self_attn.v_proj.weight"), g("self_attn.v_proj.bias")).view(T, kv_heads, head_dim)
        if cfg["model_type"] == "qwen3":
            q = rms_norm(q, g("self_attn.q_norm.weight"), eps)
            k = rms_norm(k, g("self_attn.k_norm.weight"), eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # (heads, T, D)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k[:, None].expand(kv_heads, n_rep, T, head_dim).reshape(h_heads, T, head_dim)  # repeat_kv
        v = v[:, None].expand(kv_heads, n_rep, T, head_dim).reshape(h_heads, T, head_dim)
        scores = q @ k.transpose(1, 2) / math.sqrt(head_dim) + causal  # (H, T, T)
        attn = torch.softmax(scores, dim=-1) @ v  # (H, T, D)
        attn = attn.transpose(0, 1).reshape(T, h_heads * head_dim)
        x = x + linear(attn, g("self_attn.o_proj.weight"), g("self_attn.o_proj.bias"))
        hn = rms_norm(x, g("post_attention_layernorm.weight"), eps)
        act = torch.nn.functional.silu(linear(hn, g("mlp.gate_proj.weight"))) * linear(hn, g("mlp.up_proj.weight"))
        x = x + linear(act, g("mlp.down_proj.weight"))
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return x @ head.T  # (T, V)


def main():
    model_dir, ids_arg, out_path = sys.argv[1:4]
    with open(f"{model_dir}/config.json") as f:
        cfg = json.load(f)
    w = read_safetensors(f"{model_dir}/model.safetensors")
    expected = expected_names(cfg, cfg["num_hidden_layers"])
    if set(w) != expected:
        sys.exit(f"tensor names differ from the HF layout: missing {sorted(expected - set(w))}, "
                 f"unexpected {sorted(set(w) - expected)}")
    ids = [int(t) for t in ids_arg.split(",")]
    logits = forward(cfg, w, ids).contiguous()
    with open(out_path, "wb") as f:
        f.write(logits.numpy().astype("<f8").tobytes())
    print(f"reference logits {tuple(logits.shape)} max |x| {logits.abs().max().item():.4f}")


if __name__ == "__main__":
    main()
