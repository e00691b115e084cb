#!/usr/bin/env python3
"""The facts corpus of issue 60: files of every format with planted facts, and the questions.

    python3 benches/docs_corpus/generate.py OUT_DIR

Writes into OUT_DIR:
  halvard-report.pdf   reportlab platypus: two frames (columns) a page, a running header and
                       footer, a table, footnotes drawn at the page foot, soft hyphens in long
                       words (reportlab breaks lines there and draws a hyphen)
  tern-bulletin.pdf    reportlab canvas, laid out by hand: two columns drawn row by row (the
                       content stream interleaves the columns), a running header and footer, a
                       sentence crossing a page break, one line drawn one word per text object,
                       words hyphenated at line ends, a table, a footnote
  dredging-plan.docx   python-docx, with a text box (mc:AlternateContent: wps in mc:Choice, VML in
                       mc:Fallback) anchored mid-paragraph, and a table
  cooling-tower.html   Sphinx-like: sidebar, sections with headerlink anchors (the pilcrow)
  release-notes.html   article > header holding the page's h1, MkDocs-like permalinks
  onboarding.md        YAML front matter, ATX headings
  harbour-notice.txt   hard-wrapped at 72 columns (RFC style)
  questions.jsonl      one line a question: {"file", "question", "fact", and "page" (PDF) or
                       "section" (the heading path; DOCX, HTML, Markdown) or neither (text)}

Every planted fact is a string the answer's quote must hold (compared with runs of whitespace
collapsed). Pages are computed, never written by hand: from the layout made here
(tern-bulletin.pdf) or from poppler's `pdftotext` of each page (halvard-report.pdf); a fact that
would straddle two pages is an error. Needs reportlab and python-docx (a venv:
`python3 -m venv V && V/bin/pip install reportlab python-docx`) and pdftotext (poppler-utils). The output is deterministic
(reportlab's invariant mode, fixed zip dates), so fixtures/docs/ is this script's output.
"""

import json
import os
import random
import re
import sys
import zipfile

from reportlab import rl_config

rl_config.invariant = 1  # no dates or random ids in the PDFs: the same bytes every run

from reportlab.lib import colors  # noqa: E402
from reportlab.lib.pagesizes import A5  # noqa: E402
from reportlab.lib.styles import ParagraphStyle  # noqa: E402
from reportlab.pdfbase.pdfmetrics import stringWidth  # noqa: E402
from reportlab.pdfgen import canvas  # noqa: E402
from reportlab.platypus import BaseDocTemplate, Frame, PageTemplate, Paragraph, Spacer, Table, TableStyle  # noqa: E402

QUESTIONS = []


def ask(file, question, fact, **where):
    QUESTIONS.append({"file": file, "question": question, "fact": fact, **where})


def norm(text):
    return re.sub(r"\s+", " ", text.replace("\xad", "")).strip()


# Filler prose: words the questions never use, so a question's words point at its fact.
FILLER_WORDS = {
    "subject": ["The committee", "Our partners", "The working group", "Each department", "The review panel",
                "The secretariat", "Every regional office", "The steering board"],
    "verb": ["discussed", "documented", "summarised", "circulated", "reconsidered", "acknowledged", "catalogued",
             "scheduled"],
    "object": ["the administrative arrangements", "several organisational proposals", "the correspondence archive",
               "a comprehensive consultation", "the quarterly recommendations", "the procedural guidance",
               "the communication timetable", "an independent evaluation"],
    "tail": ["before the following meeting", "in considerable detail", "with the relevant colleagues",
             "according to established practice", "throughout the reporting period", "without further amendment",
             "for subsequent consideration", "alongside the published minutes"],
}


def filler(rng, sentences):
    out = []
    for _ in range(sentences):
        out.append(f"{rng.choice(FILLER_WORDS['subject'])} {rng.choice(FILLER_WORDS['verb'])} "
                   f"{rng.choice(FILLER_WORDS['object'])} {rng.choice(FILLER_WORDS['tail'])}.")
    return " ".join(out)


