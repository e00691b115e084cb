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
    material_claim_unsupported:
      "A claim on what was asked did not hold, also after one repair; the rest would not answer the question.",
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
    if (body instanceof FormData) {
      init.body = body; // the browser sets multipart/form-data with its boundary
    } else if (body !== undefined) {
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
    probeReviewer();
    if (viewName === "review") loadQueue(false);
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
    if (body.review && body.review.queued) {
      container.append(el("p", { cls: "small muted queued", attrs: { "data-review-id": body.review.review_id } },
        "Queued for human review: ", el("code", { text: body.review.review_id })));
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

  // A source panel's parts, by id prefix ("source": Ask's, "review-source": the Review view's).
  function sourceParts(prefix) {
    const part = (name) => $(prefix + "-" + name);
    return {
      panel: part("panel"), title: part("title"), meta: part("meta"), note: part("note"),
      quoteBox: part("quote-box"), quote: part("quote"), text: part("text"),
    };
  }

  // Shows a panel with its title, quote and metadata, text and note cleared.
  function openPanel(parts, title, quote, pairs, focus) {
    parts.panel.hidden = false;
    parts.title.textContent = title;
    parts.note.hidden = true;
    parts.quoteBox.hidden = !quote;
    parts.quote.textContent = quote || "";
    clear(parts.text);
    meta(parts.meta, pairs);
    if (focus) parts.title.focus();
  }

  function panelNote(parts, text) {
    parts.note.hidden = false;
    parts.note.textContent = text;
  }

  // Writes `points` into the panel's text with [start, end) marked as cited and, inside it, the
  // quote ([from, to) or null) marked as the quote; scrolls the mark into view.
  function highlight(parts, points, start, end, quote) {
    appendRun(parts.text, points, 0, start);
    const mark = el("mark", { cls: "cited", attrs: { "data-start": start, "data-end": end } });
    if (quote) {
      appendRun(mark, points, start, quote[0]);
      const strong = el("mark", { cls: "quote", attrs: { "data-start": quote[0], "data-end": quote[1] } });
      appendRun(strong, points, quote[0], quote[1]);
      mark.append(strong);
      appendRun(mark, points, quote[1], end);
    } else {
      appendRun(mark, points, start, end);
    }
    parts.text.append(mark);
    appendRun(parts.text, points, end, points.length);
    mark.scrollIntoView({ block: "nearest" });
  }

  async function openSource(citation, principal) {
    const parts = sourceParts("source");
    openPanel(parts, citation.label + " · " + citation.title, citation.quote, [
      ["document", citation.doc_id],
      ["version", String(citation.doc_version)],
      ["chunk", citation.chunk_id],
      ["characters", citation.start + "–" + citation.end],
      ["location", formatLocation(citation.location) || "—"],
    ], true);
    const reply = await api("GET", "/v1/documents/" + encodeURIComponent(citation.doc_id), principal.token);
    if (!reply.ok) {
      panelNote(parts, reply.status === 404
        ? "This principal can no longer read the document (revoked or deleted)."
        : "The document could not be read: " + errorText(reply));
      return;
    }
    const doc = reply.body;
    let start = citation.start;
    let end = citation.end;
    if (doc.doc_version !== citation.doc_version) {
      panelNote(parts, "The document changed since the answer: cited version " + citation.doc_version +
        ", now version " + doc.doc_version + ". The highlight may not match.");
      const same = doc.chunks.find((chunk) => chunk.chunk_id === citation.chunk_id);
      if (same) {
        start = same.start;
        end = same.end;
      }
    }
    const points = documentCodePoints(doc.chunks);
    start = Math.min(start, points.length);
    end = Math.min(Math.max(end, start), points.length);
    highlight(parts, points, start, end, findQuote(points, start, end, citation.quote));
    meta(parts.meta, [
      ["document", doc.doc_id],
      ["version", String(doc.doc_version) + (doc.doc_version === citation.doc_version ? "" : " (cited " + citation.doc_version + ")")],
      ["chunk", citation.chunk_id],
      ["characters", start + "–" + end + " of " + points.length],
      ["location", formatLocation(citation.location) || "—"],
      ["ACL epoch", String(doc.acl_epoch)],
    ]);
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

  // The media type of a file the server extracts, from its extension (as `warrant ingest`).
  function contentTypeOf(name) {
    const extension = (name.match(/\.([^.]+)$/) || [])[1];
    const types = {
      pdf: "application/pdf",
      docx: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
      html: "text/html", htm: "text/html", xhtml: "text/html",
      md: "text/markdown", markdown: "text/markdown",
      txt: "text/plain", text: "text/plain",
    };
    return extension ? types[extension.toLowerCase()] : undefined;
  }

  async function onUpload(event) {
    event.preventDefault();
    const token = adminToken();
    if (!token) return;
    const acl = aclFromFields();
    const documents = [];
    // Files the server extracts go as multipart/form-data (POST /v1/admin/files): no base64, and
    // up to server.max_upload_bytes, where a JSON body stops at server.max_body_bytes.
    const form = new FormData();
    let files = 0;
    acl.groups.forEach((group) => form.append("groups", group));
    acl.users.forEach((user) => form.append("users", user));
    try {
      for (const file of Array.from($("upload-file").files)) {
        const contentType = contentTypeOf(file.name);
        if (/\.json$/i.test(file.name) || file.type === "application/json") {
          documents.push(...documentsFromJson(JSON.parse(await file.text()), acl));
        } else if (contentType) {
          form.append("doc_id", idFromName(file.name));
          form.append("title", file.name);
          form.append("file", new Blob([file], { type: contentType }), file.name);
          files += 1;
        } else {
          documents.push({ doc_id: idFromName(file.name), title: file.name, text: await file.text(), acl });
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
    if (!documents.length && !files) {
      setStatus("admin-status", "Choose files or paste text first.", true);
      return;
    }
    // Two batches at most (each all or nothing): the files, then the JSON and pasted documents.
    const done = [];
    for (const [path, method, body, what] of [
      ["/v1/admin/files", "POST", files ? form : null, "the files"],
      ["/v1/admin/documents", "PUT", documents.length ? { documents } : null, "the documents"],
    ]) {
      if (!body) continue;
      const reply = await api(method, path, token, body);
      if (!reply.ok) {
        const before = done.length ? "Uploaded " + uploadedText(done) + ", but " + what + " failed: " : "Upload failed: ";
        setStatus("admin-status", before + errorText(reply), true);
        if (done.length) refreshFeed();
        return;
      }
      done.push(reply.body);
    }
    setStatus("admin-status", "Uploaded " + uploadedText(done) + "; ACL epoch " + done[done.length - 1].acl_epoch + ".");
    $("upload-file").value = "";
    refreshFeed();
  }

  // "2 document(s), 5 chunk(s)" over the batches' replies.
  function uploadedText(replies) {
    const sum = (field) => replies.reduce((total, reply) => total + reply[field], 0);
    return sum("documents") + " document(s), " + sum("chunks") + " chunk(s)";
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

  // ---- review ----
  // The queue of the active principal's tenant (role reviewer), one item as the reviewer may see
  // it now, and verdicts. The server decides everything: who is a reviewer (the tab shows when
  // `GET /v1/reviews` answers 200), what is readable, which verdicts are valid.
  const CLAIM_VERDICTS = ["supported", "partially_supported", "unsupported", "wrong_citation"];
  const ABSTENTION_VERDICTS = ["correct_abstention", "should_have_answered"];
  const PAGE_SIZE = 10;
  const review = {
    cursor: null, // next_cursor of the last page loaded
    ids: [], // review ids listed, newest first
    item: null, // the item shown (GET /v1/reviews/{id} body)
    principal: null, // whom it was loaded for
    targets: [], // {kind: "claim", index} | {kind: "abstention"}, in the order shown
    selected: 0,
    draft: new Map(), // target key ("c<index>" or "abstention") -> verdict
    generation: 0, // bumps on every queue load, so a late reply is dropped
  };

  function reviewTab() {
    return document.querySelector('.tab[data-view="review"]');
  }

  // Shows the Review tab when the server says the active principal is a reviewer.
  async function probeReviewer() {
    const me = current();
    const item = reviewTab().parentElement;
    if (!me) {
      item.hidden = true;
      return;
    }
    let ok = false;
    try {
      ok = (await api("GET", "/v1/reviews?status=pending&limit=1", me.token)).ok;
    } catch (_) {
      ok = false;
    }
    if (current() === me) item.hidden = !ok;
  }

  function when(ms) {
    return new Date(ms).toLocaleString();
  }

  async function loadQueue(more) {
    const me = current();
    const list = $("review-queue");
    const generation = ++review.generation;
    if (!more) {
      clear(list);
      review.ids = [];
      review.cursor = null;
      $("review-more").hidden = true;
      if (review.principal !== me) clearItem();
    }
    if (!me) {
      setStatus("review-status", "Sign in first.", true);
      return;
    }
    const query = new URLSearchParams({ status: $("review-filter").value, limit: String(PAGE_SIZE) });
    if (more && review.cursor) query.set("cursor", review.cursor);
    setStatus("review-status", "Loading…");
    let reply;
    try {
      reply = await api("GET", "/v1/reviews?" + query, me.token);
    } catch (error) {
      reply = { ok: false, status: 0, body: String(error) };
    }
    if (generation !== review.generation) return;
    if (!reply.ok) {
      setStatus("review-status", "The queue could not be read: " + errorText(reply), true);
      clearItem();
      return;
    }
    for (const summary of reply.body.items) {
      if (review.ids.includes(summary.review_id)) continue;
      review.ids.push(summary.review_id);
      list.append(queueEntry(summary, me));
    }
    review.cursor = reply.body.next_cursor || null;
    $("review-more").hidden = !review.cursor;
    markCurrent();
    setStatus("review-status", review.ids.length
      ? review.ids.length + " " + $("review-filter").value + " item(s) shown" + (review.cursor ? "; older ones on the next page." : ".")
      : "No " + $("review-filter").value + " items.");
  }

  function queueEntry(summary, principal) {
    const why = summary.outcome === "abstained" ? "abstained (" + (summary.reason || "?") + ")" : summary.outcome + (summary.partial ? ", partial" : "");
    const button = el("button", { cls: "queue-item", attrs: { type: "button", "data-review-id": summary.review_id } },
      el("span", { cls: "queue-question", text: summary.question }),
      el("span", { cls: "small muted", text:
        summary.route + " · " + why + " · asked by " + summary.asker + " · " + when(summary.created_ms) +
        " · " + summary.claims + " claim(s), " + summary.verdicts + " verdict(s)" }));
    button.addEventListener("click", () => openItem(summary.review_id, principal));
    return el("li", {}, button);
  }

  function markCurrent() {
    const id = review.item && review.item.review_id;
    for (const button of document.querySelectorAll("#review-queue .queue-item")) {
      button.setAttribute("aria-current", button.dataset.reviewId === id ? "true" : "false");
    }
  }

  function clearItem() {
    review.item = null;
    review.principal = null;
    review.targets = [];
    review.draft = new Map();
    clear($("review-item"));
    $("review-source-panel").hidden = true;
  }

  async function openItem(reviewId, principal, keepStatus) {
    if (current() !== principal) return;
    let reply;
    try {
      reply = await api("GET", "/v1/reviews/" + encodeURIComponent(reviewId), principal.token);
    } catch (error) {
      reply = { ok: false, status: 0, body: String(error) };
    }
    if (current() !== principal) return;
    if (!reply.ok) {
      clearItem();
      setStatus("review-status", "The item could not be read: " + errorText(reply), true);
      return;
    }
    review.item = reply.body;
    review.principal = principal;
    review.draft = new Map();
    review.targets = reply.body.claims.map((claim) => ({ kind: "claim", index: claim.index }));
    if (reply.body.abstention) review.targets.push({ kind: "abstention" });
    review.selected = 0;
    if (!keepStatus) setStatus("review-status", "");
    renderItem();
    markCurrent();
    selectTarget(0, false);
  }

  function targetKey(target) {
    return target.kind === "claim" ? "c" + target.index : "abstention";
  }

  function sourceByLabel(label) {
    return review.item.sources.find((source) => source.label === label) || null;
  }

  function renderItem() {
    const item = review.item;
    const box = $("review-item");
    clear(box);
    box.append(
      el("p", { cls: "answer-head" },
        el("span", { cls: "badge " + item.status, text: item.status }),
        el("span", { cls: "badge " + item.outcome, text: item.outcome }),
        el("span", { cls: "small muted", text: " routed as " + item.route + " · asked by " + item.asker + " · " + when(item.created_ms) +
          " · ACL epoch " + item.acl_epoch + " · request " + item.request_id })),
      el("p", { cls: "question" }, el("strong", { text: "Question: " }), item.question));

    const sources = el("ul", { cls: "sources small" });
    for (const source of item.sources) {
      sources.append(source.readable
        ? el("li", {}, el("strong", { text: source.label }), " " + source.title + " (" + source.doc_id + ", version " + source.doc_version + ")")
        : el("li", { cls: "withheld-source", attrs: { "data-label": source.label } }, el("strong", { text: source.label }), " " + source.withheld));
    }
    box.append(el("h3", { text: "Sources (the final context)" }), sources);

    if (item.generated_text !== "shown") {
      box.append(el("p", { cls: "withheld", attrs: { "data-generated": "withheld" } },
        el("strong", { text: "The generator's text is withheld: " }),
        "not readable by you (a source above is not readable by you, or its text was purged). Claims can be judged only by a reviewer who may read every source."));
    }

    const claims = el("ol", { cls: "review-claims", attrs: { "aria-label": "Claims and abstention" } });
    review.targets.forEach((target, position) => {
      claims.append(target.kind === "claim" ? claimEntry(item.claims.find((c) => c.index === target.index), position) : abstentionEntry(position));
    });
    if (!review.targets.length) claims.append(el("li", { cls: "muted", text: "The generator produced no claim." }));
    box.append(el("h3", { text: "Claims" }), claims);

    const form = el("form", { cls: "stack", attrs: { id: "review-verdict-form" } },
      el("label", { text: "Note (optional; shown to reviewers who may read every source)", attrs: { for: "review-note" } }),
      el("textarea", { attrs: { id: "review-note", rows: 2 } }),
      el("div", { cls: "row" }, el("button", { text: "Submit verdicts (s)", attrs: { type: "submit", id: "review-submit" } })));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      submitVerdicts();
    });
    box.append(form);

    if (item.verdicts.length) {
      const trail = el("ul", { cls: "verdicts small" });
      for (const verdict of item.verdicts) {
        const parts = verdict.claims.map((c) => "claim " + c.index + ": " + c.verdict);
        if (verdict.abstention) parts.push("abstention: " + verdict.abstention.verdict + (verdict.abstention.doc_id ? " (" + verdict.abstention.doc_id + ")" : ""));
        trail.append(el("li", { attrs: { "data-reviewer": verdict.reviewer } },
          el("strong", { text: verdict.reviewer }), " " + when(verdict.at_ms) + ": " + parts.join("; "),
          verdict.note ? el("span", { cls: "muted", text: " — " + verdict.note }) : null));
      }
      box.append(el("h3", { text: "Verdicts so far" }), trail);
    }
  }

  function verdictButtons(target, labels, disabled) {
    const name = target.kind === "claim" ? "Verdict for claim " + target.index : "Verdict for the abstention";
    const group = el("div", { cls: "row verdict-buttons", attrs: { role: "group", "aria-label": name } });
    labels.forEach((label, i) => {
      const button = el("button", {
        cls: "verdict",
        text: (i + 1) + " " + label,
        attrs: { type: "button", "data-verdict": label, "aria-pressed": "false", title: "key " + (i + 1) },
      });
      button.disabled = disabled;
      button.addEventListener("click", () => {
        review.selected = review.targets.indexOf(target);
        choose(target, label);
        selectTarget(review.selected, false);
      });
      group.append(button);
    });
    return group;
  }

  function claimEntry(claim, position) {
    const target = review.targets[position];
    const li = el("li", { cls: "review-claim " + claim.status, attrs: { "data-index": claim.index, "data-target": targetKey(target), tabindex: "-1" } });
    const head = el("p", { cls: "claim-head" },
      el("span", { cls: "chip status-" + claim.status, text: claim.status }), " ",
      el("span", { cls: "small muted", text: "claim " + claim.index + " · attempt " + claim.attempt + ", position " + claim.position + (claim.anchored ? " · citation chosen by the server" : "") }));
    claim.codes.forEach((code) => head.append(" ", el("code", { cls: "code", text: code })));
    li.append(head);
    if (claim.text !== undefined) li.append(el("p", { cls: "claim-text", text: claim.text }));
    else li.append(el("p", { cls: "claim-text muted", text: "Claim text not readable by you." }));
    if (claim.answer) li.append(el("p", { cls: "small" }, el("strong", { text: "Short answer: " }), claim.answer));
    const chips = el("p", { cls: "row" });
    for (const citation of claim.citations) {
      const source = sourceByLabel(citation.label);
      const chip = el("button", {
        cls: "chip" + (source && source.readable ? "" : " unreadable"),
        text: citation.label,
        attrs: { type: "button", "data-label": citation.label, "aria-label": "Show cited source " + citation.label + " for claim " + claim.index },
      });
      chip.addEventListener("click", () => {
        review.selected = position;
        selectTarget(position, false, citation);
      });
      chips.append(chip);
    }
    if (!claim.citations.length) chips.append(el("span", { cls: "small muted", text: "no citation" }));
    li.append(chips, verdictButtons(target, CLAIM_VERDICTS, review.item.generated_text !== "shown"));
    li.addEventListener("click", (event) => {
      if (event.target.closest("button")) return;
      selectTarget(position, false);
    });
    return li;
  }

  function abstentionEntry(position) {
    const target = review.targets[position];
    const abstention = review.item.abstention;
    const li = el("li", { cls: "review-claim abstention", attrs: { "data-target": "abstention", tabindex: "-1", "data-reason": abstention.reason } },
      el("p", {}, el("strong", { text: "Abstained: " }), REASONS[abstention.reason] || "Unknown reason.", " ", el("code", { text: abstention.reason })));
    if (abstention.diagnostics.length) {
      const ul = el("ul", { cls: "diagnostics" });
      abstention.diagnostics.forEach((d) => ul.append(el("li", {}, el("code", { text: d }))));
      li.append(ul);
    }
    li.append(verdictButtons(target, ABSTENTION_VERDICTS, false),
      el("label", { text: "Document that answers the question (optional)", attrs: { for: "review-abstention-doc" } }),
      el("input", { attrs: { id: "review-abstention-doc", type: "text", autocomplete: "off", spellcheck: "false" } }));
    li.addEventListener("click", (event) => {
      if (event.target.closest("button")) return;
      selectTarget(position, false);
    });
    return li;
  }

  // Sets (or, chosen again, clears) the draft verdict of `target` and shows it on its buttons.
  function choose(target, label) {
    const key = targetKey(target);
    if (review.draft.get(key) === label) review.draft.delete(key);
    else review.draft.set(key, label);
    const entry = document.querySelector('#review-item [data-target="' + key + '"]');
    if (!entry) return;
    for (const button of entry.querySelectorAll("button.verdict")) {
      button.setAttribute("aria-pressed", button.dataset.verdict === review.draft.get(key) ? "true" : "false");
    }
  }

  // Selects target `position` and shows `citation` (default: the claim's first) in the source panel.
  function selectTarget(position, focus, citation) {
    if (!review.item || !review.targets.length) return;
    review.selected = Math.max(0, Math.min(position, review.targets.length - 1));
    const target = review.targets[review.selected];
    const key = targetKey(target);
    let entry = null;
    for (const node of document.querySelectorAll("#review-item .review-claim")) {
      const on = node.dataset.target === key;
      node.classList.toggle("selected", on);
      node.setAttribute("aria-current", on ? "true" : "false");
      if (on) entry = node;
    }
    if (entry && focus) entry.focus();
    if (target.kind !== "claim") {
      $("review-source-panel").hidden = true;
      return;
    }
    const claim = review.item.claims.find((c) => c.index === target.index);
    const shown = citation || claim.citations[0];
    if (shown) showCited(claim, shown);
    else $("review-source-panel").hidden = true;
  }

  // The cited source of one claim from the item's stored chunk text (what the generator saw), at
  // its character offsets, with the chunk and the quote highlighted as in Ask.
  function showCited(claim, citation) {
    const parts = sourceParts("review-source");
    const source = sourceByLabel(citation.label);
    const title = "Claim " + claim.index + " · " + citation.label + (source && source.readable ? " · " + source.title : "");
    if (!source) {
      openPanel(parts, title, citation.quote, [["label", citation.label]], false);
      panelNote(parts, citation.label + " was not in the final context (the claim cited a label it was not shown).");
      return;
    }
    if (!source.readable) {
      openPanel(parts, title, null, [["label", citation.label]], false);
      panelNote(parts, citation.label + ": " + source.withheld + ".");
      parts.text.append(el("span", { cls: "gap", text: source.withheld }));
      return;
    }
    openPanel(parts, title, citation.quote, [
      ["document", source.doc_id],
      ["version", String(source.doc_version)],
      ["chunk", source.chunk_id],
      ["characters", source.start + "–" + source.end],
    ], false);
    const points = documentCodePoints([{ start: source.start, end: source.end, text: source.text }]);
    let quote = null;
    if (typeof citation.quote_start === "number" && typeof citation.quote_end === "number") {
      quote = [Math.max(citation.quote_start, source.start), Math.min(citation.quote_end, source.end)];
      parts.meta.append(el("dt", { text: "quote" }), el("dd", { text: citation.quote_start + "–" + citation.quote_end }));
    } else {
      quote = findQuote(points, source.start, source.end, citation.quote);
      if (citation.quote && !quote) panelNote(parts, "The quote as written is not in this source.");
    }
    highlight(parts, points, source.start, source.end, quote);
  }

  async function submitVerdicts() {
    const item = review.item;
    const principal = review.principal;
    if (!item || current() !== principal) return;
    const body = { claims: [] };
    for (const target of review.targets) {
      const verdict = review.draft.get(targetKey(target));
      if (!verdict) continue;
      if (target.kind === "claim") body.claims.push({ index: target.index, verdict });
      else {
        body.abstention = { verdict };
        const docId = $("review-abstention-doc").value.trim();
        if (docId) body.abstention.doc_id = docId;
      }
    }
    const note = $("review-note").value;
    if (note.trim()) body.note = note;
    setStatus("review-status", "Submitting…");
    let reply;
    try {
      reply = await api("POST", "/v1/reviews/" + encodeURIComponent(item.review_id) + "/verdicts", principal.token, body);
    } catch (error) {
      reply = { ok: false, status: 0, body: String(error) };
    }
    if (!reply.ok) {
      setStatus("review-status", "Verdict not stored: " + errorText(reply), true);
      return;
    }
    setStatus("review-status", "Verdict stored: item " + reply.body.review_id + " " + reply.body.status + " by " + reply.body.reviewer + " at " + when(reply.body.at_ms) + ".");
    await openItem(item.review_id, principal, true);
    const status = $("review-status").textContent;
    await loadQueue(false);
    setStatus("review-status", status);
  }

  function stepQueue(delta) {
    const id = review.item && review.item.review_id;
    const at = review.ids.indexOf(id);
    const next = review.ids[at < 0 ? 0 : at + delta];
    if (next && current()) openItem(next, current());
    else if (delta > 0 && review.cursor) setStatus("review-status", "Load the older items first.");
  }

  function onReviewKey(event) {
    if (viewName !== "review" || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target && ["review-note", "review-abstention-doc"].includes(target.id) && event.key === "Escape") {
      target.blur();
      $("review-item").querySelector(".review-claim.selected")?.focus();
      return;
    }
    if (target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) return;
    const key = event.key;
    let handled = true;
    if (key === "r") loadQueue(false);
    else if (key === "]") stepQueue(1);
    else if (key === "[") stepQueue(-1);
    else if (!review.item) handled = false;
    else if (key === "j") selectTarget(review.selected + 1, true);
    else if (key === "k") selectTarget(review.selected - 1, true);
    else if (key === "n") $("review-note").focus();
    else if (key === "s") submitVerdicts();
    else if (/^[1-4]$/.test(key) && review.targets.length) {
      const chosen = review.targets[review.selected];
      const labels = chosen.kind === "claim" ? CLAIM_VERDICTS : ABSTENTION_VERDICTS;
      const label = labels[Number(key) - 1];
      const disabled = chosen.kind === "claim" && review.item.generated_text !== "shown";
      if (label && !disabled) choose(chosen, label);
      else handled = false;
    } else handled = false;
    if (handled) event.preventDefault();
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
    if (name === "review") loadQueue(false);
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
    $("review-filter").addEventListener("change", () => loadQueue(false));
    $("review-refresh").addEventListener("click", () => loadQueue(false));
    $("review-more").addEventListener("click", () => loadQueue(true));
    document.addEventListener("keydown", onReviewKey);
    renderPrincipals();
    loadDemoUsers();
    const initial = (location.hash || "#ask").slice(1);
    show(["ask", "compare", "admin", "ops", "review"].includes(initial) ? initial : "ask");
    document.body.dataset.ready = "true";
  }

  document.addEventListener("DOMContentLoaded", start);
})();
