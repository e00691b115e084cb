#!/usr/bin/env bash
# Facts in answers (issue 60; BENCHMARKS.md "Documents round 2: facts in answers"): does the
# extractive answer's quote hold the fact the question asks for, and does its citation name the
# right page or section, per format?
#
#   benches/docs_facts.sh [WORK_DIR]
#
# 1. Builds the facts corpus with benches/docs_corpus/generate.py (reportlab and python-docx in a
#    venv under /var/cache/warrant-docs-venv, made when missing; poppler's pdftotext) into
#    WORK/generated, with its questions.jsonl; copies the real pdfTeX manuals R-FAQ.pdf and
#    R-data.pdf (Debian's r-doc-pdf, installed when run as root) into WORK/real, asked the
#    hand-written questions of benches/docs_corpus/real_questions.jsonl.
# 2. Starts `warrant serve` on a loopback port (hashed embedder, extractive generator, a
#    throwaway data directory, no demo data), `warrant ingest`s each folder into its own tenant
#    (group staff) and asks every question over POST /v1/answer as a reader of that group.
# 3. Prints per format: questions, answered, the quote holds the fact (% of answered), the page or
#    section is right (% of answered), and each miss with the quotes the answer gave.
#
# A quote holds the fact when the fact is in a citation's quote from the question's file, runs
# of whitespace collapsed on both sides (a line end inside a fact is not a miss; a hyphen kept at
# a line end is). The location is judged on that citation (or, when no quote holds the fact, on
# the first citation of the file): the fact's page is among the citation's pages (PDF), or the
# citation's section path is the expected one (DOCX, HTML, Markdown); text has no location.
# 4. Compares the text warrant-bench extracts from every R manual with pdftotext's (below).
# Nothing remote is started or called. BIN and BENCH default to the debug binaries of
# CARGO_TARGET_DIR: build them first (`cargo build --bin warrant --bin warrant-bench`) so they
# hold the tree being measured.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${1:-$(mktemp -d /tmp/docs-facts.XXXXXX)}"
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/debug/warrant}"
BENCH="${BENCH:-${CARGO_TARGET_DIR:-target}/debug/warrant-bench}"
PORT="${PORT:-18561}"
VENV="${VENV:-/var/cache/warrant-docs-venv}"
MANUALS=/usr/share/R/doc/manual
URL="http://127.0.0.1:$PORT"
PID=""
trap 'if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; fi' EXIT

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q reportlab python-docx
fi
if [ "$(id -u)" = 0 ] && ! { command -v pdftotext && [ -f "$MANUALS/R-FAQ.pdf" ]; } >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends r-doc-pdf poppler-utils >/dev/null
fi
mkdir -p "$WORK/generated" "$WORK/real"
"$VENV/bin/python" benches/docs_corpus/generate.py "$WORK/generated"
mv "$WORK/generated/questions.jsonl" "$WORK/generated.questions.jsonl"
if [ -f "$MANUALS/R-FAQ.pdf" ]; then
  cp "$MANUALS/R-FAQ.pdf" "$MANUALS/R-data.pdf" "$WORK/real/"
  cp benches/docs_corpus/real_questions.jsonl "$WORK/real.questions.jsonl"
fi

export WARRANT__DEMO__LOAD=false WARRANT__SERVER__BIND="127.0.0.1:$PORT" RUST_LOG="${RUST_LOG:-warn}"
export WARRANT__EMBEDDER__KIND=hashed WARRANT__GENERATOR__KIND=extractive
rm -rf "$WORK/data" "$WORK/data.snapshots"
WARRANT__STORAGE__DIR="$WORK/data" WARRANT__SNAPSHOTS__DIR="$WORK/data.snapshots" "$BIN" serve >"$WORK/serve.log" 2>&1 &
PID=$!
until [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/readyz" 2>/dev/null)" = 200 ]; do
  kill -0 "$PID" 2>/dev/null || { tail -20 "$WORK/serve.log" >&2; exit 1; }
  sleep 0.2
done

for set in generated real; do
  [ -f "$WORK/$set.questions.jsonl" ] || continue
  rm -f "$WORK/$set/.warrant-ingest.json"
  "$BIN" ingest "$WORK/$set" --tenant "facts-$set" --group staff --server "$URL" --json >"$WORK/$set.ingest.json"
  TOKEN="$("$BIN" token --tenant "facts-$set" --sub reader --groups staff)" \
    python3 - "$URL" "$WORK/$set.questions.jsonl" "$set" "$WORK/$set.answers.jsonl" <<'EOF'
import collections, json, os, re, sys, urllib.request

