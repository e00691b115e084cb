"""The figures of one `wrk --latency` output file, for the load scripts in benches/http.

`parse(path)` returns a dict: requests/s, total requests, latency p50 and p99 in ms, the count
of non-2xx/3xx responses and of socket errors (connect, read, write, timeout; 0 when wrk
reported none). Standard library only.
"""
import re


def parse(path):
    text = open(path).read()

    def ms(label):
        value, unit = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", text, re.M).groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)),
        "requests": int(re.search(r"(\d+) requests in", text).group(1)),
        "p50_ms": ms("50%"),
        "p99_ms": ms("99%"),
        "errors": int(errors.group(1)) if errors else 0,
        "socket_errors": sum(int(count) for count in socket.groups()) if socket else 0,
    }
