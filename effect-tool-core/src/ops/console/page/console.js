// The operator console: a page over the console's JSON API (`api/...`, same origin).
// Everything the journal holds is shown with textContent, never as HTML: tool inputs come from
// a model and may hold anything.
"use strict";

const TOKEN = "effect-tool-console-token";
const NEEDS_A_PERSON = ["in-doubt", "awaiting-approval", "stale"];
const $ = (id) => document.getElementById(id);

function text(tag, value, attrs) {
  const el = document.createElement(tag);
  if (value !== undefined && value !== null) el.textContent = String(value);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  return el;
}

function when(ms) {
  return typeof ms === "number" ? new Date(ms).toISOString().replace(".000Z", "Z") : "";
}

function show(message, isError) {
  const box = $("message");
  box.textContent = message;
  box.className = isError ? "error" : "";
  box.hidden = false;
}

async function api(path, body) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN);
  if (token) headers.Authorization = "Bearer " + token;
  const init = { headers, credentials: "same-origin" };
  if (body !== undefined) {
    init.method = "POST";
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch("api/" + path, init);
  let json = null;
  try { json = await response.json(); } catch (_) { /* not JSON */ }
  return { ok: response.ok, status: response.status, json: json || {} };
}

function refusal(answer) {
  const hint = answer.json.hint ? " (" + answer.json.hint + ")" : "";
  return (answer.json.error || "HTTP " + answer.status) + hint;
}

async function boot() {
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN, $("signin-token").value.trim());
    location.reload();
  });
  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN);
    location.reload();
  });
  const me = await api("me");
  if (me.status === 401) {
    if (sessionStorage.getItem(TOKEN)) show("That token was not accepted.", true);
    sessionStorage.removeItem(TOKEN);
    $("signin-view").hidden = false;
    return;
  }
  if (!me.ok) { show(refusal(me), true); return; }
  const roles = (me.json.roles || []).join(", ") || "no roles";
  $("whoami").textContent = "Signed in as " + me.json.name + " (" + roles + ")";
  $("whoami").hidden = false;
  $("signout").hidden = !sessionStorage.getItem(TOKEN);
  const params = new URLSearchParams(location.search);
  if (location.pathname.endsWith("/record")) {
    await recordView(params.get("key") || "", me.json);
  } else if (location.pathname.endsWith("/grants") && typeof grantsView === "function") {
    await grantsView(me.json);
  } else {
    await listView(params);
  }
}

async function listView(params) {
  $("list-view").hidden = false;
  const states = (params.get("state") || NEEDS_A_PERSON.join(",")).split(",");
  for (const box of document.querySelectorAll('#filters input[name="state"]')) {
    box.checked = states.includes(box.value);
  }
  $("filter-tool").value = params.get("tool") || "";
  $("filter-run").value = params.get("run") || "";
  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    const checked = [...document.querySelectorAll('#filters input[name="state"]:checked')].map((b) => b.value);
    if (checked.length) next.set("state", checked.join(","));
    if ($("filter-tool").value.trim()) next.set("tool", $("filter-tool").value.trim());
    if ($("filter-run").value.trim()) next.set("run", $("filter-run").value.trim());
    location.search = next.toString();
  });

  const query = new URLSearchParams(params);
  if (!query.get("state")) query.set("state", NEEDS_A_PERSON.join(","));
  const answer = await api("records?" + query.toString());
  if (!answer.ok) { show(refusal(answer), true); return; }
  const { records, total, offset, next_offset: nextOffset } = answer.json;
  $("count").textContent = total === 0
    ? "Nothing here."
    : "Records " + (offset + 1) + "–" + (offset + records.length) + " of " + total + ".";
  const body = document.querySelector("#records tbody");
  for (const r of records) {
    const row = document.createElement("tr");
    row.dataset.key = r.key;
    const keyCell = document.createElement("td");
    keyCell.className = "key";
    keyCell.appendChild(text("a", r.key, { href: "record?key=" + encodeURIComponent(r.key) }));
    row.appendChild(keyCell);
    row.appendChild(text("td", r.tool, { class: "nowrap" }));
    row.appendChild(text("td", r.class, { class: "nowrap" }));
    row.appendChild(text("td", r.state, { class: "state nowrap" }));
    row.appendChild(text("td", r.run_id, { class: "nowrap" }));
    row.appendChild(text("td", r.approval_role && r.state === "awaiting-approval" ? r.approval_role : "", { class: "nowrap" }));
    const waits = r.state === "awaiting-approval" || r.state === "in-doubt";
    row.appendChild(text("td", waits ? duration(Date.now() - r.updated_at) : "", { class: "nowrap waiting" }));
    row.appendChild(text("td", r.reason));
    row.appendChild(text("td", when(r.updated_at), { class: "nowrap" }));
    body.appendChild(row);
  }
  const limit = Number(params.get("limit")) || 50;
  const page = (o) => { const p = new URLSearchParams(params); p.set("offset", String(o)); return "?" + p.toString(); };
  if (offset > 0) { $("previous").href = page(Math.max(0, offset - limit)); $("previous").hidden = false; }
  if (nextOffset !== null && nextOffset !== undefined) { $("next").href = page(nextOffset); $("next").hidden = false; }
}

