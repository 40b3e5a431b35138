#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/fuzz_tokenizer_json.cc into fuzz/corpus/tokenizer_json/: small
byte-level BPE tokenizer.json files (valid in the layouts GPT-2, Qwen2/3 and our trainer use) and
broken ones (each with one problem the loader must report). Deterministic; rerun after changing it."""
import json
import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer_json")
QWEN_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def byte_chars():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]  # in GPT-2 order: id i is this character


def base(merges=(("h", "e"), ("l", "l"), ("he", "ll"), ("\u0120", "w")), pairs=True):
    vocab = {c: i for i, c in enumerate(byte_chars())}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "added_tokens": [
            {"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True},
            {"id": len(vocab) + 1, "content": "<tool_call>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False},
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_RE}, "behavior": "Isolated", "invert": False}, level]},
        "post_processor": level,
        "decoder": level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab,
                  "merges": [[a, b] if pairs else a + " " + b for a, b in merges]},
    }


def write(name, obj_or_text):
    text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text, ensure_ascii=False)
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        f.write(text)


def main():
    os.makedirs(HERE, exist_ok=True)
    write("valid_qwen_layout", base())
    write("valid_string_merges", base(pairs=False))
    t = base()
    t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    t["normalizer"] = None
    write("valid_gpt2_layout", t)
    t = base()
    t["model"]["ignore_merges"] = True
    t["model"]["vocab"]["hello"] = len(t["model"]["vocab"])
    write("valid_ignore_merges", t)
    t = base()
    t["added_tokens"][1].update({"lstrip": True, "rstrip": True, "single_word": True, "normalized": True})
    t["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFKC"}]}
    write("valid_added_flags", t)
    t = base()
    t["pre_tokenizer"]["pretokenizers"][0].update({"pattern": {"String": "-"}, "behavior": "MergedWithNext"})
    write("valid_split_string", t)

    full = json.dumps(base(), ensure_ascii=False)
    write("bad_truncated", full[: len(full) // 2])
    for kind in ("WordPiece", "Unigram"):
        t = base()
        t["model"]["type"] = kind
        write("bad_model_" + kind.lower(), t)
    t = base()
    t["model"]["merges"].append(["zz", "q"])
    write("bad_merge_unknown_token", t)
    t = base()
    t["model"]["merges"].append("nospace")
    write("bad_merge_format", t)
    t = base()
    del t["model"]
    write("bad_missing_model", t)
    t = base()
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"
    write("bad_regex", t)
    t = base()
    t["pre_tokenizer"] = {"type": "Whitespace"}
    write("bad_pretokenizer", t)
    t = base()
    t["model"]["vocab"]["big"] = 2**40
    write("bad_huge_id", t)
    t = base()
    t["model"]["vocab"]["dup"] = 3
    write("bad_duplicate_id", t)
    write("bad_not_object", "[1, 2, 3]")


if __name__ == "__main__":
    main()