def soft_hyphens(text):
    """Soft hyphens inside words of 11 letters or more (every 4 letters, 4 kept at the end)."""
    def split(match):
        word = match.group(0)
        if len(word) < 11:
            return word
        cuts = list(range(4, len(word) - 3, 4))
        return "".join(word[a:b] + ("\xad" if b in cuts else "") for a, b in zip([0] + cuts, cuts + [len(word)]))
    return re.sub(r"[A-Za-z]+", split, text)


def pdftotext_page(path, page):
    """Page `page` of a PDF as poppler's pdftotext reads it, line-end hyphens between letters
    joined and whitespace collapsed (the reference the fact's page is found in)."""
    import subprocess

    text = subprocess.run(["pdftotext", "-q", "-f", str(page), "-l", str(page), path, "-"], capture_output=True,
                          text=True).stdout
    return norm(re.sub(r"([A-Za-z])-\n([a-z])", r"\1\2", text))


# ---------------------------------------------------------------------------------------------
# halvard-report.pdf: platypus, two frames a page, header, footer, table, footnotes, hyphens.

def halvard_report(out):
    name = "halvard-report.pdf"
    rng = random.Random(60)
    body = ParagraphStyle("body", fontName="Helvetica", fontSize=9, leading=11.5, alignment=4,
                          embeddedHyphenation=1, hyphenationLang="", spaceAfter=5)
    head = ParagraphStyle("head", fontName="Helvetica-Bold", fontSize=11, leading=14, spaceBefore=6, spaceAfter=4)
    footnotes = {1: "1 Shipments were audited by the firm Norrbeck & Lund in March 2032.",
                 2: "2 Output is net of the station's own consumption."}
    footnote_page = {}

    def page(c, doc):
        number = c.getPageNumber()
        c.saveState()
        c.setFont("Helvetica-Oblique", 8)
        c.drawString(36, A5[1] - 28, "Halvard Energy  -  Annual Report 2031")
        c.drawRightString(A5[0] - 36, A5[1] - 28, "Internal")
        c.line(36, A5[1] - 32, A5[0] - 36, A5[1] - 32)
        c.drawCentredString(A5[0] / 2, 20, f"Halvard Energy - page {number}")
        notes = [footnotes[n] for n, p in footnote_page.items() if p == number]
        c.setFont("Helvetica", 7)
        for i, note in enumerate(notes):
            c.drawString(36, 44 - i * 9, note)
        c.restoreState()

    # Footnote markers sit in the paragraphs below; each note is drawn on the page its marker
    # lands on (known after a first build, so the document is built twice).
    width, height = A5
    gap, margin = 14, 36
    column = (width - 2 * margin - gap) / 2
    frames = [Frame(margin, 56, column, height - 56 - 40, id="left", leftPadding=0, rightPadding=0),
              Frame(margin + column + gap, 56, column, height - 56 - 40, id="right", leftPadding=0, rightPadding=0)]

    facts = [
        ("Operations", [
            filler(rng, 3),
            "In 2031 the Halvard plant shipped 5,812 turbines to customers in eleven countries, the largest "
            "yearly total since the plant opened<super>1</super>. " + filler(rng, 2),
            filler(rng, 4),
        ]),
        ("Maintenance", [
            filler(rng, 2) + " The cooling loop at Halvard is flushed every 37 days, after the river intake "
            "screens have been inspected by the duty crew. " + filler(rng, 2),
            filler(rng, 3) + " Rotor blade recalibration at the northern test stand takes 19 hours for each "
            "rotor, including the balancing run. " + filler(rng, 1),
        ]),
        ("Sites", None),
        ("Finance", [
            filler(rng, 3) + " Revenue from service contracts rose to 214 million crowns, carried mostly by "
            "the offshore maintenance agreements signed in the spring. " + filler(rng, 2),
            filler(rng, 4),
            filler(rng, 2) + " The apprentice programme trained 96 welders in Halvard's workshop during the year, "
            "twice as many as planned. " + filler(rng, 3),
        ]),
        ("Outlook", [
            filler(rng, 3) + " The board expects the new gearbox hall in Osterby to open in September 2033, "
            "once the crane rails are certified. " + filler(rng, 4),
            filler(rng, 5),
        ]),
    ]

    table = Table([["Site", "Staff", "Output (MW)2"], ["Vesterholm", "412", "1,904"], ["Osterby", "268", "1,150"],
                   ["Kalvsund", "133", "575"]], colWidths=[column * 0.42, column * 0.24, column * 0.34])
    table.setStyle(TableStyle([("FONT", (0, 0), (-1, -1), "Helvetica", 8), ("FONT", (0, 0), (-1, 0), "Helvetica-Bold", 8),
                               ("GRID", (0, 0), (-1, -1), 0.4, colors.grey)]))

    class Doc(BaseDocTemplate):
        def afterFlowable(self, flowable):
            # a footnote goes to the page its marker lands on (known after the first build)
            if isinstance(flowable, Paragraph) and "5,812 turbines" in norm(flowable.getPlainText()):
                footnote_page[1] = self.canv.getPageNumber()
            if isinstance(flowable, Table):
                footnote_page[2] = self.canv.getPageNumber()

    def story():
        items = [Paragraph("Halvard Energy: Annual Report 2031", ParagraphStyle("title", fontName="Helvetica-Bold",
                                                                                 fontSize=14, leading=18, spaceAfter=8))]
        for heading, paragraphs in facts:
            items.append(Paragraph(heading, head))
            if paragraphs is None:
                items.append(Paragraph(soft_hyphens(filler(rng_table, 2)) + " Staff and output per site:", body))
                items.append(table)
                items.append(Spacer(1, 6))
                continue
            for paragraph in paragraphs:
                items.append(Paragraph(soft_hyphens(paragraph), body))
        return items

    for _ in range(2):  # the second build draws each footnote on the page the first found
        rng_table = random.Random(7)
        doc = Doc(os.path.join(out, name), pagesize=A5, title="Halvard Energy annual report 2031",
                  author="Halvard Energy")
        doc.addPageTemplates([PageTemplate(id="two", frames=frames, onPage=page)])
        doc.build(story())
    def page_of(fact):
        pages = [p for p in range(1, 10) if fact in pdftotext_page(os.path.join(out, name), p)]
        if len(pages) != 1:
            raise SystemExit(f"{name}: fact {fact!r} not on a single page (split, or missing): {pages}")
        return pages[0]

    for question, fact in [
        ("How many turbines did the Halvard plant ship in 2031?", "5,812 turbines"),
        ("How often is the cooling loop at Halvard flushed?", "every 37 days"),
        ("How long does rotor blade recalibration take at the northern test stand?", "19 hours"),
        ("How many staff work at the Vesterholm site?", "412"),
        ("To how much did revenue from service contracts rise?", "214 million crowns"),
        ("How many welders did the apprentice programme train?", "96 welders"),
        ("When does the board expect the new gearbox hall in Osterby to open?", "September 2033"),
        ("Which firm audited the shipments?", "Norrbeck & Lund"),
    ]:
        ask(name, question, fact, page=page_of(fact))