async function recordView(key, me) {
  $("record-view").hidden = false;
  $("record-key").textContent = key;
  const answer = await api("record?key=" + encodeURIComponent(key));
  if (!answer.ok) { show(refusal(answer), true); return; }
  const { record: r, state, audit, output_schema: outputSchema, tool, waiting_ms: waitingMs, edit } = answer.json;
  const fields = $("record-fields");
  const field = (name, value) => {
    if (value === undefined || value === null || value === "") return;
    fields.appendChild(text("dt", name));
    fields.appendChild(text("dd", value, name === "State" ? { id: "state", class: "state" } : {}));
  };
  field("State", state);
  if (r === null) {
    // No record, only an audit trail: a call the policies denied before it was journaled (or
    // a record collected since).
    field("Record", "none: the call was not journaled, or its record was collected; its audit trail is below");
    $("record-input").textContent = "";
    showAudit(audit);
    return;
  }
  field("Tool", r.tool);
  field("Description", tool && tool.description);
  field("Class", (tool && tool.class) || r.class);
  if (typeof waitingMs === "number") field("Waiting for a person", duration(waitingMs));
  if (edit) field("Approved with edits", edit.by + " changed " + (edit.changed.join(", ") || "nothing") +
    ": " + JSON.stringify(edit.input));
  field("Run", r.run_id);
  field("Thread", r.thread_id);
  field("Attempt", r.attempt);
  field("Reason", r.reason);
  field("Approval role", r.approval_role);
  field("Decided by", r.decided_by);
  field("Created", when(r.created_at));
  field("Updated", when(r.updated_at));
  field("Lease until", when(r.lease_until));
  field("Expires", when(r.expires_at));
  if (r.holder) field("Holder", [r.holder.worker, r.holder.host, "pid " + r.holder.pid].filter(Boolean).join(", "));
  // The input this page shows is the one an approval from it is for (by its fingerprint).
  let shown = { fingerprint: r.fingerprint, input: r.input };
  const showInput = (input) => {
    $("record-input").textContent = JSON.stringify(input, null, 2);
    const bound = boundFields(input);
    $("record-sensitive").hidden = bound.length === 0;
    $("record-sensitive-fields").textContent = bound.join(", ");
  };
  showInput(r.input);
  if (r.output !== null && r.output !== undefined) {
    $("record-output-title").hidden = false;
    $("record-output").hidden = false;
    $("record-output").textContent = JSON.stringify(r.output, null, 2);
  }

  const act = async (path, body, done) => {
    const result = await api(path, body);
    if (!result.ok) { show(refusal(result), true); return; }
    sessionStorage.setItem("effect-tool-console-done", done);
    location.reload();
  };
  const done = sessionStorage.getItem("effect-tool-console-done");
  if (done) { sessionStorage.removeItem("effect-tool-console-done"); show(done, false); }

  if (state === "awaiting-approval") {
    $("approval-actions").hidden = false;
    $("approval-role").textContent = r.approval_role || "";
    $("approval-fingerprint").textContent = shown.fingerprint;
    // What this tab showed of this key before: if the model parked another input since, say so.
    const seenKey = "effect-tool-console-seen:" + key;
    const seen = JSON.parse(sessionStorage.getItem(seenKey) || "null");
    if (seen && seen.fingerprint !== shown.fingerprint) {
      showDiff(seen.input, shown.input);
      show("The input changed since this page last showed it: compare, then approve or deny the new one.", true);
    }
    sessionStorage.setItem(seenKey, JSON.stringify(shown));
    $("approve").addEventListener("click", async () => {
      const result = await api("approve", { key, fingerprint: shown.fingerprint });
      const changed = result.json.input_changed;
      if (result.status === 409 && changed) {
        // Nothing was approved: show what changed; the next click is for the new input.
        showDiff(shown.input, changed.input);
        shown = { fingerprint: changed.fingerprint, input: changed.input };
        sessionStorage.setItem(seenKey, JSON.stringify(shown));
        showInput(changed.input);
        $("approval-fingerprint").textContent = shown.fingerprint;
        show(refusal(result), true);
        return;
      }
      if (!result.ok) { show(refusal(result), true); return; }
      sessionStorage.setItem("effect-tool-console-done", "Approved: the agent's next call runs it.");
      location.reload();
    });
    $("edit-input").value = JSON.stringify(shown.input, null, 2);
    const edited = () => JSON.parse($("edit-input").value);
    $("edit-input").addEventListener("input", () => {
      try { showDiff(shown.input, edited(), "edit-diff"); } catch (_) { /* not JSON yet */ }
    });
    $("approve-edited").addEventListener("click", async () => {
      let input;
      try { input = edited(); } catch (e) { show("The arguments are not JSON: " + e.message, true); return; }
      const changed = changedFields(shown.input, input);
      const result = await api("approve", { key, fingerprint: shown.fingerprint, input });
      const parked = result.json.input_changed;
      if (result.status === 409 && parked) {
        showDiff(shown.input, parked.input);
        shown = { fingerprint: parked.fingerprint, input: parked.input };
        sessionStorage.setItem(seenKey, JSON.stringify(shown));
        showInput(parked.input);
        $("approval-fingerprint").textContent = shown.fingerprint;
        $("edit-input").value = JSON.stringify(shown.input, null, 2);
        show(refusal(result), true);
        return;
      }
      if (!result.ok) { show(refusal(result), true); return; }
      sessionStorage.setItem("effect-tool-console-done", "Approved with edited arguments (changed: " +
        (changed.join(", ") || "nothing") + "): the agent's next call runs the edited call, once.");
      location.reload();
    });
    $("deny").addEventListener("click", () =>
      act("deny", { key, reason: $("deny-reason").value.trim() || null }, "Denied."));
  }
  const settled = state === "completed" || state === "failed";
  if (state === "in-doubt" || state === "stale" || settled) {
    $("resolve-actions").hidden = false;
    const path = settled ? "amend" : "resolve";
    if (settled) {
      $("resolve-title").textContent = "Amend";
      $("resolve-help").textContent = "Correct what is recorded, if a person's earlier resolution was wrong.";
    }
    if (outputSchema) {
      $("resolve-shape").hidden = false;
      $("resolve-schema").textContent = JSON.stringify(outputSchema, null, 2);
    }
    $("resolve-applied").addEventListener("click", () => {
      let output;
      try { output = JSON.parse($("resolve-output").value || "null"); } catch (e) {
        show("The output is not JSON: " + e.message, true);
        return;
      }
      act(path, { key, verdict: "applied", output }, "Recorded as applied: the agent's next call replays this output.");
    });
    $("resolve-not-applied").addEventListener("click", () =>
      act(path, { key, verdict: "not-applied" }, "Recorded as not applied: the agent's next call runs it."));
  }
  if (me.can_compensate && r.class === "compensable") {
    $("compensate-actions").hidden = false;
    $("compensate-run").textContent = r.run_id;
    $("compensate").addEventListener("click", async () => {
      const result = await api("compensate", { run: r.run_id });
      if (!result.ok) { show(refusal(result), true); return; }
      const c = result.json;
      sessionStorage.setItem("effect-tool-console-done",
        "Compensated: " + (c.compensated.length) + " now, " + c.already_compensated.length + " before" +
        (c.complete ? "." : "; not complete: " + JSON.stringify({ failed: c.failed, pending: c.pending, unknown_tool: c.unknown_tool })));
      location.reload();
    });
  }

  showAudit(audit);
}

