#!/usr/bin/env python3
"""Measures a language model as a support verifier on SciFact claims, through any
OpenAI-compatible chat endpoint (e.g. the local model of shared/tools/start-llm.sh).

Each sampled claim is judged against the text a quoting generator would cite: its rationale
sentences (SUPPORT and CONTRADICT rows) or, for NOT_ENOUGH_INFO rows, the abstract sentence that
shares the most content words with it. The model answers {"verdict": "yes"|"no"} under a JSON
schema; "yes" counts as supported. Prints precision, recall and F1 against label SUPPORT with
95 % bootstrap intervals (2,000 resamples over rows), the answers per label, and the latency.

A measurement for issue 13 item 4, not part of the server: the server's verifier is
`SupportVerifier` (src/answer/verifier.rs).

  eval "$(../shared/tools/start-llm.sh start)"   # LLM_BASE_URL=...
  python3 benches/verifier/llm_judge.py --support 99 --contradict 52 --nei 89 --seed 13
"""
import argparse
import json
import os
import random
import re
import sys
import time
import urllib.request

PROMPT = (
    "You check a claim against a passage from a scientific paper. Answer yes if the passage "
    "supports the claim (it says the same thing, possibly in other words), no otherwise. "
    "Answer with JSON only."
)
SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["verdict"],
    "additionalProperties": False,
}
STOP = set("a an the of in on and or to is are was were be by for with as at from that this these those it its not no".split())


def sentences(text):
    # The file glues each abstract into one string: split after . ! ? before an upper-case
    # letter, ( or [ (as `warrant eval verifier --quoted` does).
    return [part for part in re.split(r"(?<=[.!?])(?=[A-Z(\[])", text) if part.strip()]


def content_words(text):
    return {word for word in re.findall(r"[a-z0-9]+", text.lower()) if word not in STOP}


def evidence(row):
    parts = sentences(" ".join(row["sentences"]))
    picked = [parts[index] for index in row["evidence_sentences"] if index < len(parts)]
    if picked:
        return " ".join(picked)
    claim = content_words(row["claim"])
    return max(parts, key=lambda part: len(claim & content_words(part)))


def ask(base_url, model, passage, claim):
    body = {
        "model": model,
        "temperature": 0,
        "max_tokens": 20,
        "messages": [
            {"role": "system", "content": PROMPT},
            {"role": "user", "content": f"Passage:\n<<<\n{passage}\n>>>\nClaim: {claim}"},
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "verdict", "schema": SCHEMA, "strict": True}},
    }
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        reply = json.load(response)
    return json.loads(reply["choices"][0]["message"]["content"])["verdict"], reply.get("usage", {}).get("prompt_tokens")


def scores(rows):
    true_positive = sum(1 for row in rows if row["verdict"] == "yes" and row["label"] == "SUPPORT")
    passed = sum(1 for row in rows if row["verdict"] == "yes")
    support = sum(1 for row in rows if row["label"] == "SUPPORT")
    precision = true_positive / passed if passed else 0.0
    recall = true_positive / support if support else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data/scifact-claims/train.jsonl")
    parser.add_argument("--support", type=int, default=99)
    parser.add_argument("--contradict", type=int, default=52)
    parser.add_argument("--nei", type=int, default=89)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--exclude", help="a previous --out file whose claims are left out")
    parser.add_argument("--out", help="write every judged row here (JSON)")
    args = parser.parse_args()
    base_url = os.environ.get("LLM_BASE_URL", "http://127.0.0.1:18080/v1")
    model = os.environ.get("LLM_MODEL_NAME", "local")
    rows = [json.loads(line) for line in open(args.data)]
    if args.exclude:
        used = {row["claim"] for row in json.load(open(args.exclude))}
        rows = [row for row in rows if row["claim"] not in used]
    rng = random.Random(args.seed)
    sample = []
    for label, count in (("SUPPORT", args.support), ("CONTRADICT", args.contradict), ("NOT_ENOUGH_INFO", args.nei)):
        pool = [row for row in rows if row["label"] == label]
        rng.shuffle(pool)
        sample += pool[:count]
    judged = []
    for row in sample:
        passage = evidence(row)
        started = time.time()
        verdict, prompt_tokens = ask(base_url, model, passage, row["claim"])
        judged.append({
            "label": row["label"], "verdict": verdict, "seconds": time.time() - started,
            "prompt_tokens": prompt_tokens, "claim": row["claim"], "passage": passage,
        })
        print(row["label"], verdict, f"{judged[-1]['seconds']:.1f}s", file=sys.stderr, flush=True)
    if args.out:
        json.dump(judged, open(args.out, "w"))
    precision, recall, f1 = scores(judged)
    resamples = []
    bootstrap = random.Random(0)
    for _ in range(2000):
        resamples.append(scores([bootstrap.choice(judged) for _ in judged]))
    def interval(position):
        values = sorted(sample[position] for sample in resamples)
        return values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]
    seconds = sorted(row["seconds"] for row in judged)
    tokens = sorted(row["prompt_tokens"] or 0 for row in judged)
    print(json.dumps({
        "rows": len(judged),
        "precision": round(precision, 3), "precision_95": [round(v, 3) for v in interval(0)],
        "recall": round(recall, 3), "recall_95": [round(v, 3) for v in interval(1)],
        "f1": round(f1, 3), "f1_95": [round(v, 3) for v in interval(2)],
        "yes_by_label": {label: sum(1 for row in judged if row["label"] == label and row["verdict"] == "yes")
                         for label in ("SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO")},
        "rows_by_label": {label: sum(1 for row in judged if row["label"] == label)
                          for label in ("SUPPORT", "CONTRADICT", "NOT_ENOUGH_INFO")},
        "seconds_p50": round(seconds[len(seconds) // 2], 2),
        "prompt_tokens_p50": tokens[len(tokens) // 2],
    }))


if __name__ == "__main__":
    main()