# ---------------------------------------------------------------------------------------------
# tern-bulletin.pdf: laid out by hand, columns drawn row by row.

FONT, SIZE, LEADING = "Helvetica", 9.5, 12.5


def wrap(words, width, indent):
    """Greedy lines of `words` in `width` points, the first `indent` points narrower (it is
    indented); a long word that does not fit is hyphenated."""
    lines, line = [], []
    queue = list(words)
    while queue:
        word = queue.pop(0)
        candidate = " ".join(line + [word])
        room = width - (indent if not lines else 0)
        if stringWidth(candidate, FONT, SIZE) <= room:
            line.append(word)
            continue
        letters = re.fullmatch(r"([A-Za-z]+)([^A-Za-z]*)", word)
        if letters and len(letters.group(1)) >= 8:
            stem = letters.group(1)
            for cut in range(len(stem) - 3, 3, -1):
                if stringWidth(" ".join(line + [stem[:cut] + "-"]), FONT, SIZE) <= room:
                    lines.append(line + [stem[:cut] + "-"])
                    line = []
                    queue.insert(0, stem[cut:] + letters.group(2))
                    break
            else:
                lines.append(line)
                line = [word]
            continue
        lines.append(line)
        line = [word]
    if line:
        lines.append(line)
    return lines


def tern_bulletin(out):
    name = "tern-bulletin.pdf"
    width, height = A5
    margin, gap = 34, 16
    column = (width - 2 * margin - gap) / 2
    top, bottom = height - 52, 62
    rows = int((top - bottom) / LEADING) + 1
    crossing = ("Pilot boats answered 1,347 calls during the winter quarter, and each call was logged with the "
                "vessel's draught, its berth and the time the pilot stepped aboard at the Gull Rock station.")

    def build(lead):
        rng = random.Random(61)
        blocks = [("head", "Harbour traffic"),
                  ("para", filler(rng, 2) + " Container traffic through Tern Harbour reached 48,200 units in the "
                   "second quarter, an increase that the berth planners had not foreseen. " + filler(rng, 3)),
                  ("para", filler(rng, 3) + " The harbour master Ilse Brandvik ordered a recalibration of the "
                   "tide gauges at the outer mole, which now read within 4 millimetres of the survey "
                   "benchmark. " + filler(rng, 2)),
                  ("para", filler(rng, 2) + " Gross tonnage handled at the coal quay fell to 2.9 million tonnes "
                   "(see the note below).\xb9 " + filler(rng, 2)),
                  ("para", filler(rng, lead) + " " + crossing + " " + filler(rng, 2)),
                  ("head", "Berths"),
                  ("table", [["Berth", "Depth", "Crane"], ["North 3", "12.5 m", "Kestrel"],
                             ["South 9", "9.8 m", "Osprey"]]),
                  ("para", filler(rng, 2) + " The ferry terminal's new gangway WORDLINE " + filler(rng, 1)),
                  ("head", "Works"),
                  ("para", filler(rng, 3) + " Dredging of the inner basin will remove approximately 31,000 cubic "
                   "metres of sediment before the autumn storms begin. " + filler(rng, 3)),
                  ("para", filler(rng, 6)),
                  ("para", filler(rng, 5) + " Lighting on the breakwater was replaced with 220 amber lanterns "
                   "that the fishing cooperative had requested. " + filler(rng, 4)),
                  ("para", filler(rng, 8))]
        # the flow: each entry a row of one column: (kind, words or cells)
        flow = []
        for kind, content in blocks:
            if kind == "head":
                flow += [("blank", None), ("head", content)]
            elif kind == "table":
                flow += [("blank", None)] + [("row", cells) for cells in content] + [("blank", None)]
            else:
                text = content.replace("WORDLINE", "was opened to foot passengers on 12 June by the mayor.")
                lines = wrap(text.split(), column, 12)
                flow += [("line", lines[0], True)] + [("line", words, False) for words in lines[1:]]
                flow.append(("blank", None))
        # place: columns of `rows` rows, two a page
        placed = []  # (page, column, row, entry)
        for i, entry in enumerate(flow):
            slot = i
            page, rest = divmod(slot, 2 * rows)
            placed.append((page + 1, rest // rows, rest % rows, entry))
        return placed

    def words_with_pages(placed):
        tokens = []  # (word, page) in reading order, hyphen-split halves joined
        carry = None
        for page, _, _, entry in placed:
            if entry[0] != "line":
                continue
            for word in entry[1]:
                if carry is not None:
                    word, page_of_word = carry[0] + word, carry[1]
                    carry = None
                else:
                    page_of_word = page
                if word.endswith("-") and word is entry[1][-1] and word[:-1].isalpha():
                    carry = (word[:-1], page_of_word)
                    continue
                tokens.append((word, page_of_word))
        return tokens

    def page_of(tokens, fact):
        words = fact.split()
        for i in range(len(tokens) - len(words) + 1):
            if [w for w, _ in tokens[i:i + len(words)]] == words:
                pages = {p for _, p in tokens[i:i + len(words)]}
                if len(pages) != 1:
                    raise SystemExit(f"{name}: fact {fact!r} straddles pages")
                return pages.pop()
        raise SystemExit(f"{name}: fact {fact!r} not found")

    # the sentence about pilot calls must start on page 1 and end on page 2, its fact on page 1
    for lead in range(1, 40):
        placed = build(lead)
        tokens = words_with_pages(placed)
        first = page_of(tokens, "Pilot boats answered 1,347 calls")
        last = page_of(tokens, "Gull Rock station.")
        if (first, last) == (1, 2):
            break
    else:
        raise SystemExit(f"{name}: no layout puts the pilot sentence across the page break")

    pages = max(p for p, _, _, _ in placed)
    c = canvas.Canvas(os.path.join(out, name), pagesize=A5, pageCompression=1)
    c.setTitle("Tern Harbour quarterly bulletin")
    by_page = {}
    for page, col, row, entry in placed:
        by_page.setdefault(page, {}).setdefault(row, {})[col] = entry
    for page in range(1, pages + 1):
        c.setFont("Helvetica-Oblique", 8)
        c.drawString(margin, height - 30, "Tern Harbour Authority - Quarterly Bulletin")
        c.drawRightString(width - margin, height - 30, "Q2")
        c.drawCentredString(width / 2, 22, f"Tern Harbour Authority - page {page} of {pages}")
        if page == 1:
            c.setFont("Helvetica", 7)
            c.drawString(margin, 38, "\xb9 Tonnage figures were certified by the harbour surveyor Maren Holt on 2 "
                                     "February.")
        # row by row: the left column's line, then the right column's
        for row in sorted(by_page.get(page, {})):
            for col in sorted(by_page[page][row]):
                entry = by_page[page][row][col]
                x, y = margin + col * (column + gap), top - row * LEADING
                if entry[0] == "head":
                    c.setFont("Helvetica-Bold", 10.5)
                    c.drawString(x, y, entry[1])
                elif entry[0] == "row":
                    c.setFont("Helvetica", 8.5)
                    for i, cell in enumerate(entry[1]):
                        c.drawString(x + i * column / 3, y, cell)
                elif entry[0] == "line":
                    c.setFont(FONT, SIZE)
                    indent = 12 if entry[2] else 0
                    text = " ".join(entry[1])
                    if "foot passengers" in text:  # one word per text object, as some producers do
                        position = x + indent
                        for word in entry[1]:
                            c.drawString(position, y, word)
                            position += stringWidth(word + " ", FONT, SIZE)
                    else:
                        c.drawString(x + indent, y, text)
        c.showPage()
    c.save()

    tokens = words_with_pages(placed)
    for question, fact in [
        ("How many container units went through Tern Harbour in the second quarter?", "48,200 units"),
        ("Within how many millimetres of the survey benchmark do the tide gauges at the outer mole read?",
         "4 millimetres"),
        ("How much gross tonnage was handled at the coal quay?", "2.9 million tonnes"),
        ("How many calls did the pilot boats answer during the winter quarter?", "1,347 calls"),
        ("When was the ferry terminal's new gangway opened to foot passengers?", "12 June"),
        ("How much sediment will dredging of the inner basin remove?", "31,000 cubic metres"),
        ("How many amber lanterns were installed on the breakwater?", "220 amber lanterns"),
    ]:
        ask(name, question, fact, page=page_of(tokens, fact))
    ask(name, "Who certified the tonnage figures?", "Maren Holt", page=1)
    north = next(page for page, _, _, entry in placed if entry[0] == "row" and entry[1][0] == "North 3")
    ask(name, "What is the depth at berth North 3?", "12.5 m", page=north)


# ---------------------------------------------------------------------------------------------
# dredging-plan.docx: python-docx, with a text box written as Word writes it.

TEXT_BOX = """<w:r xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"
 xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"
 xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"
 xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"
 xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"
 xmlns:v="urn:schemas-microsoft-com:vml"><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing>
<wp:anchor distT="0" distB="0" distL="114300" distR="114300" simplePos="0" relativeHeight="1" behindDoc="0"
 locked="0" layoutInCell="1" allowOverlap="1"><wp:simplePos x="0" y="0"/><wp:positionH relativeFrom="column">
<wp:posOffset>0</wp:posOffset></wp:positionH><wp:positionV relativeFrom="paragraph"><wp:posOffset>0</wp:posOffset>
</wp:positionV><wp:extent cx="2743200" cy="914400"/><wp:wrapSquare wrapText="bothSides"/><wp:docPr id="1"
 name="Text Box 1"/><a:graphic><a:graphicData uri="http://schemas.microsoft.com/office/word/2010/wordprocessingShape">
<wps:wsp><wps:cNvSpPr txBox="1"/><wps:spPr><a:xfrm><a:off x="0" y="0"/><a:ext cx="2743200" cy="914400"/></a:xfrm>
<a:prstGeom prst="rect"><a:avLst/></a:prstGeom></wps:spPr><wps:txbx><w:txbxContent><w:p><w:r><w:t>BOXTEXT</w:t>
</w:r></w:p></w:txbxContent></wps:txbx><wps:bodyPr/></wps:wsp></a:graphicData></a:graphic></wp:anchor></w:drawing>
</mc:Choice><mc:Fallback><w:pict><v:shape id="Text Box 1" style="width:216pt;height:72pt" type="#_x0000_t202">
<v:textbox><w:txbxContent><w:p><w:r><w:t>BOXTEXT</w:t></w:r></w:p></w:txbxContent></v:textbox></v:shape></w:pict>
</mc:Fallback></mc:AlternateContent></w:r>"""


def dredging_plan(out):
    import docx
    from docx.oxml import parse_xml

    name = "dredging-plan.docx"
    rng = random.Random(62)
    document = docx.Document()
    document.core_properties.title = "Tern Harbour dredging plan"
    document.add_heading("Tern Harbour dredging plan", level=1)
    document.add_paragraph(filler(rng, 3))
    document.add_heading("Channel depth", level=2)
    paragraph = document.add_paragraph(filler(rng, 1) + " The approach channel is kept at 14.5 metres below "
                                       "chart datum all year. ")
    box = "The dredger Kittiwake removes 86,000 cubic metres of silt from the approach channel each spring."
    paragraph._p.append(parse_xml(TEXT_BOX.replace("BOXTEXT", box)))
    paragraph.add_run(" Survey launches sound the channel every Tuesday at dawn, before the first ferry. "
                      + filler(rng, 1))
    document.add_paragraph(filler(rng, 3))
    document.add_heading("Berths", level=2)
    document.add_paragraph("Quay lengths and draughts:")
    table = document.add_table(rows=3, cols=3)
    for r, cells in enumerate([["Berth", "Length", "Maximum draught"], ["Berth 7", "312 m", "11.2 m"],
                               ["Berth 8", "245 m", "9.4 m"]]):
        for c, cell in enumerate(cells):
            table.cell(r, c).text = cell
    document.add_heading("Safety", level=1)
    document.add_paragraph(filler(rng, 2) + " Pilots must board every vessel longer than 160 metres at the Gull "
                           "Rock station, whatever the weather. " + filler(rng, 2))
    path = os.path.join(out, name)
    document.save(path)
    fixed_zip_dates(path)
    channel = ["Tern Harbour dredging plan", "Channel depth"]
    ask(name, "At what depth below chart datum is the approach channel kept?", "14.5 metres", section=channel)
    ask(name, "How much silt does the dredger Kittiwake remove each spring?", "86,000 cubic metres", section=channel)
    ask(name, "When do survey launches sound the channel?", "every Tuesday at dawn", section=channel)
    ask(name, "What is the length of Berth 7?", "312 m", section=["Tern Harbour dredging plan", "Berths"])
    ask(name, "Where must pilots board vessels longer than 160 metres?", "Gull Rock station", section=["Safety"])


def fixed_zip_dates(path):
    """Rewrites a zip with every entry dated 1980-01-01 and the core properties' dates fixed."""
    with zipfile.ZipFile(path) as source:
        entries = [(info.filename, source.read(info.filename)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for filename, data in entries:
            if filename == "docProps/core.xml":
                data = re.sub(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", b"2031-01-01T00:00:00Z", data)
            target.writestr(zipfile.ZipInfo(filename, (1980, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)


# ---------------------------------------------------------------------------------------------
# HTML: Sphinx-like and an article with a header.

def sphinx_section(anchor, level, title, body):
    return (f'<section id="{anchor}"><h{level}>{title}<a class="headerlink" href="#{anchor}" '
            f'title="Link to this heading">\u00b6</a></h{level}>{body}</section>')


def cooling_tower(out):
    name = "cooling-tower.html"
    rng = random.Random(63)
    p = lambda text: f"<p>{text}</p>"  # noqa: E731
    inner = (p(filler(rng, 3))
             + sphinx_section("commissioning", 2, "Commissioning",
                              p(filler(rng, 2) + " The Brenna cooling tower was commissioned on 4 May 2029 by the chief "
                                "engineer, Ilse Varga, after a week of trials. " + filler(rng, 1)))
             + sphinx_section("water-treatment", 2, "Water treatment",
                              p(filler(rng, 1) + " Blowdown is triggered when the basin conductivity exceeds 2,350 "
                                "microsiemens per centimetre.")
                              + sphinx_section("biocide", 3, "Biocide dosing",
                                               p("The biocide pump doses 3.5 litres of hypochlorite per hour while the "
                                                 "fans run. " + filler(rng, 2))))
             + sphinx_section("fans", 2, "Fans",
                              p(filler(rng, 1))
                              + '<dl class="py function"><dt class="sig sig-object py" id="tower.set_fan_speed">'
                              '<span class="sig-name descname">set_fan_speed</span>(<em>rpm</em>)<a class="headerlink" '
                              'href="#tower.set_fan_speed" title="Link to this definition">\u00b6</a></dt>'
                              '<dd><p>Sets the speed of every fan; the Brenna fans are limited to 1,180 revolutions '
                              'per minute by their gearboxes.</p></dd></dl>'))
    html = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Cooling tower handbook &#8212; Brenna plant 2.1 documentation</title>
<link rel="stylesheet" href="_static/pygments.css"><script src="_static/documentation_options.js"></script></head>
<body><div class="related" role="navigation" aria-label="related navigation"><h3>Navigation</h3><ul>
<li class="right"><a href="genindex.html" title="General Index">index</a></li><li><a href="index.html">Brenna plant
2.1 documentation</a> &#187;</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper"><div class="body" role="main">
{sphinx_section("cooling-tower-handbook", 1, "Cooling tower handbook", inner)}
</div></div></div>
<div class="sphinxsidebar" role="navigation" aria-label="main navigation"><div class="sphinxsidebarwrapper">
<h3><a href="index.html">Table of Contents</a></h3><ul><li><a class="reference internal" href="#">Cooling tower
handbook</a></li></ul><div id="searchbox" role="search"><h3 id="searchlabel">Quick search</h3><form class="search"
action="search.html" method="get"><input type="text" name="q"><input type="submit" value="Go"></form></div></div></div>
</div><div class="footer" role="contentinfo">&#169; Copyright 2031, Brenna Energy. Created using Sphinx 7.2.6.</div>
</body></html>
"""
    open(os.path.join(out, name), "w", encoding="utf-8").write(html)
    root = "Cooling tower handbook"
    ask(name, "When was the Brenna cooling tower commissioned?", "4 May 2029", section=[root, "Commissioning"])
    ask(name, "At what basin conductivity is blowdown triggered?", "2,350 microsiemens",
        section=[root, "Water treatment"])
    ask(name, "How much hypochlorite does the biocide pump dose per hour?", "3.5 litres",
        section=[root, "Water treatment", "Biocide dosing"])
    ask(name, "To how many revolutions per minute are the Brenna fans limited?", "1,180 revolutions",
        section=[root, "Fans"])


def release_notes(out):
    name = "release-notes.html"
    rng = random.Random(64)
    link = lambda anchor: f'<a class="headerlink" href="#{anchor}" title="Permanent link">&para;</a>'  # noqa: E731
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>Release 7.3 - Skarv tools</title></head>
<body><header class="md-header"><nav><a href="/">Skarv tools</a> <a href="/guide/">Guide</a></nav></header>
<main><article class="md-content__inner">
<header><h1 id="release-73">Release 7.3 notes{link("release-73")}</h1><p class="byline">Published by the Skarv
maintainers</p></header>
<p>{filler(rng, 2)}</p>
<h2 id="fixes">Fixes{link("fixes")}</h2>
<p>{filler(rng, 1)} The importer no longer drops rows after line 65,535 of a spreadsheet, a limit inherited from
the old file format.</p>
<h2 id="upgrading">Upgrading{link("upgrading")}</h2>
<p>Upgrading from 7.2 requires running the migration tool with the flag --rebuild-index before the first start.
{filler(rng, 1)}</p>
</article></main><footer class="md-footer">Made with Material for MkDocs</footer></body></html>
"""
    open(os.path.join(out, name), "w", encoding="utf-8").write(html)
    ask(name, "After which line did the importer drop rows of a spreadsheet?", "65,535",
        section=["Release 7.3 notes", "Fixes"])
    ask(name, "Which flag must the migration tool run with when upgrading from 7.2?", "--rebuild-index",
        section=["Release 7.3 notes", "Upgrading"])


# ---------------------------------------------------------------------------------------------
# onboarding.md: YAML front matter.

def onboarding(out):
    name = "onboarding.md"
    rng = random.Random(65)
    text = f"""---
title: Onboarding guide for the Saltvik office
owner: people-team
review: 2032-01-15
tags: [onboarding, saltvik]
---

# Onboarding guide

{filler(rng, 2)}

## Badges

New staff collect their access badge from reception desk C on the third floor, where the porter
checks their contract letter.

## Laptops

{filler(rng, 1)} Each new engineer receives a laptop with 64 GB of memory within five working days of
starting.

## Mentors

Every newcomer is paired with a mentor for the first 90 days, and meets them every Thursday.
{filler(rng, 1)}
"""
    open(os.path.join(out, name), "w", encoding="utf-8").write(text)
    ask(name, "Where do new staff collect their access badge?", "reception desk C", section=["Onboarding guide", "Badges"])
    ask(name, "How much memory does the laptop of a new engineer have?", "64 GB", section=["Onboarding guide", "Laptops"])
    ask(name, "For how many days is every newcomer paired with a mentor?", "90 days",
        section=["Onboarding guide", "Mentors"])


# ---------------------------------------------------------------------------------------------
# harbour-notice.txt: hard-wrapped at 72 columns.

def harbour_notice(out):
    import textwrap

    name = "harbour-notice.txt"
    rng = random.Random(66)
    paragraphs = [
        "TERN HARBOUR AUTHORITY                                    Notice 2031-14",
        "1. Introduction",
        filler(rng, 2) + " This notice replaces notice 2031-09 for every vessel calling at the port.",
        "2. Anchorage",
        filler(rng, 1) + " Vessels waiting for a berth shall anchor in area Bravo, at least 0.6 nautical miles "
        "east of the fairway buoy, and keep a listening watch on VHF channel 14 while at anchor. " + filler(rng, 1),
        "3. Speed",
        "Within the breakwaters no vessel may exceed a speed of 5 knots through the water, except pilot and "
        "rescue craft on duty. " + filler(rng, 2),
    ]
    text = "\n\n".join(textwrap.fill(p, 72) if len(p) > 72 else p for p in paragraphs) + "\n"
    open(os.path.join(out, name), "w", encoding="utf-8").write(text)
    ask(name, "Where shall vessels waiting for a berth anchor?", "area Bravo")
    ask(name, "On which VHF channel must vessels at anchor keep a listening watch?", "channel 14")
    ask(name, "What speed may no vessel exceed within the breakwaters?", "5 knots")


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: generate.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for make in (halvard_report, tern_bulletin, dredging_plan, cooling_tower, release_notes, onboarding,
                 harbour_notice):
        make(out)
    with open(os.path.join(out, "questions.jsonl"), "w", encoding="utf-8") as questions:
        for question in QUESTIONS:
            questions.write(json.dumps(question, ensure_ascii=False) + "\n")
    print(f"{len(QUESTIONS)} questions over {len({q['file'] for q in QUESTIONS})} files in {out}")


if __name__ == "__main__":
    main()
