#!/usr/bin/env python3
"""The web console in headless chromium, over W3C WebDriver (standard library only).

Usage: browser.py BASE_URL SCREENSHOT_DIR WORK_DIR [partial]   (tests/console/run.sh starts the server)
       partial: the server's generator is tests/console/fake_generator.py (rejected claims)

Each step asserts what a user would see; a failure names the step, and a screenshot of the page
at that moment is saved as failure.png.
"""

import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

BASE, SHOTS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
PARTIAL = sys.argv[4:] == ["partial"]
REVIEWER_TOKEN = os.environ["REVIEWER_TOKEN"]  # acme, sub rita, group everyone, role reviewer
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C web element identifier
CORPUS = json.load(open(os.path.join(os.path.dirname(__file__), "../../fixtures/demo/corpus.json")))
QUESTION = "How much are hotel stays reimbursed per night in London?"
INJECTION_TEXT = (
    'Fuel cards are reimbursed up to 90 euros per month <img src=x onerror="window.__pwned=1;document.title=\'PWNED\'"> '
    "for field staff <script>window.__pwned=2</script> with receipts."
)
INJECTION_TITLE = "<b>Fuel</b> cards <img src=x onerror=window.__pwned=3>"


def http(method, url, body=None, token=None):
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = "Bearer " + token
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


