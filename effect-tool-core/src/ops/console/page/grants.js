// The console's standing approvals page (`/grants`), over `api/grants`: list, make, revoke.
// It uses console.js's helpers (`$`, `text`, `when`, `show`, `api`, `refusal`), whose `boot`
// calls `grantsView` on this page. Everything from the journal is shown with textContent.
"use strict";

async function grantsView(me) {
  $("grants-view").hidden = false;
  const roles = $("grant-role");
  for (const role of me.roles || []) roles.append(text("option", role, { value: role }));
  $("grant-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("message").hidden = true;
    let conditions;
    try {
      conditions = JSON.parse($("grant-when").value || "[]");
    } catch (e) {
      show("The condition is not JSON: " + e.message, true);
      return;
    }
    const hours = Number($("grant-hours").value);
    const answer = await api("grants", {
      tool: $("grant-tool").value.trim(),
      role: roles.value,
      when: conditions,
      valid_until: Date.now() + hours * 3600 * 1000,
      run_id: $("grant-run").value.trim() || null,
      principal: $("grant-principal").value.trim() || null,
    });
    if (!answer.ok) { show(refusal(answer), true); return; }
    show("Granted " + answer.json.grant.id + ": calls it covers run without waiting for a person.");
    await loadGrants();
  });
  await loadGrants();
}

function scope(g) {
  const parts = [];
  if (g.run_id) parts.push("run " + g.run_id);
  if (g.principal) parts.push("principal " + g.principal);
  return parts.join(", ") || "every run";
}

function conditionText(g) {
  if (!g.when || g.when.length === 0) return "any arguments";
  return g.when.map((c) => {
    const [test, value] = Object.entries(c).find(([k]) => k !== "arg") || ["?", ""];
    return c.arg + " " + test + " " + JSON.stringify(value);
  }).join(" and ");
}

async function loadGrants() {
  const answer = await api("grants");
  if (!answer.ok) { show(refusal(answer), true); return; }
  const body = $("grants").querySelector("tbody");
  body.replaceChildren();
  const grants = answer.json.grants || [];
  $("grants-empty").hidden = grants.length > 0;
  for (const g of grants) {
    const row = document.createElement("tr");
    row.dataset.id = g.id;
    const state = text("td", g.state, { class: "state nowrap" });
    row.append(state, text("td", g.tool), text("td", g.role), text("td", g.granted_by),
      text("td", conditionText(g)), text("td", scope(g)), text("td", when(g.valid_from), { class: "nowrap" }),
      text("td", when(g.valid_until), { class: "nowrap" }), text("td", g.id, { class: "key" }));
    const cell = document.createElement("td");
    if (g.state === "live" || g.state === "not-yet-valid") {
      const button = text("button", "Revoke", { type: "button", class: "revoke" });
      button.addEventListener("click", async () => {
        $("message").hidden = true;
        const revoked = await api("grants/revoke", { id: g.id });
        if (!revoked.ok) { show(refusal(revoked), true); return; }
        show("Revoked " + g.id + ": the calls it covered wait for a person again.");
        await loadGrants();
      });
      cell.append(button);
    } else if (g.revoked) {
      cell.textContent = "by " + g.revoked.by + " at " + when(g.revoked.at);
    }
    row.append(cell);
    body.append(row);
  }
}
