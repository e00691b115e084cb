// warrant console: a client of this server's own HTTP API, no dependencies.
//
// Rules this file keeps (see SECURITY.md, "Web console"):
// - server data (answers, document text, titles, ids, change-feed entries, error messages) is
//   written into the page only as text: `textContent` / text nodes, never parsed as
//   markup, never a URL, never an attribute that runs code;
// - offsets from the API are character offsets (Unicode scalar values); JavaScript strings are
//   UTF-16, so text is split with Array.from (code points) before any offset is applied;
// - tokens are kept in memory only (a reload signs out); claims are decoded only to label a
//   principal, the server decides everything.
"use strict";

(function () {
  const REASONS = {
    no_authorized_evidence: "Nothing this principal may read was relevant to the question.",
    insufficient_evidence: "The sources this principal may read do not answer the question.",
    invalid_output: "The generator's output could not be parsed, also after one repair.",
    unsupported_citation: "The claims cited sources that do not support them, also after one repair.",
    missing_citation: "The claims came without citations, also after one repair.",
    source_revoked: "A cited source was revoked or deleted while the answer was being built.",
    generator_timeout: "The generator did not answer within its deadline.",
    generator_error: "The generator failed (connection, server error or refusal).",
    context_overflow: "Not even the smallest useful context fits the token budget.",
    deadline_exceeded: "The request's deadline ran out.",
  };

  const principals = []; // {key, label, token, claims}
  let active = -1;
  let viewName = "ask";

  // ---- small DOM helpers (text only) ----
  const $ = (id) => document.getElementById(id);

  function el(tag, options, ...children) {
    const node = document.createElement(tag);
    const opts = options || {};
    if (opts.cls) node.className = opts.cls;
    if (opts.text !== undefined) node.textContent = String(opts.text);
    if (opts.attrs) {
      for (const [name, value] of Object.entries(opts.attrs)) node.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function setStatus(id, text, isError) {
    const node = $(id);
    node.textContent = text || "";
    node.classList.toggle("error", Boolean(isError));
  }

  function list(text) {
    return String(text || "")
      .split(",")
      .map((item) => item.trim())
      .filter((item) => item.length > 0);
  }

  // ---- API ----
  async function api(method, path, token, body) {
    const headers = { accept: "application/json" };
    if (token) headers.authorization = "Bearer " + token;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const type = response.headers.get("content-type") || "";
    const payload = type.includes("application/json") ? await response.json() : await response.text();
    return { status: response.status, ok: response.ok, body: payload };
  }

  function errorText(reply) {
    if (reply.body && typeof reply.body === "object" && reply.body.code) {
      return reply.status + " " + reply.body.code + ": " + reply.body.message;
    }
    return "HTTP " + reply.status;
  }

  // ---- principals ----
  function decodeClaims(token) {
    try {
      const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      const padded = part + "===".slice((part.length + 3) % 4);
      const bytes = Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
      return JSON.parse(new TextDecoder().decode(bytes));
    } catch (_) {
      return null;
    }
  }

  function describe(claims) {
    if (!claims) return "unreadable token";
    const groups = Array.isArray(claims.groups) && claims.groups.length ? " [" + claims.groups.join(", ") + "]" : "";
    const roles = Array.isArray(claims.roles) && claims.roles.length ? " roles: " + claims.roles.join(", ") : "";
    return String(claims.sub) + "@" + String(claims.tenant) + groups + roles;
  }

  function addPrincipal(token, label) {
    const claims = decodeClaims(token);
    const key = claims ? claims.tenant + "/" + claims.sub + "/" + (claims.roles || []).join("+") : token.slice(-12);
    const entry = { key, label: label || describe(claims), token, claims };
    const existing = principals.findIndex((p) => p.key === key);
    if (existing >= 0) principals[existing] = entry;
    else principals.push(entry);
    active = existing >= 0 ? existing : principals.length - 1;
    renderPrincipals();
  }

  function current() {
    return active >= 0 ? principals[active] : null;
  }

  function renderPrincipals() {
    for (const id of ["active-principal", "compare-a", "compare-b"]) {
      const select = $(id);
      const previous = select.value;
      clear(select);
      if (!principals.length) select.append(el("option", { text: "none", attrs: { value: "" } }));
      principals.forEach((p, index) => select.append(el("option", { text: p.label, attrs: { value: index } })));
      select.disabled = principals.length === 0;
      if (id === "active-principal") select.value = String(active);
      else if (previous !== "" && Number(previous) < principals.length) select.value = previous;
    }
    if (principals.length > 1 && $("compare-a").value === $("compare-b").value) {
      $("compare-a").value = "0";
      $("compare-b").value = String(principals.length - 1);
    }
    const me = current();
    $("identity").textContent = me ? "Signed in as " + me.label : "Not signed in";
  }

  async function loadDemoUsers() {
    let reply;
    try {
      reply = await api("GET", "/console/demo-users");
    } catch (_) {
      return;
    }
    if (!reply.ok || !reply.body || !Array.isArray(reply.body.users)) return; // not demo mode
    const select = $("demo-user");
    for (const user of reply.body.users) {
      const roles = user.roles && user.roles.length ? " (" + user.roles.join(", ") + ")" : "";
      select.append(el("option", { text: user.id + " @ " + user.tenant + roles, attrs: { value: user.id } }));
    }
    const about = () => {
      const user = reply.body.users.find((u) => u.id === select.value);
      $("demo-about").textContent = user ? user.about + " — groups: " + (user.groups.join(", ") || "none") : "";
    };
    select.addEventListener("change", about);
    about();
    $("demo-form").hidden = false;
  }

  async function demoSignIn(event) {
    event.preventDefault();
    const user = $("demo-user").value;
    const reply = await api("POST", "/console/demo-token", undefined, { user });
    if (!reply.ok) {
      setStatus("signin-status", "Demo sign-in failed: " + errorText(reply), true);
      return;
    }
    addPrincipal(reply.body.token);
    setStatus("signin-status", "Signed in as demo user " + user + ".");
  }

  function tokenSignIn(event) {
    event.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) return;
    if (!decodeClaims(token)) {
      setStatus("signin-status", "That does not look like a JWT.", true);
      return;
    }
    addPrincipal(token);
    $("token-input").value = "";
    setStatus("signin-status", "Token added (the server verifies it on every request).");
  }

  // ---- answers ----
  function stageBar(stages) {
    // In pipeline order; a stage this list does not know goes last.
    const order = ["scope", "retrieval", "selection", "prompt", "generation", "validation", "repair"];
    const rank = (stage) => (order.indexOf(stage) < 0 ? order.length : order.indexOf(stage));
    const entries = Object.entries(stages || {})
      .filter(([, ms]) => typeof ms === "number")
      .sort(([a], [b]) => rank(a) - rank(b));
    const total = entries.reduce((sum, [, ms]) => sum + ms, 0);
    const wrapper = el("figure", { cls: "stages" });
    wrapper.append(el("figcaption", { text: "Stage timings: " + total.toFixed(1) + " ms in all" }));
    const bar = el("div", { cls: "stage-bar", attrs: { role: "img", "aria-label": entries.map(([s, ms]) => s + " " + ms.toFixed(1) + " ms").join(", ") } });
    const legend = el("ul", { cls: "stage-legend" });
    entries.forEach(([stage, ms], index) => {
      const segment = el("span", { cls: "stage s" + (index % 6), attrs: { title: stage + ": " + ms.toFixed(2) + " ms" } });
      segment.style.flexGrow = String(Math.max(ms, total / 200 || 0.01));
      bar.append(segment);
      legend.append(el("li", {}, el("span", { cls: "swatch s" + (index % 6), attrs: { "aria-hidden": "true" } }), stage + " " + ms.toFixed(1) + " ms"));
    });
    wrapper.append(bar, legend);
    return wrapper;
  }

  // "p. 4 · Travel › Hotels" from a citation's `location` (issue 49); "" when none is known.
  function formatLocation(location) {
    if (!location) return "";
    const parts = [];
    const pages = location.pages || [];
    if (pages.length > 1) parts.push("pp. " + pages[0] + "–" + pages[pages.length - 1]);
    else if (location.page) parts.push("p. " + location.page);
    if (location.section && location.section.length) parts.push(location.section.join(" › "));
    return parts.join(" · ");
  }

  function renderAnswer(container, reply, principal) {
    clear(container);
    if (!reply.ok) {
      container.append(el("p", { cls: "error", text: errorText(reply) }));
      return;
    }
    const body = reply.body;
    const head = el("p", { cls: "answer-head" },
      el("span", { cls: "badge " + body.status, text: body.status }),
      " ACL epoch ", el("strong", { text: body.acl_epoch, attrs: { "data-acl-epoch": body.acl_epoch } }),
      el("span", { cls: "muted small", text: " request " + body.request_id }));
    container.append(head);
    if (body.status === "answered" && body.answer) {
      const claims = el("ol", { cls: "claims" });
      for (const claim of body.answer.claims) {
        const item = el("li", { cls: "claim" }, el("span", { cls: "claim-text", text: claim.text }), " ");
        for (const citation of claim.citations) {
          const chip = el("button", {
            cls: "chip",
            text: citation.label,
            attrs: {
              type: "button",
              "data-doc-id": citation.doc_id,
              "aria-label": "Open source " + citation.label + ": " + citation.title + " (" + citation.doc_id + ")",
              title: citation.title,
            },
          });
          const where = formatLocation(citation.location);
          if (where) {
            chip.append(el("span", { cls: "chip-location", text: " " + where }));
            chip.setAttribute("aria-label", chip.getAttribute("aria-label") + ", " + where);
          }
          chip.addEventListener("click", () => openSource(citation, principal));
          item.append(chip, " ");
        }
        claims.append(item);
      }
      container.append(claims);
      // Claims the generator wrote that validation withheld: said, by code, never hidden.
      const withheld = body.answer.partial ? body.answer.withheld || [] : [];
      if (withheld.length) {
        const box = el("div", { cls: "withheld", attrs: { "data-withheld": withheld.length } },
          el("strong", { text: "Partial answer: " }),
          withheld.length + (withheld.length === 1 ? " claim was" : " claims were") + " withheld by validation ");
        withheld.forEach((entry) => box.append(el("code", { text: entry.reason }), " "));
        container.append(box);
      }
    } else if (body.abstention) {
      const reason = body.abstention.reason;
      const box = el("div", { cls: "abstention", attrs: { "data-reason": reason } },
        el("p", {}, el("strong", { text: "Abstained: " }), REASONS[reason] || "Unknown reason.", " ", el("code", { text: reason })));
      const diagnostics = body.abstention.diagnostics || [];
      if (diagnostics.length) {
        const ul = el("ul", { cls: "diagnostics" });
        diagnostics.forEach((d) => ul.append(el("li", {}, el("code", { text: d }))));
        box.append(el("p", { cls: "small", text: "Diagnostics:" }), ul);
      } else {
        box.append(el("p", { cls: "small muted", text: "No diagnostics." }));
      }
      container.append(box);
    }
    const metrics = body.metrics || {};
    container.append(stageBar(metrics.stages_ms));
    const rejected = Object.entries(metrics.citations_rejected || {});
    container.append(el("p", { cls: "small muted", text:
      "retrieved " + metrics.retrieved + ", in context " + metrics.context + ", generator attempts " + metrics.generator_attempts +
      (rejected.length ? ", rejected citations: " + rejected.map(([r, n]) => r + " " + n).join(", ") : "") }));
  }

  async function ask(principal, question) {
    return api("POST", "/v1/answer", principal.token, { question });
  }

  async function onAsk(event) {
    event.preventDefault();
    const me = current();
    if (!me) {
      setStatus("ask-status", "Sign in first.", true);
      return;
    }
    setStatus("ask-status", "Asking…");
    $("source-panel").hidden = true;
    try {
      const reply = await ask(me, $("question").value);
      renderAnswer($("ask-result"), reply, me);
      setStatus("ask-status", reply.ok ? "" : "Request failed.", !reply.ok);
    } catch (error) {
      setStatus("ask-status", "Request failed: " + error, true);
    }
  }

  // ---- sources ----
  // The document's text as code points, rebuilt from its chunks at their character offsets
  // (chunks overlap; a position no chunk covers stays null and shows as a gap).
  function documentCodePoints(chunks) {
    const end = chunks.reduce((max, chunk) => Math.max(max, chunk.end), 0);
    const points = new Array(end).fill(null);
    for (const chunk of chunks) {
      const chars = Array.from(chunk.text);
      for (let i = 0; i < chars.length && chunk.start + i < end; i++) points[chunk.start + i] = chars[i];
    }
    return points;
  }

  // [start, end) of `quote` in code points inside `points` from `from` to `to`, or null.
  function findQuote(points, from, to, quote) {
    if (!quote) return null;
    const span = points.slice(from, to).map((c) => (c === null ? "\u0000" : c)).join("");
    const at = span.indexOf(quote);
    if (at < 0) return null;
    const start = from + Array.from(span.slice(0, at)).length;
    return [start, start + Array.from(quote).length];
  }

  function appendRun(parent, points, from, to) {
    let text = "";
    const flush = () => {
      if (text) parent.append(document.createTextNode(text));
      text = "";
    };
    for (let i = from; i < to; i++) {
      if (points[i] === null) {
        flush();
        parent.append(el("span", { cls: "gap", text: "…", attrs: { title: "text not covered by any chunk" } }));
        while (i + 1 < to && points[i + 1] === null) i++;
      } else {
        text += points[i];
      }
    }
    flush();
  }

  function meta(dl, pairs) {
    clear(dl);
    for (const [name, value] of pairs) dl.append(el("dt", { text: name }), el("dd", { text: value }));
  }

  async function openSource(citation, principal) {
    const panel = $("source-panel");
    panel.hidden = false;
    $("source-title").textContent = citation.label + " · " + citation.title;
    const note = $("source-note");
    note.hidden = true;
    const quoteBox = $("source-quote-box");
    quoteBox.hidden = !citation.quote;
    $("source-quote").textContent = citation.quote || "";
    const text = $("source-text");
    clear(text);
    meta($("source-meta"), [
      ["document", citation.doc_id],
      ["version", String(citation.doc_version)],
      ["chunk", citation.chunk_id],
      ["characters", citation.start + "–" + citation.end],
      ["location", formatLocation(citation.location) || "—"],
    ]);
    $("source-title").focus();
    const reply = await api("GET", "/v1/documents/" + encodeURIComponent(citation.doc_id), principal.token);
    if (!reply.ok) {
      note.hidden = false;
      note.textContent = reply.status === 404
        ? "This principal can no longer read the document (revoked or deleted)."
        : "The document could not be read: " + errorText(reply);
      return;
    }
    const doc = reply.body;
    let start = citation.start;
    let end = citation.end;
    if (doc.doc_version !== citation.doc_version) {
      note.hidden = false;
      note.textContent = "The document changed since the answer: cited version " + citation.doc_version +
        ", now version " + doc.doc_version + ". The highlight may not match.";
      const same = doc.chunks.find((chunk) => chunk.chunk_id === citation.chunk_id);
      if (same) {
        start = same.start;
        end = same.end;
      }
    }
    const points = documentCodePoints(doc.chunks);
    start = Math.min(start, points.length);
    end = Math.min(Math.max(end, start), points.length);
    const quote = findQuote(points, start, end, citation.quote);
    appendRun(text, points, 0, start);
    const mark = el("mark", { cls: "cited", attrs: { "data-start": start, "data-end": end } });
    if (quote) {
      appendRun(mark, points, start, quote[0]);
      const strong = el("mark", { cls: "quote" });
      appendRun(strong, points, quote[0], quote[1]);
      mark.append(strong);
      appendRun(mark, points, quote[1], end);
    } else {
      appendRun(mark, points, start, end);
    }
    text.append(mark);
    appendRun(text, points, end, points.length);
    meta($("source-meta"), [
      ["document", doc.doc_id],
      ["version", String(doc.doc_version) + (doc.doc_version === citation.doc_version ? "" : " (cited " + citation.doc_version + ")")],
      ["chunk", citation.chunk_id],
      ["characters", start + "–" + end + " of " + points.length],
      ["location", formatLocation(citation.location) || "—"],
      ["ACL epoch", String(doc.acl_epoch)],
    ]);
    mark.scrollIntoView({ block: "nearest" });
  }

  // ---- compare ----
  async function onCompare(event) {
    event.preventDefault();
    const a = principals[Number($("compare-a").value)];
    const b = principals[Number($("compare-b").value)];
    if (!a || !b) {
      setStatus("compare-status", "Sign in as two principals first.", true);
      return;
    }
    setStatus("compare-status", "Asking both…");
    $("compare-a-title").textContent = a.label;
    $("compare-b-title").textContent = b.label;
    const question = $("compare-question").value;
    const [left, right] = await Promise.all([ask(a, question), ask(b, question)]);
    renderAnswer($("compare-a-result"), left, a);
    renderAnswer($("compare-b-result"), right, b);
    setStatus("compare-status", "");
  }

  // ---- admin ----
  function adminToken() {
    const me = current();
    if (!me) {
      setStatus("admin-status", "Sign in first.", true);
      return null;
    }
    return me.token;
  }

  function aclFromFields() {
    return { groups: list($("upload-groups").value), users: list($("upload-users").value) };
  }

  function documentsFromJson(value, acl) {
    const documents = Array.isArray(value) ? value : Array.isArray(value.documents) ? value.documents : [value];
    return documents.map((doc) => (doc && typeof doc === "object" && !doc.acl ? Object.assign({}, doc, { acl }) : doc));
  }

  function idFromName(name) {
    return name.replace(/\.[^.]*$/, "").replace(/[^A-Za-z0-9._-]+/g, "-").slice(0, 256) || "document";
  }

  async function onUpload(event) {
    event.preventDefault();
    const token = adminToken();
    if (!token) return;
    const acl = aclFromFields();
    const documents = [];
    try {
      for (const file of Array.from($("upload-file").files)) {
        const content = await file.text();
        if (/\.json$/i.test(file.name) || file.type === "application/json") {
          documents.push(...documentsFromJson(JSON.parse(content), acl));
        } else {
          documents.push({ doc_id: idFromName(file.name), title: file.name, text: content, acl });
        }
      }
    } catch (error) {
      setStatus("admin-status", "Cannot read the files: " + error, true);
      return;
    }
    const pasted = $("upload-text").value;
    if (pasted.trim()) {
      const docId = $("upload-doc-id").value.trim() || "pasted-document";
      documents.push({ doc_id: docId, title: $("upload-title-input").value.trim() || docId, text: pasted, acl });
    }
    if (!documents.length) {
      setStatus("admin-status", "Choose files or paste text first.", true);
      return;
    }
    const reply = await api("PUT", "/v1/admin/documents", token, { documents });
    if (!reply.ok) {
      setStatus("admin-status", "Upload failed: " + errorText(reply), true);
      return;
    }
    setStatus("admin-status", "Uploaded " + reply.body.documents + " document(s), " + reply.body.chunks + " chunk(s); ACL epoch " + reply.body.acl_epoch + ".");
    $("upload-file").value = "";
    refreshFeed();
  }

  async function onAcl(kind) {
    const token = adminToken();
    if (!token) return;
    const docId = $("acl-doc-id").value.trim();
    if (!docId) {
      setStatus("admin-status", "Name a document.", true);
      return;
    }
    let reply;
    if (kind === "delete") {
      reply = await api("DELETE", "/v1/admin/documents/" + encodeURIComponent(docId), token);
    } else {
      const body = { doc_id: docId };
      const groups = list($("acl-groups").value);
      const users = list($("acl-users").value);
      if (groups.length) body.groups = groups;
      if (users.length) body.users = users;
      reply = await api("POST", "/v1/admin/acl/" + kind, token, body);
    }
    if (!reply.ok) {
      setStatus("admin-status", kind + " failed: " + errorText(reply), true);
      return;
    }
    const done = { grant: "Granted", revoke: "Revoked", delete: "Deleted" }[kind];
    setStatus("admin-status", done + " " + docId + "; ACL epoch now " + reply.body.acl_epoch + " (in effect for every request from now on).");
    refreshFeed();
  }

  // A change's mutation is tagged by `kind` ({"kind": "revoke", "tenant", "doc_id", ...}).
  function summarize(mutation) {
    if (!mutation || typeof mutation !== "object") return ["change", "", JSON.stringify(mutation)];
    const kind = typeof mutation.kind === "string" ? mutation.kind : "change";
    const docId = typeof mutation.doc_id === "string" ? mutation.doc_id : "";
    const rest = Object.entries(mutation)
      .filter(([key]) => !["kind", "doc_id", "tenant"].includes(key))
      .map(([key, value]) => key + ": " + JSON.stringify(value))
      .join("; ");
    return [kind, docId, rest];
  }

  async function refreshFeed() {
    const token = current() && current().token;
    if (!token) return;
    const reply = await api("GET", "/v1/admin/acl/changes?since=0", token);
    const body = $("feed").querySelector("tbody");
    clear(body);
    if (!reply.ok) {
      body.append(el("tr", {}, el("td", { text: errorText(reply), attrs: { colspan: 4 } })));
      return;
    }
    const changes = reply.body.changes.slice().reverse();
    for (const change of changes) {
      const [kind, docId, rest] = summarize(change.mutation);
      body.append(el("tr", {}, el("td", { text: change.epoch }), el("td", { text: kind }), el("td", { text: docId }), el("td", { cls: "small", text: rest })));
    }
    if (!changes.length) body.append(el("tr", {}, el("td", { text: "no changes", attrs: { colspan: 4 } })));
  }

  // ---- ops ----
  function parseLabels(text) {
    const labels = {};
    const pattern = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    let match;
    while ((match = pattern.exec(text)) !== null) labels[match[1]] = match[2].replace(/\\(.)/g, "$1");
    return labels;
  }

  function parseMetrics(text) {
    const series = [];
    for (const line of text.split("\n")) {
      if (!line || line.startsWith("#")) continue;
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)/.exec(line);
      if (!match) continue;
      series.push({ name: match[1], labels: parseLabels(match[2] || ""), value: Number(match[3]) });
    }
    return series;
  }

  function quantile(buckets, q) {
    // buckets: sorted [{le, count}] cumulative; linear interpolation inside the bucket.
    const total = buckets.length ? buckets[buckets.length - 1].count : 0;
    if (!total) return null;
    const rank = q * total;
    let previousLe = 0;
    let previousCount = 0;
    for (const bucket of buckets) {
      if (bucket.count >= rank) {
        if (!isFinite(bucket.le)) return previousLe;
        const inBucket = bucket.count - previousCount;
        const fraction = inBucket > 0 ? (rank - previousCount) / inBucket : 0;
        return previousLe + (bucket.le - previousLe) * fraction;
      }
      previousLe = bucket.le;
      previousCount = bucket.count;
    }
    return previousLe;
  }

  function rows(tbody, entries) {
    clear(tbody);
    if (!entries.length) tbody.append(el("tr", {}, el("td", { text: "none yet" })));
    for (const cells of entries) {
      tbody.append(el("tr", {}, ...cells.map((cell, i) => el(i === 0 ? "th" : "td", { text: cell, attrs: i === 0 ? { scope: "row" } : {} }))));
    }
  }

  async function refreshOps() {
    setStatus("ops-status", "Loading…");
    const [ready, metrics] = await Promise.all([api("GET", "/readyz"), api("GET", "/metrics")]);
    const r = ready.body || {};
    meta($("ops-ready"), [
      ["status", String(r.status || ready.status)],
      ["embedder", String(r.embedder || "?")],
      ["generator", String(r.generator || "?")],
      ["ACL epoch", String(r.acl_epoch)],
      ["lineage", String(r.lineage || "")],
    ]);
    const series = typeof metrics.body === "string" ? parseMetrics(metrics.body) : [];
    const value = (name) => {
      const found = series.find((s) => s.name === name);
      return found ? String(found.value) : "?";
    };
    meta($("ops-index"), [
      ["live documents", value("warrant_live_documents")],
      ["chunks", value("warrant_index_chunks")],
      ["vectors", value("warrant_index_vectors")],
      ["lexical documents", value("warrant_index_lexical_docs")],
    ]);
    rows($("ops-answers").querySelector("tbody"), series
      .filter((s) => s.name === "warrant_answers_total")
      .map((s) => [s.labels.status + (s.labels.reason ? " / " + s.labels.reason : ""), String(s.value)]));
    rows($("ops-rejected").querySelector("tbody"), series
      .filter((s) => s.name === "warrant_citations_rejected_total")
      .map((s) => [s.labels.reason || "?", String(s.value)]));
    const stages = {};
    for (const s of series.filter((s) => s.name === "warrant_stage_duration_seconds_bucket")) {
      (stages[s.labels.stage] = stages[s.labels.stage] || []).push({ le: s.labels.le === "+Inf" ? Infinity : Number(s.labels.le), count: s.value });
    }
    const ms = (seconds) => (seconds === null ? "–" : (seconds * 1000).toFixed(2));
    rows($("ops-stages").querySelector("tbody"), Object.keys(stages).sort().map((stage) => {
      const buckets = stages[stage].sort((x, y) => x.le - y.le);
      const count = buckets.length ? buckets[buckets.length - 1].count : 0;
      return [stage, String(count), ms(quantile(buckets, 0.5)), ms(quantile(buckets, 0.95)), ms(quantile(buckets, 0.99))];
    }));
    setStatus("ops-status", ready.ok && metrics.ok ? "Updated " + new Date().toLocaleTimeString() : "Some endpoints failed.", !(ready.ok && metrics.ok));
  }

  // ---- views ----
  function show(name) {
    viewName = name;
    for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== "view-" + name;
    for (const tab of document.querySelectorAll(".tab")) {
      const on = tab.dataset.view === name;
      tab.setAttribute("aria-current", on ? "page" : "false");
    }
    if (name === "ops") refreshOps();
    if (name === "admin") refreshFeed();
    if (location.hash !== "#" + name) history.replaceState(null, "", "#" + name);
  }

  function start() {
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => show(tab.dataset.view));
    $("demo-form").addEventListener("submit", demoSignIn);
    $("token-form").addEventListener("submit", tokenSignIn);
    $("active-principal").addEventListener("change", (event) => {
      active = Number(event.target.value);
      renderPrincipals();
      setStatus("signin-status", "");
      if (viewName === "admin") refreshFeed();
    });
    $("ask-form").addEventListener("submit", onAsk);
    $("compare-form").addEventListener("submit", onCompare);
    $("source-close").addEventListener("click", () => {
      $("source-panel").hidden = true;
    });
    $("upload-form").addEventListener("submit", onUpload);
    $("acl-grant").addEventListener("click", () => onAcl("grant"));
    $("acl-revoke").addEventListener("click", () => onAcl("revoke"));
    $("acl-delete").addEventListener("click", () => onAcl("delete"));
    $("feed-refresh").addEventListener("click", refreshFeed);
    $("ops-refresh").addEventListener("click", refreshOps);
    renderPrincipals();
    loadDemoUsers();
    const initial = (location.hash || "#ask").slice(1);
    show(["ask", "compare", "admin", "ops"].includes(initial) ? initial : "ask");
    document.body.dataset.ready = "true";
  }

  document.addEventListener("DOMContentLoaded", start);
})();
