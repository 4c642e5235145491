"""Build a tiny Llama for ``transformers serve`` offline: ``python tiny_llama.py OUT_DIR``.

No hub download: a byte-level BPE tokenizer (vocabulary 512) is trained here with ``tokenizers`` on the
text of torch's own ``nn/functional.py`` (any local text would do), a 2-layer Llama (hidden 64) is built
from a config with seeded random weights, and both are saved with a one-line chat template, so
``transformers serve --continuous-batching --device cpu OUT_DIR`` serves ``/v1/chat/completions`` and
``/v1/completions`` on CPU. Its answers are gibberish; their timing is real engine work.
"""
import sys
from pathlib import Path


def build(out: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    source = Path(torch.__file__).parent / "nn" / "functional.py"
    text = [line for line in source.read_text().splitlines() if line.strip()]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                      show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=fast.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(out)
    GenerationConfig(bos_token_id=1, eos_token_id=2, max_new_tokens=64).save_pretrained(out)
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
