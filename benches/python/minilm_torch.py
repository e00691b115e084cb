"""PyTorch reference for the MiniLM figures in BENCHMARKS.md (run side by side with candle).

Embeds the same texts as `measure_latency_and_throughput` in src/embed/minilm.rs with the same
semantics (WordPiece truncation at 256, padding to the batch's longest, mean pooling over the
mask, L2 norm), batch size and thread count, and prints the same two lines.

    python benches/python/minilm_torch.py models/all-MiniLM-L6-v2 [--threads 2] [--vectors out.json]

Needs `torch` and `transformers` from PyPI (kept out of the Rust build).
"""

import argparse
import json
import statistics
import time

import torch
from transformers import AutoModel, AutoTokenizer

QUERIES = [
    "who approves vacation requests",
    "quarterly revenue in europe",
    "how do I rotate an API key",
    "parental leave policy",
    "what is the on-call rotation for the payments team",
]
SENTENCE = (
    "The committee reviewed the quarterly access-control audit and found that several "
    "service accounts still held write permissions on archived document collections. "
)
PASSAGES = [f"Passage {index}. {SENTENCE * 7}" for index in range(96)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModel.from_pretrained(args.model_dir).eval()

    @torch.inference_mode()
    def embed(texts):
        batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        return torch.nn.functional.normalize(pooled, dim=-1)

    for query in QUERIES:
        embed([query])
    millis = []
    for round_ in range(args.rounds):
        started = time.perf_counter()
        embed([QUERIES[round_ % len(QUERIES)]])
        millis.append((time.perf_counter() - started) * 1e3)
    millis.sort()
    p99 = millis[round((len(millis) - 1) * 0.99)]
    print(f"single short query: p50 {statistics.median(millis):.2f} ms, p99 {p99:.2f} ms (n = {len(millis)})")

    tokens = len(tokenizer(PASSAGES[0], truncation=True, max_length=256)["input_ids"])
    started = time.perf_counter()
    for start in range(0, len(PASSAGES), 32):
        embed(PASSAGES[start : start + 32])
    seconds = time.perf_counter() - started
    print(
        f"passages of {tokens} tokens, batches of 32: {len(PASSAGES) / seconds:.1f} passages/s "
        f"({len(PASSAGES)} in {seconds:.2f} s)"
    )


if __name__ == "__main__":
    main()