// The audit trail, one row an entry; a policy's decision in words, any other detail as JSON.
function showAudit(audit) {
  const trail = document.querySelector("#audit tbody");
  for (const entry of audit) {
    const row = document.createElement("tr");
    row.dataset.action = entry.action;
    row.appendChild(text("td", when(entry.at)));
    row.appendChild(text("td", entry.actor));
    row.appendChild(text("td", entry.action));
    const policy = policyWords(entry);
    row.appendChild(policy === null
      ? text("td", entry.detail === null || entry.detail === undefined ? "" : JSON.stringify(entry.detail))
      : text("td", policy, { class: "policy" }));
    trail.appendChild(row);
  }
}

// What a Cedar policy decided (`policy-deny`, `policy-approval`, `policy-shadow`), in words:
// the decision, the policies that made it, the reason or role; null for any other entry.
function policyWords(entry) {
  const d = entry.detail;
  if (!entry.action.startsWith("policy-") || !d || typeof d !== "object") return null;
  const ids = Array.isArray(d.policies) && d.policies.length > 0
    ? (d.policies.length === 1 ? "policy " : "policies ") + d.policies.join(", ")
    : "the policies";
  let what;
  if (d.decision === "deny") what = "denied the call" + (d.reason ? ": " + d.reason : "");
  else if (d.decision === "require-approval") what = "required approval by role " + d.role;
  else what = "decided " + d.decision;
  const declared = d.declared_role ? " (the declaration's role " + d.declared_role + " stays)" : "";
  const who = d.principal ? " Principal: " + d.principal + "." : "";
  if (d.mode === "shadow") {
    return "Shadow mode, nothing enforced: " + ids + " would have " + what + declared + "." + who;
  }
  const after = d.decision === "deny" ? " Nothing ran, and nothing was journaled." : "";
  return ids.charAt(0).toUpperCase() + ids.slice(1) + " " + what + declared + "." + after + who;
}

