// agentconsole browser console: the Tools view. The tool calls that need an operator
// (GET /v1/operator/tool-calls?state=needs_reconcile: side effects a timeout, an ambiguous
// error or a crash left in doubt; the server never runs them again by itself and refuses their
// agent's retry until an operator decides) and the side effects still running (state
// in_progress; a cancel lets them finish: each commits, or lands in the first list when its
// end leaves it in doubt). Read on the view's poll, soon after the feed's tool events (one read
// for a burst) and every few seconds for the tab's count; operator key only (a tenant's key
// never asks, and is offered nothing). An operator reconciles a call: commit (the effect
// happened; its result as JSON) or retry (one new execution), each confirmed first.
"use strict";
(function () {
  const AC = (window.AC = window.AC || {});
  const $ = (sel) => document.querySelector(sel);
  const tools = (AC.tools = {});
  // the feed's kinds that tell a tool call started, ended or was reconciled by an operator
  // (scheduler/events.py)
  const TOOL_EVENTS = new Set(["tool.started", "tool.finished", "tool.reconciled"]);
  // the tab's count on any view, also for a feed that missed an event
  const EVERY_MS = 5000;
  // a burst of tool events is read once, as the open program's detail is
  const SOON_MS = 300;
  const LIMIT = 500;
  const STOPPED = "the server stopped while it ran: its effect may or may not have happened";
  // program id -> tenant: an intent does not name its tenant, its program does (read once per
  // program: it never changes tenant); forgotten with the key
  const tenants = new Map();

  // -- reading --------------------------------------------------------------------------
  // Each of a read's requests goes out only while the key it began under is in use: a later
  // one sent under the next key (a tenant's) would be refused, and audited, for nothing (the
  // read's answer is dropped then anyway).
  function asking(gen, path) {
    if (gen !== AC.state.keyGen) return Promise.reject(new Error("the key changed"));
    return AC.api(path);
  }
  function list(gen, state) {
    return asking(gen, "/v1/operator/tool-calls?state=" + state + "&limit=" + LIMIT)
      .then((b) => (b && b.tool_calls) || []);
  }
  const byName = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

  async function board(gen) {
    // one after the other: a server without the route answers the first alone
    const doubt = await list(gen, "needs_reconcile");
    const progress = await list(gen, "in_progress");
    // the longest waiting first; the listing gives the most recently changed first
    const inDoubt = doubt.slice().sort((a, b) => a.updated_at - b.updated_at || byName(a.tool_call_id, b.tool_call_id));
    const running = progress.filter((c) => c.side_effect)
      .sort((a, b) => a.created_at - b.created_at || byName(a.tool_call_id, b.tool_call_id));
    await nameTenants(gen, inDoubt.concat(running));
    return { needs_reconcile: inDoubt, running };
  }

  // a server without the tool gateway has no tool calls to show: refused, as to a tenant key
  let absent = false;
  function absentIsRefused(gen) {
    return board(gen).catch((e) => {
      if (e.status === 404) { absent = true; e.status = 403; }
      throw e;
    });
  }

  async function nameTenants(gen, calls) {
    const unknown = [...new Set(calls.map((c) => c.program_id))].filter((id) => !tenants.has(id));
    await Promise.all(unknown.map(async (id) => {
      const row = AC.state.programs.get(id);
      let tenant = row ? row.tenant : null;
      if (typeof tenant !== "string") {
        try { tenant = (await asking(gen, "/v1/programs/" + encodeURIComponent(id))).tenant; } catch (e) { tenant = null; }
      }
      if (typeof tenant === "string" && gen === AC.state.keyGen) tenants.set(id, tenant);
    }));
  }

  // One read at a time; one more asked for meanwhile runs after it. The Tools view's poll reads
  // under any key (a tenant's learns its 403 then, as the audit view's); the count's reads
  // (``unasked``: the timer, the feed's tool events) only under a key known to be an
  // operator's. A server without the tool gateway (404) is not asked again.
  let reading = null;
  let again = false;
  tools.read = function (unasked) {
    const st = AC.state;
    if (st.keyRefused || st.refused.tools || (unasked && !st.operatorKey)) return Promise.resolve();
    if (reading) { again = true; return reading; }
    const gen = st.keyGen;
    reading = AC.operatorRead("tools", () => absentIsRefused(gen), (b) => {
      st.toolCalls = b;
      count(b);
      AC.schedule();
    }).finally(() => {
      reading = null;
      if (again) { again = false; tools.read(); }
    });
    return reading;
  };

  let soon = null;
  tools.onEvents = function (events) {
    if (soon !== null || !events.some((e) => TOOL_EVENTS.has(e.kind))) return;
    soon = setTimeout(() => { soon = null; tools.read(true); }, SOON_MS);
  };

  tools.forget = function () {
    tenants.clear();
    absent = false;
    count(null);
  };

  function count(b) {
    const n = b ? b.needs_reconcile.length : 0;
    const badge = $("#tools-count");
    badge.textContent = n ? String(n) : "";
    badge.hidden = !n;
    badge.title = n ? n + " tool call" + (n === 1 ? "" : "s") + " in doubt to reconcile" : "";
  }

  // -- rendering -----------------------------------------------------------------------
  const time = (t) => (t ? new Date(t * 1000).toISOString().slice(11, 19) : "-");
  const tenantOf = (c) => tenants.get(c.program_id) || "?";
  const where = (c) => c.program_id + "/" + c.node_id + " " + c.tool;

  // the stored failure ({type, message, outcome}), or none: the start-up recovery flagged it
  function why(c) {
    if (c.error === null || c.error === undefined) return STOPPED;
    try {
      const e = JSON.parse(c.error);
      if (e && typeof e === "object") return e.type && e.message ? e.type + ": " + e.message : e.message || e.type || c.error;
    } catch (err) { /* plain text */ }
    return String(c.error);
  }

  function programLink(id) {
    return AC.views.el("a", { href: "#/program/" + encodeURIComponent(id) }, id);
  }

  function inDoubtRow(c) {
    const el = AC.views.el;
    return el("tr", { "data-id": c.tool_call_id },
      el("td", { title: "began " + time(c.created_at) }, time(c.updated_at)), el("td", {}, programLink(c.program_id)),
      el("td", {}, c.node_id), el("td", { class: "warn" }, c.tool), el("td", {}, tenantOf(c)),
      el("td", { class: "why" }, why(c)),
      el("td", {},
        el("button", { class: "danger", "data-action": "commit", "data-operator": "", onclick: () => confirmCommit(c),
          title: "the effect happened: record its result, replayed to the agent's retry (asks first)" }, "Commit…"),
        el("button", { "data-action": "retry", "data-operator": "", onclick: () => confirmRetry(c),
          title: "allow one new execution with the same key (asks first)" }, "Retry…")));
  }

  function runningRow(c) {
    const el = AC.views.el;
    return el("tr", { "data-id": c.tool_call_id },
      el("td", {}, time(c.created_at)), el("td", {}, programLink(c.program_id)), el("td", {}, c.node_id),
      el("td", {}, c.tool), el("td", {}, tenantOf(c)));
  }

  function note(b) {
    if (!b) return ["reading the tool calls…", "muted"];
    const n = b.needs_reconcile.length;
    if (!n) return ["No tool call waits for an operator.", "muted"];
    return [n + " tool call" + (n === 1 ? "" : "s") + " in doubt: the effect may or may not have happened, " +
      "and the server never runs them again by itself. Commit one (it happened) or retry it (run it once more).", "warn"];
  }

  tools.render = function (st) {
    const refused = !!st.refused.tools;
    $("#tools-refused").textContent = absent ? "This server has no tool gateway: it lists no tool calls."
      : "The tool calls are the operator's: this key may not read them.";
    $("#tools-refused").hidden = !refused;
    $("#tools-body").hidden = refused;
    if (refused) return;
    const b = st.toolCalls;
    const [text, cls] = note(b);
    const line = $("#tools-note");
    line.textContent = text;
    line.className = cls;
    patchRows($("#reconcile tbody"), b ? b.needs_reconcile : [], inDoubtRow);
    patchRows($("#running-effects tbody"), b ? b.running : [], runningRow);
  };

  // Every read renders the board, mostly unchanged: a row whose call (and tenant) did not change
  // keeps its element, never detached and put back, as a press and its release on one of its
  // buttons must land on the same element (replacing it in between drops the click: the dialog
  // never opens). Rows that changed are built anew; the order follows the board.
  const shownRows = new WeakMap();  // tbody -> Map(tool_call_id -> {sig, tr})
  function patchRows(tbody, calls, render) {
    const before = shownRows.get(tbody) || new Map();
    const after = new Map();
    const wanted = calls.map((c) => {
      const sig = JSON.stringify([c, tenantOf(c)]);
      const kept = before.get(c.tool_call_id);
      const tr = kept && kept.sig === sig ? kept.tr : render(c);
      after.set(c.tool_call_id, { sig, tr });
      return tr;
    });
    shownRows.set(tbody, after);
    const keep = new Set(wanted);
    for (const tr of [...tbody.children]) if (!keep.has(tr)) tr.remove();
    wanted.forEach((tr, i) => {
      if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
    });
  }

  // -- reconciling ---------------------------------------------------------------------
  // The commit dialog asks for the result (JSON, optional: null); "Commit tool call" sends
  // it, once it parses. A retry asks through the one confirmation dialog.
  let committing = null;
  let commitResult = null;
  function confirmCommit(call) {
    const dialog = $("#commit-dialog");
    committing = call;
    $("#commit-text").textContent = "Commit " + call.tool + " of " + call.program_id + "/" + call.node_id +
      " (tenant " + tenantOf(call) + ")? The server records that its effect happened, with the result below: " +
      "the agent's retry gets that result and the tool does not run again. This cannot be undone.";
    $("#commit-result").value = "";
    $("#commit-error").hidden = true;
    dialog.returnValue = "";
    dialog.showModal();
  }

  function confirmRetry(call) {
    AC.views.confirm("Allow one new execution of " + call.tool + " of " + call.program_id + "/" + call.node_id +
      " (tenant " + tenantOf(call) + ")? The agent's next call with the same key runs the tool once more: " +
      "if the first execution did take effect, it happens twice. This cannot be undone.",
    "Retry tool call", () => AC.reconcile(call, "retry"));
  }

  // Settle ``call``: the toast says what the server did, or its refusal (a call another
  // operator settled meanwhile: 409).
  AC.reconcile = async function (call, action, result) {
    const body = action === "commit" ? { action, result: result === undefined ? null : result } : { action };
    let outcome;
    try {
      await AC.api("/v1/operator/tool-calls/" + encodeURIComponent(call.tool_call_id) + "/reconcile",
        { method: "POST", body });
      const text = action === "commit"
        ? "committed " + where(call) + ": the agent's retry gets this result; the tool does not run"
        : "retry allowed for " + where(call) + ": the agent's next call with the same key runs it once";
      outcome = { action: "reconcile", programId: call.program_id, ok: true, text };
    } catch (e) {
      outcome = { action: "reconcile", programId: call.program_id, ok: false, text: action + " " + where(call) + ": " + e.message };
    }
    AC.outcome(outcome);
    tools.read();
    return outcome.ok;
  };

  function bind() {
    // a result that is not JSON keeps the dialog open and says why
    $("#commit-yes").addEventListener("click", (e) => {
      const text = $("#commit-result").value;
      try {
        commitResult = text.trim() ? JSON.parse(text) : null;
      } catch (err) {
        e.preventDefault();
        const shown = $("#commit-error");
        shown.textContent = "the result is not JSON: " + err.message;
        shown.hidden = false;
      }
    });
    $("#commit-dialog").addEventListener("close", () => {
      const call = committing;
      committing = null;
      if (call && $("#commit-dialog").returnValue === "yes") AC.reconcile(call, "commit", commitResult);
    });
  }

  tools.start = function () {
    bind();
    setInterval(() => tools.read(true), EVERY_MS);
  };
})();
