#!/usr/bin/env python3
"""Synthetic corpus for the HTTP load benchmark (benches/http/retrieve_load.sh).

`corpus.py load URL TOKEN N` upserts N seeded documents (~110 words each, so one chunk of the
default chunking) through `PUT /v1/admin/documents` in batches of 500, two at a time (the default
per-tenant limit). `corpus.py queries N` prints N seeded queries (3-5 words), one per line.
Words follow a Zipf-like law over a 20,000-word vocabulary, so posting lists have realistic
skew. Standard library only.
"""
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request

VOCABULARY = 20_000
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "an", "el", "or", "ub", "is", "en", "qu", "pra"]


def word(rank):
    letters, value = [], rank + 1
    while value:
        value, digit = divmod(value, len(SYLLABLES))
        letters.append(SYLLABLES[digit])
    return "".join(letters)


WORDS = [word(rank) for rank in range(VOCABULARY)]
WEIGHTS = [1.0 / (rank + 1) ** 1.05 for rank in range(VOCABULARY)]


def sentence(rng, length):
    return " ".join(rng.choices(WORDS, WEIGHTS, k=length)).capitalize() + "."


def document(index):
    rng = random.Random(index)
    text = " ".join(sentence(rng, rng.randint(8, 18)) for _ in range(8))
    return {"doc_id": f"d{index}", "title": f"Document {index}", "text": text,
            "acl": {"groups": ["all", f"g{index % 10}"], "users": []}}


def put(url, token, batch):
    """One batch; a 503 (overloaded, or the node still starting) is retried after its Retry-After."""
    body = json.dumps({"documents": [document(index) for index in batch]}).encode()
    for attempt in range(60):
        request = urllib.request.Request(f"{url}/v1/admin/documents", data=body, method="PUT",
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                response.read()
                return
        except urllib.error.HTTPError as error:
            if error.code != 503 or attempt == 59:
                raise RuntimeError(f"PUT /v1/admin/documents: {error.code} {error.read()[:300]!r}") from error
            time.sleep(float(error.headers.get("Retry-After") or 1))


def load(url, token, count):
    batches = [range(start, min(start + 500, count)) for start in range(0, count, 500)]
    lock = threading.Lock()
    failures = []

    def worker():
        while True:
            with lock:
                if not batches or failures:
                    return
                batch = batches.pop()
            try:
                put(url, token, batch)
            except (RuntimeError, OSError) as error:
                failures.append(error)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        sys.exit(f"corpus load failed: {failures[0]}")


def queries(count):
    rng = random.Random(7)
    for _ in range(count):
        print(" ".join(rng.choices(WORDS[:5000], WEIGHTS[:5000], k=rng.randint(3, 5))))


if __name__ == "__main__":
    if sys.argv[1] == "load":
        load(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        queries(int(sys.argv[2]))
