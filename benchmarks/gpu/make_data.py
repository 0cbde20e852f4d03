"""A tiny training set made on the spot for scripts/gpu_probe.sh: generated text, a SentencePiece
tokenizer trained on it (the `sentencepiece` package), and Megatron-DeepSpeed's own
tools/preprocess_data.py turning it into the indexed dataset that launch.sh's DATA_PATH names.

The text only has to exist: step time and memory do not depend on what the tokens say. The tokenizer's
vocabulary (8,000) is padded by Megatron to --make-vocab-size-divisible-by, which the planner sets so the
padded size is the model's own (32,000 for TinyLlama), so the embedding is the planned one.

    python benchmarks/gpu/make_data.py MEGATRON_DS_DIR OUT_DIR
prints the DATA_PATH and TOKENIZER_MODEL to use.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

DOCUMENTS = 4000
WORDS_PER_DOCUMENT = (200, 1200)
TOKENIZER_VOCAB = 8000


def generated_words(rng: random.Random, n: int) -> list[str]:
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiou"] + ["th", "st", "er", "in", "on"]
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def write_corpus(path: Path, seed: int = 1234) -> None:
    rng = random.Random(seed)
    lexicon = generated_words(rng, 30_000)
    with path.open("w") as f:
        for _ in range(DOCUMENTS):
            words = rng.choices(lexicon, k=rng.randint(*WORDS_PER_DOCUMENT))
            f.write(json.dumps({"text": " ".join(words) + "."}) + "\n")


def train_tokenizer(corpus: Path, prefix: Path) -> Path:
    import sentencepiece as spm
    text = prefix.with_suffix(".txt")
    with corpus.open() as src, text.open("w") as dst:
        for line in src:
            dst.write(json.loads(line)["text"] + "\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(prefix), vocab_size=TOKENIZER_VOCAB,
                                   model_type="bpe", hard_vocab_limit=False, bos_id=1, eos_id=2, pad_id=3,
                                   unk_id=0, minloglevel=2, num_threads=8)
    return prefix.with_suffix(".model")


def main(megatron_ds_dir: str, out_dir: str) -> None:
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.jsonl"
    write_corpus(corpus)
    model = train_tokenizer(corpus, out / "tokenizer")
    subprocess.run([sys.executable, str(Path(megatron_ds_dir) / "tools" / "preprocess_data.py"),
                    "--input", str(corpus), "--output-prefix", str(out / "corpus"),
                    "--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model", str(model),
                    "--append-eod", "--workers", "8"], check=True)
    print(f"DATA_PATH={out / 'corpus_text_document'}")
    print(f"TOKENIZER_MODEL={model}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
