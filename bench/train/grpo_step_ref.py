#!/usr/bin/python3
# The reference side of bench/train/grpo_step_bench: one GRPO step (old-logprob forward without
# gradient, forward + backward of the PPO-clip token-mean loss, AdamW step) on the same Qwen2 model and
# batch, written the way a PyTorch user would (padded batch, HF-style eager attention with repeat_kv,
# full logits + log_softmax). Run with Debian's python3-torch; reads the weights with json + struct +
# torch.frombuffer (no safetensors module). Prints one JSON line with the timings.
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from torch_safetensors import load_safetensors  # noqa: E402


class Qwen2:
    def __init__(self, model_dir):
        with open(model_dir + "/config.json") as f:
            self.c = json.load(f)
        w = load_safetensors(model_dir + "/model.safetensors", "grpo_step_ref")
        self.w = {k: v.requires_grad_(True) for k, v in w.items()}
        c = self.c
        self.heads = c["num_attention_heads"]
        self.kv_heads = c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        self.eps = c["rms_norm_eps"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.inv_freq = inv
        self.lm_head = "lm_head.weight" if "lm_head.weight" in self.w else "model.embed_tokens.weight"

    def parameters(self):
        return list(self.w.values())

    def rms(self, x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(var + self.eps))

    def rope(self, positions):
        freqs = positions.float()[..., None] * self.inv_freq  # (B, L, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]  # (B, 1, L, D)

    @staticmethod
    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def forward_logprobs(self, ids, positions, mask_add):
        """ids, positions: (B, L); mask_add: (B, 1, L, L) 0 / -inf. Returns (B, L-1) target logprobs."""
        w = self.w
        b, l = ids.shape
        h = w["model.embed_tokens.weight"][ids]
        cos, sin = self.rope(positions)
        rep = self.heads // self.kv_heads
        for i in range(self.c["num_hidden_layers"]):
            p = "model.layers.%d." % i
            x = self.rms(h, w[p + "input_layernorm.weight"])
            q = torch.nn.functional.linear(x, w[p + "self_attn.q_proj.weight"], w[p + "self_attn.q_proj.bias"])
            k = torch.nn.functional.linear(x, w[p + "self_attn.k_proj.weight"], w[p + "self_attn.k_proj.bias"])
            v = torch.nn.functional.linear(x, w[p + "self_attn.v_proj.weight"], w[p + "self_attn.v_proj.bias"])
            q = q.view(b, l, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(b, l, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(b, l, self.kv_heads, self.head_dim).transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            k = k.repeat_interleave(rep, dim=1)  # HF repeat_kv
            v = v.repeat_interleave(rep, dim=1)
            scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim) + mask_add
            probs = torch.softmax(scores.float(), dim=-1)
            o = torch.matmul(probs, v).transpose(1, 2).reshape(b, l, self.heads * self.head_dim)
            h = h + torch.nn.functional.linear(o, w[p + "self_attn.o_proj.weight"])
            x = self.rms(h, w[p + "post_attention_layernorm.weight"])
            gate = torch.nn.functional.linear(x, w[p + "mlp.gate_proj.weight"])
            up = torch.nn.functional.linear(x, w[p + "mlp.up_proj.weight"])
            h = h + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, w[p + "mlp.down_proj.weight"])
        h = self.rms(h, w["model.norm.weight"])
        logits = torch.nn.functional.linear(h, w[self.lm_head])
        logp = torch.log_softmax(logits.float(), dim=-1)
        return logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)


def main():
    spec = json.load(open(sys.argv[1]))
    torch.set_num_threads(spec["threads"])
    model = Qwen2(spec["model_dir"])
    samples = spec["samples"]
    b = len(samples)
    l = max(len(s["token_ids"]) for s in samples)
    ids = torch.zeros(b, l, dtype=torch.int64)
    mask = torch.zeros(b, l - 1)
    old_behaviour = torch.zeros(b, l - 1)
    adv = torch.zeros(b, l - 1)
    valid = torch.zeros(b, l, dtype=torch.bool)
    for i, s in enumerate(samples):
        n = len(s["token_ids"])
        ids[i, :n] = torch.tensor(s["token_ids"])
        valid[i, :n] = True
        mask[i, :n - 1] = torch.tensor(s["loss_mask"][1:], dtype=torch.float32)
        adv[i, :n - 1] = s["advantage"]
    positions = torch.arange(l)[None].expand(b, l)
    causal = torch.ones(l, l, dtype=torch.bool).tril()
    allowed = causal[None] & valid[:, None, :]
    mask_add = torch.zeros(b, 1, l, l).masked_fill(~allowed[:, None], float("-inf"))
    clip_low, clip_high, clip_c = spec["clip_low"], spec["clip_high"], spec["clip_c"]
    opt = torch.optim.AdamW(model.parameters(), lr=spec["lr"], betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=spec["weight_decay"])
    tokens = float(mask.sum())
    times = []
    first_old_mean = None
    profile = os.environ.get("AJET_PROFILE_PY")  # per-op table of one step, for comparing with ours
    for rep in range(spec["warmup"] + spec["reps"]):
        prof = None
        if profile and rep == spec["warmup"]:
            prof = torch.autograd.profiler.profile()
            prof.__enter__()
        t0 = time.perf_counter()
        with torch.no_grad():
            old = model.forward_logprobs(ids, positions, mask_add)
        lp = model.forward_logprobs(ids, positions, mask_add)
        ratio = torch.exp(torch.clamp(lp - old, -20, 20))
        pg1 = -adv * ratio
        pg2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
        clip_max = torch.maximum(pg1, pg2)
        pg = torch.where(adv < 0, torch.minimum(clip_max, -adv * clip_c), clip_max)
        loss = (pg * mask).sum() / tokens
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec["grad_clip"])
        opt.step()
        elapsed = time.perf_counter() - t0
        if prof is not None:
            prof.__exit__(None, None, None)
            with open(profile, "w") as f:
                f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
        if first_old_mean is None:
            first_old_mean = float((old * mask).sum() / tokens)
        if rep >= spec["warmup"]:
            times.append(elapsed)
    print(json.dumps({"step_seconds": times, "trained_tokens": tokens, "padded_tokens": b * l,
                      "first_old_logprob_mean": first_old_mean, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
