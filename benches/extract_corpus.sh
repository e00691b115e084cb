#!/usr/bin/env bash
# Extraction on real files (issue 49; BENCHMARKS.md "Extraction of uploaded files"): builds a corpus
# of each format from public-domain text into CORPUS (outside the repository), then times it with
# `warrant-bench extract --corpus` beside the generated corpus, reads the peak memory of the
# largest file of each format with `--file`, and compares one PDF's extracted text with the text
# it was made from.
#
#   benches/extract_corpus.sh /work/corpus [ROUNDS]
#
# Sources (Debian bookworm packages; installed when run as root):
#   public-domain/  the SQLite documentation (sqlite3-doc: /usr/share/doc/sqlite3/*.html, "License:
#                   public-domain" in /usr/share/doc/sqlite3-doc/copyright), every page as
#                   html/ (as shipped), markdown/ (pandoc -t gfm), text/ (pandoc -t plain), docx/
#                   (pandoc -t docx, images embedded where pandoc can read them) and pdf/ (pandoc
#                   -t ms | groff -ms -Tps | ps2pdf: ghostscript's pdfwrite, subset Type 1 fonts,
#                   Flate streams), plus pdf/sqlite-lang-book.pdf: every lang_*.html page as one
#                   document.
#   real-pdf/       PDFs as their projects publish them, used for measuring only (never copied
#                   into the repository): the R manuals (r-doc-pdf; GPL-2+, R Core Team; made by
#                   pdfTeX) and the gnuplot manual (gnuplot-doc; gnuplot licence).
# Needs a release build: cargo build --release --bin warrant-bench (CARGO_TARGET_DIR honoured).
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS="${1:?usage: benches/extract_corpus.sh CORPUS_DIR [ROUNDS]}"
ROUNDS="${2:-5}"
BENCH="${BENCH:-${CARGO_TARGET_DIR:-target}/release/warrant-bench}"
SOURCE=/usr/share/doc/sqlite3

if [ "$(id -u)" = 0 ] && ! { command -v pandoc && command -v ps2pdf && command -v groff && [ -d "$SOURCE" ] &&
  [ -f /usr/share/R/doc/manual/R-intro.pdf ] && [ -f /usr/share/doc/gnuplot/gnuplot.pdf ]; } >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    sqlite3-doc pandoc groff ghostscript r-doc-pdf gnuplot-doc >/dev/null
fi

build() {
  local public="$CORPUS/public-domain" real="$CORPUS/real-pdf"
  mkdir -p "$public"/{html,markdown,text,docx,pdf} "$real"
  for page in "$SOURCE"/*.html; do
    local name
    name=$(basename "$page" .html)
    cp "$page" "$public/html/$name.html"
    pandoc -f html -t gfm "$page" -o "$public/markdown/$name.md"
    pandoc -f html -t plain "$page" -o "$public/text/$name.txt"
    pandoc -f html -t docx --resource-path="$SOURCE" "$page" -o "$public/docx/$name.docx" 2>/dev/null
    pandoc -f html -t ms -s "$page" | groff -ms -k -Tps 2>/dev/null | ps2pdf - "$public/pdf/$name.pdf"
  done
  pandoc -f html -t ms -s "$SOURCE"/lang_*.html | groff -ms -k -Tps 2>/dev/null |
    ps2pdf - "$public/pdf/sqlite-lang-book.pdf"
  pandoc -f html -t plain "$SOURCE"/lang_*.html -o "$CORPUS/sqlite-lang-book.source.txt"
  cp /usr/share/R/doc/manual/*.pdf /usr/share/doc/gnuplot/gnuplot.pdf "$real/"
  rm -f "$real/fullrefman.pdf" # the same bytes as refman.pdf
}
[ -f "$CORPUS/.built" ] || { build; touch "$CORPUS/.built"; }

echo "== corpus: files and bytes per folder"
for folder in "$CORPUS"/public-domain/* "$CORPUS/real-pdf"; do
  echo "$(basename "$folder") $(find "$folder" -type f | wc -l) files $(du -sb "$folder" | cut -f1) bytes" \
    "largest $(ls -S "$folder" | head -1) $(stat -c %s "$folder/$(ls -S "$folder" | head -1)") bytes"
done
echo "== generated corpus (the same run)"
"$BENCH" extract --pages 200 --words 400 --rounds "$ROUNDS"
echo "== public-domain corpus"
"$BENCH" extract --corpus "$CORPUS/public-domain" --rounds "$ROUNDS"
echo "== real-world PDFs"
"$BENCH" extract --corpus "$CORPUS/real-pdf" --rounds "$ROUNDS"
echo "== peak memory of the largest file of each folder (VmHWM; /usr/bin/time's maximum RSS beside)"
for folder in "$CORPUS"/public-domain/* "$CORPUS/real-pdf"; do
  file="$folder/$(ls -S "$folder" | head -1)"
  /usr/bin/time -f "max_rss_kb %M" "$BENCH" extract --file "$file" --rounds 1 2>&1 | grep -v '^ ' || true
done
# refman.pdf passes the 2,000,000-character limit; the largest real PDF the server takes:
/usr/bin/time -f "max_rss_kb %M" "$BENCH" extract --file "$CORPUS/real-pdf/R-exts.pdf" --rounds 1 2>&1
echo "== quality: the lang book PDF's text against the text it was made from"
"$BENCH" extract --file "$CORPUS/public-domain/pdf/sqlite-lang-book.pdf" --rounds 1 \
  --text-out "$CORPUS/sqlite-lang-book.extracted.txt" >/dev/null
python3 - "$CORPUS/sqlite-lang-book.source.txt" "$CORPUS/sqlite-lang-book.extracted.txt" <<'EOF'
import collections, re, sys
def words(path):
    # Words of letters and digits, lowercase; groff's hyphenation at line ends rejoined.
    text = re.sub(r"(\w)-\n\s*(\w)", r"\1\2", open(path, encoding="utf-8").read())
    return collections.Counter(re.findall(r"[A-Za-z0-9_]+", text.lower()))
source, extracted = words(sys.argv[1]), words(sys.argv[2])
found = sum((source & extracted).values())
print(f"source words {sum(source.values())}, extracted words {sum(extracted.values())}, "
      f"source words found {found / sum(source.values()):.4f}, "
      f"extracted words in source {found / max(1, sum(extracted.values())):.4f}")
missing = (source - extracted).most_common(15)
print("most missing:", missing)
EOF
