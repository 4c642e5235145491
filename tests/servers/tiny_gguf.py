"""Write a tiny Llama as a GGUF file for llama.cpp's server, offline: ``python tiny_gguf.py OUT.gguf``.

No hub download and no conversion: the file is written directly with the ``gguf`` package (the writer
llama.cpp's own converters use). The vocabulary is a SentencePiece-style ("llama") one built here: the three
control tokens, the 256 byte-fallback tokens ``<0x00>``…``<0xFF>`` and one token per printable ASCII character
(the space as ``▁``), so any ASCII prompt tokenizes to one token per character. The model is a 2-layer Llama
(hidden 64, 4 heads, 2 KV heads) with seeded random weights, about 0.5 MB in float32.

Random weights would stop a stream wherever they happen to pick the end-of-sequence token, and a byte token
on its own is half a UTF-8 character the server holds back; so one dimension of the residual stream is made a
constant (its embedding column is 1, nothing writes to it) and the output rows of every token that is not a
printable character read it with a large negative weight. Every generated token is then one printable
character, one stream event each, and every request runs to its ``max_tokens``: the timing is the engine's
real work on a model that says nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path

N_EMBD = 256
N_FF = 512
N_LAYER = 4
N_HEAD = 4
N_HEAD_KV = 2
N_CTX = 2048
CONTROL = ("<unk>", "<s>", "</s>")
PRINTABLE = ["▁" if c == " " else c for c in map(chr, range(32, 127))]


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, their SentencePiece scores and llama.cpp's token types (gguf.TokenType values)."""
    import gguf

    tokens = list(CONTROL) + [f"<0x{b:02X}>" for b in range(256)] + PRINTABLE
    types = ([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
             + [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * len(PRINTABLE))
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(PRINTABLE))]
    return tokens, scores, [int(t) for t in types]


def build(out: Path, seed: int = 0, n_embd: int = N_EMBD, n_ff: int = N_FF, n_layer: int = N_LAYER) -> Path:
    import gguf
    import numpy as np

    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def rand(*shape: int) -> "np.ndarray":
        return (rng.standard_normal(shape) * 0.5 / np.sqrt(shape[-1])).astype(np.float32)

    def f16(a: "np.ndarray") -> "np.ndarray":  # matrices in float16 (half the file), norms stay float32
        return a.astype(np.float16)

    out.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("gpusleuth-tiny-llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(n_embd // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:")

    # dimension 0 of the residual stream is a constant 1: set by the embedding, written by no layer
    embd = rand(n_vocab, n_embd)
    embd[:, 0] = 1.0
    w.add_tensor("token_embd.weight", f16(embd))
    for i in range(n_layer):
        attn_out, ffn_down = rand(n_embd, n_embd), rand(n_embd, n_ff)
        attn_out[0, :] = 0.0
        ffn_down[0, :] = 0.0
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", f16(rand(n_embd, n_embd)))
        w.add_tensor(f"blk.{i}.attn_k.weight", f16(rand(n_embd // N_HEAD * N_HEAD_KV, n_embd)))
        w.add_tensor(f"blk.{i}.attn_v.weight", f16(rand(n_embd // N_HEAD * N_HEAD_KV, n_embd)))
        w.add_tensor(f"blk.{i}.attn_output.weight", f16(attn_out))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", f16(rand(n_ff, n_embd)))
        w.add_tensor(f"blk.{i}.ffn_up.weight", f16(rand(n_ff, n_embd)))
        w.add_tensor(f"blk.{i}.ffn_down.weight", f16(ffn_down))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    head = rand(n_vocab, n_embd) * 8.0  # logits of a few units: sampling varies, no token dominates
    head[:, 0] = 0.0
    head[[t != 1 for t in types], 0] = -30.0  # never sample a control or byte token (read the constant)
    w.add_tensor("output.weight", f16(head))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
