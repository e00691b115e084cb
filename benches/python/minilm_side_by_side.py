"""Candle-side MiniLM vs PyTorch on the same texts, interleaved in one run (BENCHMARKS.md).

Each round runs every contender once, in turn: the release test binary(ies) of
`measure_latency_and_throughput` (src/embed/minilm.rs) and minilm_torch.py (same texts, batch
size 32, 2 threads). Prints per-round figures, medians, ratios to PyTorch and the load average.

    cargo test --release --lib embed::minilm --no-run   # prints the test binary's path
    python benches/python/minilm_side_by_side.py --model models/all-MiniLM-L6-v2 \
        --rust after=/path/to/warrant-HASH [--rust before=/copy/of/an/older/binary] --rounds 5
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
QUERY = re.compile(r"single short query: p50 ([0-9.]+) ms")
PASSAGES = re.compile(r"batches of 32: ([0-9.]+) passages/s")


def run(command):
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return float(PASSAGES.search(output).group(1)), float(QUERY.search(output).group(1))


def load():
    with open("/proc/loadavg") as file:
        return float(file.read().split()[0])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--rust", action="append", required=True, help="NAME=test binary")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    contenders = [tuple(spec.split("=", 1)) for spec in args.rust]
    commands = {
        name: [binary, "embed::minilm::tests::measure_latency_and_throughput", "--ignored", "--nocapture"]
        for name, binary in contenders
    }
    commands["pytorch"] = [sys.executable, os.path.join(HERE, "minilm_torch.py"), args.model]
    results = {name: [] for name in commands}
    loads = []
    for round_ in range(args.rounds):
        loads.append(load())
        for name, command in commands.items():
            passages, query = run(command)
            results[name].append((passages, query))
            print(f"round {round_ + 1} {name:8} {passages:6.1f} passages/s  query p50 {query:6.2f} ms  load {load():.2f}")
        loads.append(load())
    torch_passages = statistics.median(p for p, _ in results["pytorch"])
    torch_query = statistics.median(q for _, q in results["pytorch"])
    print(f"load average (1 min) during the run: median {statistics.median(loads):.2f}, "
          f"min {min(loads):.2f}, max {max(loads):.2f}")
    for name, rounds in results.items():
        passages = statistics.median(p for p, _ in rounds)
        query = statistics.median(q for _, q in rounds)
        paired = statistics.median(p / t for (p, _), (t, _) in zip(rounds, results["pytorch"]))
        print(f"{name:8} median {passages:6.1f} passages/s ({passages / torch_passages:.2f}x PyTorch; "
              f"paired per-round median {paired:.2f}x), query p50 median {query:6.2f} ms "
              f"({query / torch_query:.2f}x PyTorch's)")


if __name__ == "__main__":
    main()