// The top-level fields of a journaled input that stand for a sensitive value: the journal
// keeps only a keyed digest of it, `{"$sensitive": "hmac-sha256:..."}`.
function boundFields(input) {
  if (!input || typeof input !== "object" || Array.isArray(input)) return [];
  return Object.keys(input).filter((k) => {
    const v = input[k];
    return v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 1 &&
      typeof v["$sensitive"] === "string";
  });
}

// How long, in words a person reads at a glance: 45s, 12m, 3h 5m, 2d 4h.
function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return s + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m";
  const h = Math.floor(m / 60);
  if (h < 24) return h + "h " + (m % 60) + "m";
  return Math.floor(h / 24) + "d " + (h % 24) + "h";
}

// The top-level fields whose values differ between two inputs.
function changedFields(was, now) {
  const keys = [...new Set([...Object.keys(was || {}), ...Object.keys(now || {})])].sort();
  return keys.filter((k) => JSON.stringify((was || {})[k]) !== JSON.stringify((now || {})[k]));
}

// Show, field by field, how the input `now` differs from the input `was` this page showed
// (in the table `table`: the parked input's change, or a person's edit).
function showDiff(was, now, table) {
  table = table || "input-diff";
  const body = document.querySelector("#" + table + " tbody");
  body.replaceChildren();
  const objects = [was, now].every((v) => v && typeof v === "object" && !Array.isArray(v));
  const fields = objects ? [...new Set([...Object.keys(was), ...Object.keys(now)])].sort() : [null];
  for (const f of fields) {
    const before = f === null ? was : was[f];
    const after = f === null ? now : now[f];
    if (JSON.stringify(before) === JSON.stringify(after)) continue;
    const row = document.createElement("tr");
    row.appendChild(text("td", f === null ? "(the input)" : f));
    row.appendChild(text("td", before === undefined ? "(absent)" : JSON.stringify(before), { class: "was" }));
    row.appendChild(text("td", after === undefined ? "(absent)" : JSON.stringify(after), { class: "now" }));
    body.appendChild(row);
  }
  $(table + "-view").hidden = false;
}

boot().catch((e) => show("The console failed: " + e, true));