url, questions, label, answers_out = sys.argv[1:5]
token = os.environ["TOKEN"].strip()
norm = lambda text: re.sub(r"\s+", " ", text).strip()
FORMATS = {".pdf": "PDF", ".docx": "DOCX", ".html": "HTML", ".md": "Markdown", ".txt": "text"}
rows = collections.defaultdict(lambda: {"questions": 0, "answered": 0, "fact": 0, "where": 0, "where_judged": 0})
misses = []
with open(questions, encoding="utf-8") as lines, open(answers_out, "w", encoding="utf-8") as saved:
    for line in lines:
        q = json.loads(line)
        request = urllib.request.Request(f"{url}/v1/answer", data=json.dumps({"question": q["question"]}).encode(),
                                         headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.load(response)
        saved.write(json.dumps({"question": q, "answer": answer}) + "\n")
        row = rows[FORMATS[os.path.splitext(q["file"])[1]]]
        row["questions"] += 1
        if answer.get("status") != "answered":
            misses.append((q["file"], q["question"], "not answered: " + str(answer.get("status"))))
            continue
        row["answered"] += 1
        cited = [c for claim in answer["answer"]["claims"] for c in claim.get("citations", [])
                 if c.get("doc_id") == q["file"]]
        holding = [c for c in cited if norm(q["fact"]) in norm(c.get("quote", ""))]
        row["fact"] += bool(holding)
        judged = (holding or cited)[:1]
        if "page" in q or "section" in q:
            row["where_judged"] += 1
            location = judged[0].get("location", {}) if judged else {}
            right = (q["page"] in location.get("pages", [location.get("page")]) if "page" in q
                     else location.get("section", []) == q["section"])
            row["where"] += right
        else:
            right = True
        if not holding or not right:
            quotes = [(c.get("doc_id"), c.get("quote"), c.get("location")) for claim in answer["answer"]["claims"]
                      for c in claim.get("citations", [])]
            misses.append((q["file"], q["question"], f"fact {q['fact']!r} in a quote: {bool(holding)}, "
                           f"location right: {right}; cited: {quotes}"))
print(f"== {label}: per format")
print("| format | questions | answered | quote holds the fact | page or section right |")
print("|---|---|---|---|---|")
pct = lambda a, b: f"{a}/{b} ({100 * a / b:.0f} %)" if b else "—"
total = collections.Counter()
for name in ["PDF", "DOCX", "HTML", "Markdown", "text"]:
    if name in rows:
        r = rows[name]
        total.update(r)
        print(f"| {name} | {r['questions']} | {r['answered']} | {pct(r['fact'], r['answered'])} | "
              f"{pct(r['where'], r['where_judged'])} |")
print(f"| all | {total['questions']} | {total['answered']} | {pct(total['fact'], total['answered'])} | "
      f"{pct(total['where'], total['where_judged'])} |")
for miss in misses:
    print("miss:", *miss)
EOF
done
kill -TERM "$PID"
wait "$PID" || true
PID=""

# Text quality on real PDFs against poppler's pdftotext (issue 60's goal: words recovered >= 98 %,
# glued or split words <= 0.5 %): every R manual the server accepts (refman.pdf passes the text
# limit), extracted once by warrant-bench. Words are runs of letters and digits, lowercased,
# counted as multisets. Recovered: pdftotext's words found in ours. Glued: a word of ours that is
# not pdftotext's but two adjacent pdftotext words run together; split: a pdftotext word we
# lack that two adjacent words of ours make; both per pdftotext word.
if command -v pdftotext >/dev/null && [ -d "$MANUALS" ]; then
  echo "== text quality against pdftotext"
  mkdir -p "$WORK/text"
  for pdf in "$MANUALS"/R-*.pdf; do
    name=$(basename "$pdf" .pdf)
    pdftotext -q "$pdf" "$WORK/text/$name.pdftotext.txt"
    "$BENCH" extract --file "$pdf" --rounds 1 --text-out "$WORK/text/$name.warrant.txt" >/dev/null
  done
  python3 - "$WORK/text" <<'EOF'
import collections, glob, os, re, sys

def words(path):
    return re.findall(r"[a-z0-9]+", open(path, encoding="utf-8", errors="replace").read().lower())

def pairs(tokens):
    return collections.Counter(a + b for a, b in zip(tokens, tokens[1:]))

pct = lambda a, b: f"{100 * a / max(1, b):.2f} %"
print("| file | pdftotext words | words out | recovered | in pdftotext | glued | split |")
print("|---|---|---|---|---|---|---|")
total = collections.Counter()
for reference in sorted(glob.glob(os.path.join(sys.argv[1], "*.pdftotext.txt"))):
    name = os.path.basename(reference)[: -len(".pdftotext.txt")]
    p, e = words(reference), words(os.path.join(sys.argv[1], name + ".warrant.txt"))
    cp, ce = collections.Counter(p), collections.Counter(e)
    found = sum((cp & ce).values())
    extra, missing = ce - cp, cp - ce
    pp, pe = pairs(p), pairs(e)
    glued = sum(min(n, pp[w]) for w, n in extra.items())
    split = sum(min(n, pe[w]) for w, n in missing.items())
    total.update({"p": len(p), "e": len(e), "found": found, "glued": glued, "split": split})
    print(f"| {name}.pdf | {len(p)} | {len(e)} | {pct(found, len(p))} | {pct(found, len(e))} | "
          f"{pct(glued, len(p))} | {pct(split, len(p))} |")
print(f"| all | {total['p']} | {total['e']} | {pct(total['found'], total['p'])} | {pct(total['found'], total['e'])} | "
      f"{pct(total['glued'], total['p'])} | {pct(total['split'], total['p'])} |")
EOF
fi