class Driver:
    def __init__(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.log = open(os.path.join(WORK, "chromedriver.log"), "w")
        self.process = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(self.url + "/status", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        capabilities = {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--window-size=1200,900",
                    "--user-data-dir=" + os.path.join(WORK, "chromium-profile"),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }
        reply = self.call("POST", "/session", {"capabilities": {"alwaysMatch": capabilities}})
        self.session = reply["sessionId"]

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as error:
            raise AssertionError(f"webdriver {method} {path}: {error.read()[:500]!r}")

    def session_call(self, method, path, body=None):
        return self.call(method, f"/session/{self.session}{path}", body)

    def go(self, url):
        self.session_call("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.session_call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css):
        found = self.session_call("POST", "/element", {"using": "css selector", "value": css})
        assert isinstance(found, dict) and ELEMENT in found, f"no element {css}: {found!r}"[:500]
        return found[ELEMENT]

    def click(self, css):
        self.session_call("POST", f"/element/{self.find(css)}/click", {})

    def type(self, css, text):
        element = self.find(css)
        self.session_call("POST", f"/element/{element}/clear", {})
        self.session_call("POST", f"/element/{element}/value", {"text": text})

    def keys(self, css, text):
        """Sends keystrokes to an element (WebDriver focuses it first), as a keyboard user would."""
        self.session_call("POST", f"/element/{self.find(css)}/value", {"text": text})

    def press(self, *keys):
        """Presses keys, one after the other, on whatever has the focus (W3C key actions)."""
        actions = []
        for key in keys:
            actions += [{"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]
        self.session_call("POST", "/actions", {"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})

    def resize(self, width, height):
        self.session_call("POST", "/window/rect", {"width": width, "height": height})

    def select(self, css, value):
        """Chooses an option as a user would (the value, then a change event)."""
        found = self.js(
            "const s = document.querySelector(arguments[0]);"
            "if (!s || !Array.from(s.options).some(o => o.value === arguments[1])) return false;"
            "s.focus(); s.value = arguments[1]; s.dispatchEvent(new Event('change', {bubbles: true})); return true;",
            css,
            str(value),
        )
        assert found, f"no option {value!r} in {css}"

    def wait(self, script, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.js(script)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def screenshot(self, name):
        png = base64.b64decode(self.session_call("GET", "/screenshot"))
        with open(os.path.join(SHOTS, name + ".png"), "wb") as out:
            out.write(png)

    def browser_log(self):
        try:
            return self.session_call("POST", "/se/log", {"type": "browser"})
        except AssertionError:
            return []

    def quit(self):
        try:
            self.session_call("DELETE", "")
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        self.process.terminate()
        self.process.wait(timeout=10)


def pdf(pages, padding=0):
    """A PDF of `pages` (each a list of lines) in Helvetica, one text object per line, written
    here byte by byte (a cross-reference table with true offsets), so the console uploads a real
    binary file and the server's extraction finds the page boundaries. `padding` bytes of an
    unused stream make it as large as PDFs with images are."""
    def escaped(line):
        return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", None,
               "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"]
    kids = []
    for lines in pages:
        content = "".join(f"BT /F1 11 Tf 72 {800 - 14 * index} Td ({escaped(line)}) Tj ET\n" for index, line in enumerate(lines))
        objects.append(f"<< /Length {len(content.encode('latin-1'))} >>\nstream\n{content}endstream")
        objects.append(f"<< /Type /Page /Parent 2 0 R /Contents {len(objects)} 0 R >>")
        kids.append(f"{len(objects)} 0 R")
    if padding:
        objects.append(f"<< /Length {padding} >>\nstream\n{'0' * padding}\nendstream")
    objects[1] = (f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} "
                  "/Resources << /Font << /F1 3 0 R >> >> /MediaBox [0 0 595 842] >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def corpus_text(tenant, doc_id):
    for document in CORPUS["documents"]:
        if document["tenant"] == tenant and document["doc_id"] == doc_id:
            return document["text"]
    raise KeyError(doc_id)


def text_of(driver, css):
    return driver.js("const n = document.querySelector(arguments[0]); return n ? n.textContent : null;", css)


def step(name):
    print("-", name, flush=True)


def sign_in_demo(driver, user):
    driver.select("#demo-user", user)
    driver.click("#demo-signin")
    driver.wait(f"return document.getElementById('identity').textContent.includes('{user}@');", f"sign-in as {user}")


def activate(driver, who):
    index = driver.js(
        "return Array.from(document.querySelectorAll('#active-principal option')).findIndex(o => o.textContent.startsWith(arguments[0]));",
        who,
    )
    assert index >= 0, f"{who} is not signed in"
    driver.select("#active-principal", index)
    driver.wait(f"return document.getElementById('identity').textContent.includes('{who}');", f"{who} active")


def ask(driver, question):
    driver.click('.tab[data-view="ask"]')
    driver.type("#question", question)
    driver.js("document.getElementById('ask-result').textContent = '';")
    driver.click('#ask-form button[type="submit"]')
    return driver.wait("const b = document.querySelector('#ask-result .badge'); return b && b.textContent;", "an answer")


def queue_ids(driver):
    return driver.js("return Array.from(document.querySelectorAll('#review-queue .queue-item')).map(b => b.dataset.reviewId);")


def api_queue(status):
    code, page = http("GET", f"{BASE}/v1/reviews?status={status}&limit=100", token=REVIEWER_TOKEN)
    assert code == 200, (code, page)
    return [item["review_id"] for item in page["items"]]


def open_review_item(driver, review_id):
    """Opens `review_id` from the queue shown, loading older pages until it is listed."""
    for _ in range(20):
        if review_id in queue_ids(driver):
            break
        assert driver.js("return !document.getElementById('review-more').hidden;"), f"{review_id} is not in the queue"
        count = len(queue_ids(driver))
        driver.click("#review-more")
        driver.wait(f"return document.querySelectorAll('#review-queue .queue-item').length > {count};", "older items")
    driver.click(f'#review-queue .queue-item[data-review-id="{review_id}"]')
    driver.wait(
        f"const q = document.querySelector('#review-queue .queue-item[aria-current=\"true\"]');"
        f"return q && q.dataset.reviewId === '{review_id}' && document.querySelector('#review-item .answer-head');",
        f"review item {review_id}",
    )


def stored(review_id):
    code, item = http("GET", f"{BASE}/v1/reviews/{review_id}", token=REVIEWER_TOKEN)
    assert code == 200, (code, item)
    return item


def review_tab_shown(driver):
    return driver.js("return !document.querySelector('.tab[data-view=\"review\"]').parentElement.hidden;")


def review(driver, revoked_later, abstained_id):
    step("review: bob's answers are queued for review; bob has no Review tab")
    sign_in_demo(driver, "bob")
    bob = http("POST", BASE + "/console/demo-token", {"user": "bob"})[1]["token"]
    for question in ["How many vacation days do employees get?", "When are laptops replaced?"] * 3:
        code, reply = http("POST", BASE + "/v1/answer", {"question": question}, bob)
        assert code == 200 and reply["review"]["queued"], (code, reply)
    status = ask(driver, "Where are visitor parking spaces?")
    assert status == "answered", (status, text_of(driver, "#ask-result"))
    bob_id = driver.wait("const q = document.querySelector('#ask-result .queued'); return q && q.dataset.reviewId;", "the queued note")
    time.sleep(0.5)  # the tab's probe answers 403 for bob
    assert not review_tab_shown(driver), "a non-reviewer has a Review tab"
    written(bob_id)

    step("review: a reviewer's token shows the Review tab and the pending queue, newest first, paged")
    sign_in_reviewer(driver)
    first_page = queue_ids(driver)
    assert first_page[0] == bob_id, "newest first"
    assert len(first_page) == 10 and review_tab_shown(driver), first_page
    driver.click("#review-more")
    driver.wait("return document.querySelectorAll('#review-queue .queue-item').length > 10;", "the next page")
    assert queue_ids(driver) == api_queue("pending"), "the pages, joined, are the API's queue in its order"
    assert "gina" not in text_of(driver, "#review-queue"), "another tenant's item is listed"
    assert driver.js("return document.getElementById('review-keys').textContent.includes('supported');"), "shortcuts documented"

    step("review: an item shows each claim's cited span highlighted in its source")
    open_review_item(driver, bob_id)
    item = stored(bob_id)
    assert item["generated_text"] == "shown", item
    claim = item["claims"][0]
    citation = claim["citations"][0]
    source = next(s for s in item["sources"] if s["label"] == citation["label"])
    expected = source["text"][citation["quote_start"] - source["start"] : citation["quote_end"] - source["start"]]
    quoted = driver.wait("const m = document.querySelector('#review-source-text mark.quote'); return m && m.textContent;", "the highlight")
    assert quoted == expected == citation["quote"], (quoted, expected, citation)
    cited = text_of(driver, "#review-source-text mark.cited")
    assert cited == source["text"], (cited, source["text"])
    assert citation["label"] in text_of(driver, "#review-source-title")
    assert len(item["claims"]) == driver.js("return document.querySelectorAll('#review-item .review-claim').length;")
    driver.screenshot("review")

    step("review: verdicts by keyboard and by click, a note, submitted with s; the item moves to reviewed")
    driver.press("2")
    pressed = "return Array.from(document.querySelectorAll('#review-item [data-target=\"c0\"] button.verdict[aria-pressed=\"true\"]')).map(b => b.dataset.verdict);"
    assert driver.js(pressed) == ["partially_supported"], driver.js(pressed)
    driver.click('#review-item [data-target="c0"] button.verdict[data-verdict="supported"]')
    assert driver.js(pressed) == ["supported"], driver.js(pressed)
    expected_claims = [{"index": claim["index"], "verdict": "supported"}]
    if len(item["claims"]) > 1:
        driver.press("j", "4")
        expected_claims.append({"index": item["claims"][1]["index"], "verdict": "wrong_citation"})
    driver.press("n")
    assert driver.js("return document.activeElement.id;") == "review-note"
    driver.press(*"span checked <b>ok</b>")
    driver.press("\ue00c")  # Escape leaves the note
    driver.press("s")
    driver.wait("return document.getElementById('review-status').textContent.startsWith('Verdict stored');", "the verdict")
    verdicts = stored(bob_id)["verdicts"]
    assert len(verdicts) == 1 and verdicts[0]["reviewer"] == "rita", verdicts
    assert verdicts[0]["claims"] == expected_claims and verdicts[0]["note"] == "span checked <b>ok</b>", verdicts
    assert text_of(driver, "#review-item .badge") == "reviewed"
    assert "span checked <b>ok</b>" in text_of(driver, '#review-item .verdicts [data-reviewer="rita"]')
    driver.wait(f"return !document.querySelector('#review-queue .queue-item[data-review-id=\"{bob_id}\"]');", "the item leaves the pending queue")
    assert bob_id not in api_queue("pending")
    driver.select("#review-filter", "reviewed")
    driver.wait(f"return document.querySelector('#review-queue .queue-item[data-review-id=\"{bob_id}\"]');", "the item in the reviewed queue")
    driver.screenshot("reviewed")

    step("review: nothing chosen, s is refused by the API and its code shown")
    driver.select("#review-filter", "pending")
    driver.wait("return document.querySelectorAll('#review-queue .queue-item').length > 0;", "the pending queue")
    other = queue_ids(driver)[0]
    open_review_item(driver, other)
    driver.press("s")
    driver.wait("return document.getElementById('review-status').textContent.includes('400 empty_verdict');", "the API's error code")
    assert stored(other)["verdicts"] == []

    step("review: a source revoked since is withheld, not readable by you, and nothing of it shows")
    review_id, label = revoked_later
    open_review_item(driver, review_id)
    withheld = text_of(driver, f'#review-item .withheld-source[data-label="{label}"]')
    assert withheld and "not readable by you" in withheld, withheld
    driver.click(f'#review-item .review-claim .chip[data-label="{label}"]')
    driver.wait("return document.getElementById('review-source-note').textContent.includes('not readable by you');", "the withheld note")
    assert driver.js("return document.querySelectorAll('#review-source-text mark').length;") == 0
    shown = text_of(driver, "#view-review")
    assert "250 euros" not in shown and "travel-policy" not in shown and "Acme travel policy" not in shown, shown
    assert driver.js("return Array.from(document.querySelectorAll('#review-item [data-target^=\"c\"] button.verdict')).every(b => b.disabled);")
    driver.screenshot("review-withheld")

    step("review: the abstention judged by keyboard, naming the document that answers it")
    open_review_item(driver, abstained_id)
    assert driver.js("return document.querySelector('#review-item .review-claim.selected').dataset.target;") == "abstention"
    driver.type("#review-abstention-doc", "vacation-policy")
    driver.press("\ue00c", "1", "2", "s")  # Escape leaves the field; 1 then 2: should_have_answered
    driver.wait("return document.getElementById('review-status').textContent.startsWith('Verdict stored');", "the abstention verdict")
    verdict = stored(abstained_id)["verdicts"][0]
    assert verdict["abstention"] == {"verdict": "should_have_answered", "doc_id": "vacation-policy"}, verdict
    assert verdict["claims"] == [], verdict
    assert "should_have_answered (vacation-policy)" in text_of(driver, '#review-item .verdicts [data-reviewer="rita"]')

    step("review: no sideways scrolling on a narrow screen")
    driver.resize(420, 900)
    overflow = driver.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth;")
    assert overflow <= 1, overflow
    driver.resize(1200, 900)

    step("review: a non-reviewer made active gets the API's 403, and no Review tab")
    activate(driver, "alice@")
    driver.wait("return document.getElementById('review-status').textContent.includes('403 forbidden');", "the 403")
    driver.wait("return document.querySelector('.tab[data-view=\"review\"]').parentElement.hidden;", "the tab hidden")
    assert driver.js("return document.querySelectorAll('#review-queue li, #review-item *').length;") == 0
    driver.screenshot("review-forbidden")
    activate(driver, "rita@")
    driver.wait("return !document.querySelector('.tab[data-view=\"review\"]').parentElement.hidden;", "the tab back")


def sign_in_reviewer(driver):
    driver.type("#token-input", REVIEWER_TOKEN)
    driver.click('#token-form button[type="submit"]')
    driver.wait("return document.getElementById('identity').textContent.includes('rita@acme');", "rita signed in")
    driver.wait("return !document.querySelector('.tab[data-view=\"review\"]').parentElement.hidden;", "the Review tab")
    driver.click('.tab[data-view="review"]')
    driver.wait("return document.querySelectorAll('#review-queue .queue-item').length > 0;", "the queue")


def written(review_id):
    deadline = time.time() + 30
    while http("GET", f"{BASE}/v1/reviews/{review_id}", token=REVIEWER_TOKEN)[0] != 200:
        assert time.time() < deadline, "the review item was never written"
        time.sleep(0.2)


def run_partial(driver):
    step("partial: bob's answer had a claim withheld; the Ask view says so and that it was queued")
    driver.go(BASE + "/console")
    driver.wait("return document.body.dataset.ready === 'true' && !document.getElementById('demo-form').hidden;", "demo sign-in")
    sign_in_demo(driver, "bob")
    status = ask(driver, QUESTION)
    assert status == "answered", (status, text_of(driver, "#ask-result"))
    assert "Partial answer" in (text_of(driver, "#ask-result .withheld") or ""), text_of(driver, "#ask-result")
    review_id = driver.wait("const q = document.querySelector('#ask-result .queued'); return q && q.dataset.reviewId;", "the queued note")
    written(review_id)

    step("partial: the reviewer sees the rejected claim with its code, and the source it cited")
    sign_in_reviewer(driver)
    open_review_item(driver, review_id)
    item = stored(review_id)
    assert item["route"] == "partial" and item["generated_text"] == "shown", item
    position, rejected = next((i, c) for i, c in enumerate(item["claims"]) if c["status"] == "rejected")
    entry = f'#review-item [data-target="c{rejected["index"]}"]'
    codes = driver.js(f"return Array.from(document.querySelectorAll('{entry} code.code')).map(c => c.textContent);")
    assert codes and codes == rejected["codes"], (codes, rejected)
    assert text_of(driver, f"{entry} .chip.status-rejected") == "rejected"
    assert text_of(driver, f"{entry} .claim-text") == rejected["text"]
    driver.press(*["j"] * position)
    assert driver.js("return document.querySelector('#review-item .review-claim.selected').dataset.target;") == f"c{rejected['index']}"
    source = next(s for s in item["sources"] if s["label"] == rejected["citations"][0]["label"])
    cited = driver.wait("const m = document.querySelector('#review-source-text mark.cited'); return m && m.textContent;", "the cited source")
    assert cited == source["text"] and f"Claim {rejected['index']}" in text_of(driver, "#review-source-title"), cited
    driver.screenshot("review-rejected")

    step("partial: the rejected claim judged by keyboard, the returned one by click")
    driver.press("3")
    returned = next(c for c in item["claims"] if c["status"] == "returned")
    driver.click(f'#review-item [data-target="c{returned["index"]}"] button.verdict[data-verdict="supported"]')
    driver.press("s")
    driver.wait("return document.getElementById('review-status').textContent.startsWith('Verdict stored');", "the verdict")
    verdict = stored(review_id)["verdicts"][0]
    judged = {c["index"]: c["verdict"] for c in verdict["claims"]}
    assert judged == {rejected["index"]: "unsupported", returned["index"]: "supported"}, verdict
    print("console browser test (rejected claims) passed")


def main():
    driver = Driver()
    try:
        run_partial(driver) if PARTIAL else run(driver)
    except Exception:
        try:
            driver.screenshot("failure-partial" if PARTIAL else "failure")
        except Exception:  # noqa: BLE001
            pass
        raise
    finally:
        driver.quit()


def run(driver):
    step("the console loads with demo sign-in")
    driver.go(BASE + "/console")
    driver.wait("return document.body.dataset.ready === 'true' && !document.getElementById('demo-form').hidden;", "demo sign-in")
    title = driver.js("return document.title;")

    step("alice asks; the answer has claims with citation chips")
    sign_in_demo(driver, "alice")
    status = ask(driver, QUESTION)
    assert status == "answered", status
    claims = text_of(driver, "#ask-result .claims")
    assert "250 euros" in claims, claims
    epoch = int(driver.js("return document.querySelector('[data-acl-epoch]').dataset.aclEpoch;"))
    assert driver.js("return document.querySelectorAll('#ask-result .stage').length;") >= 3, "stage bar"
    legend = driver.js("return Array.from(document.querySelectorAll('#ask-result .stage-legend li')).map(li => li.textContent.split(' ')[0]);")
    pipeline = ["scope", "retrieval", "selection", "prompt", "generation", "validation", "repair"]
    assert legend == [stage for stage in pipeline if stage in legend], f"stages out of pipeline order: {legend}"
    driver.screenshot("ask")

    step("a citation chip opens the source with the cited span highlighted at its offsets")
    token = http("POST", BASE + "/console/demo-token", {"user": "alice"})[1]["token"]
    _, answer = http("POST", BASE + "/v1/answer", {"question": QUESTION}, token)
    citation = answer["answer"]["claims"][0]["citations"][0]
    assert answer["review"]["queued"], answer.get("review")
    revoked_later = (answer["review"]["review_id"], citation["label"])
    driver.click("#ask-result .chip")
    highlighted = driver.wait("const m = document.querySelector('#source-text mark.cited'); return m && m.textContent;", "highlight")
    expected = corpus_text("acme", citation["doc_id"])[citation["start"] : citation["end"]]
    assert highlighted == expected, (highlighted, expected)
    meta = text_of(driver, "#source-meta")
    assert citation["doc_id"] in meta and "version" in meta, meta
    if citation.get("quote"):
        assert text_of(driver, "#source-quote") == citation["quote"]
        assert citation["quote"] in text_of(driver, "#source-text mark.quote") or text_of(driver, "#source-text mark.quote") in citation["quote"]
    assert driver.js("return document.activeElement.id;") == "source-title", "focus moves to the source"
    driver.screenshot("source")

    step("compare: alice and gina ask the same question, each sees her own tenant")
    sign_in_demo(driver, "gina")
    driver.click('.tab[data-view="compare"]')
    a = driver.js("return Array.from(document.querySelectorAll('#compare-a option')).find(o => o.textContent.startsWith('alice@')).value;")
    b = driver.js("return Array.from(document.querySelectorAll('#compare-b option')).find(o => o.textContent.startsWith('gina@')).value;")
    driver.select("#compare-a", a)
    driver.select("#compare-b", b)
    driver.click('#compare-form button[type="submit"]')
    driver.wait("return document.querySelector('#compare-b-result .badge') && document.querySelector('#compare-a-result .badge');", "both answers")
    left, right = text_of(driver, "#compare-a-result"), text_of(driver, "#compare-b-result")
    assert "250 euros" in left and "210 euros" in right and "250 euros" not in right, (left, right)
    driver.screenshot("compare")

    step("root (admin) revokes the travel policy; the change feed shows it")
    sign_in_demo(driver, "root")
    driver.click('.tab[data-view="admin"]')
    driver.type("#acl-doc-id", "travel-policy")
    driver.type("#acl-groups", "")
    driver.type("#acl-users", "")
    driver.click("#acl-revoke")
    driver.wait("return document.getElementById('admin-status').textContent.startsWith('Revoked');", "revoke")
    driver.wait("return document.querySelector('#feed tbody').textContent.includes('travel-policy');", "the change feed")
    driver.screenshot("admin")

    step("alice asks again: the travel policy is gone at once")
    activate(driver, "alice@")
    status = ask(driver, QUESTION)
    chips = driver.js("return Array.from(document.querySelectorAll('#ask-result .chip')).map(c => c.dataset.docId);")
    assert "travel-policy" not in chips, chips
    assert status == "abstained", status
    reason = text_of(driver, "#ask-result .abstention")
    assert "Abstained" in reason and "_" in reason, reason
    abstained_id = driver.js("const q = document.querySelector('#ask-result .queued'); return q && q.dataset.reviewId;")
    assert abstained_id, "the abstention is queued for review and the answer says so"
    new_epoch = int(driver.js("return document.querySelector('[data-acl-epoch]').dataset.aclEpoch;"))
    assert new_epoch > epoch, (new_epoch, epoch)
    driver.screenshot("abstained")

    step("a document carrying <img onerror> and <script> shows literally and runs nothing")
    activate(driver, "root@")
    driver.click('.tab[data-view="admin"]')
    driver.type("#upload-text", INJECTION_TEXT)
    driver.type("#upload-doc-id", "fuel-cards")
    driver.type("#upload-title-input", INJECTION_TITLE)
    driver.type("#upload-groups", "everyone")
    driver.click('#upload-form button[type="submit"]')
    driver.wait("return document.getElementById('admin-status').textContent.startsWith('Uploaded');", "upload")
    activate(driver, "alice@")
    status = ask(driver, "How much are fuel cards reimbursed per month?")
    assert status == "answered", (status, text_of(driver, "#ask-result"))
    driver.click('#ask-result .chip[data-doc-id="fuel-cards"]')
    driver.wait("return document.querySelector('#source-text mark.cited');", "the injected document")
    time.sleep(0.5)  # give any planted handler a chance to fire
    source = text_of(driver, "#source-text")
    assert '<img src=x onerror="window.__pwned=1' in source and "<script>window.__pwned=2</script>" in source, source
    assert INJECTION_TITLE in text_of(driver, "#source-title")
    assert driver.js("return typeof window.__pwned;") == "undefined", "a planted script ran"
    assert driver.js("return document.title;") == title
    assert driver.js("return document.querySelectorAll('img').length;") == 0, "markup from a source became an element"
    assert driver.js("return document.scripts.length;") == 1, "a script element was added"
    assert driver.js("return document.querySelectorAll('#main b').length;") == 0
    violations = [entry for entry in driver.browser_log() if "Content Security Policy" in entry.get("message", "")]
    assert not violations, violations
    driver.screenshot("injection")

    step("a JSON file uploaded by root is answerable by alice, and the chip opens it by keyboard")
    handbook = os.path.join(WORK, "handbook.json")
    with open(handbook, "w") as out:
        json.dump({"documents": [{
            "doc_id": "parking-rules",
            "title": "Parking rules",
            "text": "Visitor parking spaces are on level two of the garage and must be booked a day ahead.",
        }]}, out)
    activate(driver, "root@")
    driver.click('.tab[data-view="admin"]')
    driver.type("#upload-text", "")
    driver.type("#upload-groups", "everyone")
    driver.keys("#upload-file", handbook)
    driver.click('#upload-form button[type="submit"]')
    driver.wait("return document.getElementById('admin-status').textContent.startsWith('Uploaded 1 document');", "file upload")
    activate(driver, "alice@")
    status = ask(driver, "Where are visitor parking spaces?")
    assert status == "answered", (status, text_of(driver, "#ask-result"))
    driver.keys('#ask-result .chip[data-doc-id="parking-rules"]', "\ue007")  # Enter
    highlighted = driver.wait("const m = document.querySelector('#source-text mark.cited'); return m && m.textContent;", "the uploaded file's source")
    assert "level two" in highlighted, highlighted
    assert driver.js("return document.activeElement.id;") == "source-title", "focus moves to the source"

    step("a 4.5 MB PDF and a Markdown file uploaded from the console are cited by page and section")
    lockers = os.path.join(WORK, "bicycle-lockers.pdf")
    with open(lockers, "wb") as out:
        out.write(pdf([
            ["Facilities handbook", "Welcome to the building."],
            ["Meeting rooms are booked through the calendar.", "Rooms hold twelve people."],
            ["Bicycle lockers are assigned by the facilities desk.", "Each bicycle locker costs forty euros a year."],
        ], padding=4_500_000))  # past the 4 MiB JSON body limit: the console must send it as multipart
    hotels = os.path.join(WORK, "oslo-hotels.md")
    with open(hotels, "w") as out:
        out.write("# Travel\n\nTrips are booked through the travel desk.\n\n"
                  "## Hotels\n\nHotel stays in Oslo are reimbursed up to 230 euros per night.\n\n"
                  "# Equipment\n\nLaptops are replaced every four years.\n")
    activate(driver, "root@")
    driver.click('.tab[data-view="admin"]')
    driver.type("#upload-text", "")
    driver.type("#upload-groups", "everyone")
    driver.keys("#upload-file", lockers + "\n" + hotels)
    driver.click('#upload-form button[type="submit"]')
    driver.wait("return document.getElementById('admin-status').textContent.startsWith('Uploaded 2 document');", "PDF and Markdown upload")
    activate(driver, "alice@")
    status = ask(driver, "How much does a bicycle locker cost per year?")
    assert status == "answered", (status, text_of(driver, "#ask-result"))
    chip = '#ask-result .chip[data-doc-id="bicycle-lockers"]'
    where = driver.wait(f"const c = document.querySelector('{chip} .chip-location'); return c && c.textContent;", "the PDF's chip")
    assert where.strip() == "p. 3", where
    assert driver.js(f"return document.querySelector('{chip}').getAttribute('aria-label');").endswith(", p. 3")
    driver.click(chip)
    highlighted = driver.wait("const m = document.querySelector('#source-text mark.cited'); return m && m.textContent;", "the PDF's source")
    assert "forty euros" in highlighted, highlighted
    driver.wait("return document.getElementById('source-meta').textContent.includes(' of ');", "the source's metadata")
    meta = driver.js("return Array.from(document.querySelectorAll('#source-meta dt')).map(dt => [dt.textContent, dt.nextElementSibling.textContent]);")
    assert ["location", "p. 3"] in meta, meta
    driver.screenshot("location-pdf")
    status = ask(driver, "How much are hotel stays in Oslo reimbursed per night?")
    assert status == "answered", (status, text_of(driver, "#ask-result"))
    chip = '#ask-result .chip[data-doc-id="oslo-hotels"]'
    where = driver.wait(f"const c = document.querySelector('{chip} .chip-location'); return c && c.textContent;", "the Markdown chip")
    assert where.strip() == "Travel › Hotels", where
    driver.click(chip)
    driver.wait("return document.getElementById('source-meta').textContent.includes(' of ');", "the Markdown source")
    meta = driver.js("return Array.from(document.querySelectorAll('#source-meta dt')).map(dt => [dt.textContent, dt.nextElementSibling.textContent]);")
    assert ["location", "Travel › Hotels"] in meta, meta
    assert "230 euros" in text_of(driver, "#source-text mark.cited")
    driver.screenshot("location-markdown")

    step("ops: readiness, embedder, generator, index sizes, answer and latency series")
    driver.click('.tab[data-view="ops"]')
    driver.wait("return document.getElementById('ops-status').textContent.startsWith('Updated');", "ops data")
    ready = text_of(driver, "#ops-ready")
    assert "ready" in ready and "hashed" in ready and "extractive" in ready, ready
    assert "answered" in text_of(driver, "#ops-answers") and "abstained" in text_of(driver, "#ops-answers")
    stages = driver.js("return document.querySelectorAll('#ops-stages tbody tr').length;")
    assert stages >= 3, stages
    chunks = driver.js("return Array.from(document.querySelectorAll('#ops-index dd')).map(d => d.textContent);")
    assert all(value not in ("?", "0") for value in chunks), chunks
    driver.screenshot("ops")

    review(driver, revoked_later, abstained_id)

    step("narrow screen: no view scrolls sideways")
    driver.resize(420, 900)
    for view in ["ask", "compare", "admin", "ops"]:
        driver.click(f'.tab[data-view="{view}"]')
        overflow = driver.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth;")
        assert overflow <= 1, (view, overflow)
    driver.click('.tab[data-view="ask"]')
    driver.screenshot("narrow")
    driver.resize(1200, 900)

    step("keyboard: every control is reachable and labelled")
    unlabelled = driver.js(
        "return Array.from(document.querySelectorAll('input, select, textarea'))"
        ".filter(n => !(n.labels && n.labels.length) && !n.getAttribute('aria-label')).map(n => n.id);"
    )
    assert not unlabelled, unlabelled
    print("console browser test passed; screenshots in", SHOTS)


if __name__ == "__main__":
    main()
