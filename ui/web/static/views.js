// agentconsole browser console: DOM rendering of every view, and the operator controls.
// Text from the server (program ids, labels, tenants) is only ever set as textContent.
"use strict";
(function () {
  const AC = (window.AC = window.AC || {});
  const $ = (sel) => document.querySelector(sel);
  const views = (AC.views = {});
  const TIER_ORDER = ["hbm", "dram", "disk"];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k.startsWith("data-")) node.setAttribute(k, v);
      else node[k] = v;
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }
  views.el = el;

  const fmt = (views.fmt = {
    secs(v) {
      if (v === null || v === undefined) return "-";
      const a = Math.abs(v), s = v < 0 ? "-" : "";
      if (a < 10) return s + a.toFixed(2) + "s";
      if (a < 60) return s + a.toFixed(1) + "s";
      if (a < 3600) return s + Math.floor(a / 60) + "m" + String(Math.floor(a % 60)).padStart(2, "0") + "s";
      return s + Math.floor(a / 3600) + "h" + String(Math.floor((a % 3600) / 60)).padStart(2, "0") + "m";
    },
    // three significant digits, never in e-notation: 999,600 is 1.00M, not 1.00e+3K
    count(v) {
      const a = Math.abs(v || 0), units = [[1e9, "G"], [1e6, "M"], [1e3, "K"]];
      for (let i = 0; i < units.length; i++) {
        const [lim, suf] = units[i];
        if (a < lim) continue;
        const text = (v / lim).toPrecision(3);
        if (!text.includes("e")) return text + suf;
        return i ? (v / units[i - 1][0]).toPrecision(3) + units[i - 1][1] : Math.round(v / lim) + suf;
      }
      return String(Math.round(v || 0));
    },
    rate: (v) => (Math.abs(v || 0) < 99.95 ? (v || 0).toPrecision(3) : String(Math.round(v))) + "/s",
    pct: (v) => Math.round((v || 0) * 100) + "%",
    // binary units, as the dashboard shows bytes: 512B, 1.5KiB, 37.2GiB
    bytes(v) {
      let x = Number(v || 0);
      for (const suffix of ["B", "KiB", "MiB", "GiB", "TiB"]) {
        if (Math.abs(x) < 1024 || suffix === "TiB") return suffix === "B" ? Math.round(x) + "B" : x.toFixed(1) + suffix;
        x /= 1024;
      }
      return String(v);
    },
    clock(t) { return t ? new Date(t * 1000).toISOString().slice(11, 23) : "-"; },
    prio(p) {
      if (p === null || p === undefined) return "-";
      const items = Array.isArray(p) ? p : [p];
      return items.map((x) => (typeof x === "number" && !Number.isInteger(x) ? x.toPrecision(3) : String(x))).join(", ");
    },
    compact(v) {
      if (v === null || v === undefined) return "";
      if (typeof v === "object" && !Array.isArray(v)) return Object.entries(v).map(([k, x]) => k + "=" + fmt.compact(x)).join(" ");
      if (Array.isArray(v)) return v.map(fmt.compact).join(",");
      return typeof v === "number" && !Number.isInteger(v) ? String(+v.toPrecision(4)) : String(v);
    },
  });

  // -- header, banner, toasts -------------------------------------------------------------
  views.live = function (live, text) {
    const pill = $("#live");
    pill.textContent = live ? "● live" : "○ " + text;
    pill.className = "pill " + (live ? "pill-ok" : "pill-warn");
  };
  views.keyState = function () {
    $("#keystate").textContent = AC.state.keySource + (AC.state.tenantKey ? " · a tenant's key" : "");
  };
  views.banner = function (text) { const b = $("#banner"); b.textContent = text; b.hidden = !text; };
  views.toast = function (text, error, warn) {
    const t = el("div", { class: "toast" + (error ? " error" : warn ? " warn" : "") }, text);
    $("#toasts").append(t);
    setTimeout(() => t.remove(), 6000);
  };
  const listed = (body, k) => (Array.isArray(body && body[k]) ? body[k].length : 0);
  // A cancel interrupts read-only tools but lets side-effecting ones run on (``flagged_tools``,
  // their nodes): an effect is not cut half way. Each commits when it ends; only one whose end
  // leaves its effect in doubt waits for an operator, in the Tools view (as the dashboard says).
  views.sideEffectsRunning = (action, body) => action === "cancel" && listed(body, "flagged_tools") > 0;
  const NAMED_TOOLS = 3;
  function stillRunning(nodes) {
    const named = nodes.slice(0, NAMED_TOOLS).join(", ") +
      (nodes.length > NAMED_TOOLS ? " and " + (nodes.length - NAMED_TOOLS) + " more" : "");
    // a tenant's key is not offered the Tools view: its in-doubt calls wait for an operator
    const doubt = AC.state.tenantKey ? "waits for an operator" : "is listed under Tools to reconcile";
    return "side-effecting tools still running: " + named + " (they finish and commit; one whose " +
      "effect ends in doubt " + doubt + ")";
  }
  views.stillRunning = stillRunning;  // a node cancel's notice says them alike (nodecancel.js)
  // what a cancel says of the agent's own tools (``running_tools``): the server stopped none
  const leftToTheAgent = (nodes) => (nodes.length ? "; the agent's own tools left to it: " + nodes.join(", ") : "");
  views.leftToTheAgent = leftToTheAgent;
  views.describe = function (action, id, body) {
    const n = (k) => listed(body, k);
    if (action === "cancel") {
      let text = "cancelled " + id + ": " + n("aborted_calls") + " calls aborted, " + n("interrupted_tools") + " tools interrupted";
      if (n("flagged_tools")) text += "; " + stillRunning(body.flagged_tools.map(String));
      return text + leftToTheAgent(n("running_tools") ? body.running_tools.map(String) : []);
    }
    if (action === "preempt") return "preempted " + id + ": " + (n("preempted_calls") || n("requeued_calls")) + " running calls requeued";
    if (action === "boost") {
      const amount = body && typeof body.boost === "number" ? " by " + fmt.compact(body.boost) + "s" : "";
      const reranked = body && Array.isArray(body.reranked_calls) ? ", " + n("reranked_calls") + " queued calls re-ranked" : "";
      return "boosted " + id + amount + reranked;
    }
    return action + " " + id + ": done";
  };

  function header(o) {
    $("#policy").textContent = o ? o.policy + " / " + o.kv_policy + " · " + o.runtime : "";
    $("#draining").hidden = !(o && o.draining);
    drainButton(o);
    // the picker's hint: the name in force of the policy it switches
    const name = $("#policy-name");
    const hint = o ? o[$("#policy-field").value] || "" : "policy name";
    if (name.placeholder !== hint) name.placeholder = hint;
  }

  // The drain button says what a click does: "Drain" while the server admits, "End drain"
  // while it drains. Disabled until an overview tells which (none yet, or another key's was
  // forgotten) and while a drain request is in flight.
  let drainBusy = false;
  function drainButton(o) {
    const button = $("#drain");
    const draining = !!(o && o.draining);
    const label = draining ? "End drain" : "Drain";
    button.classList.toggle("danger", !draining);  // only starting one stops anybody
    if (button.textContent !== label) {
      button.textContent = label;
      button.title = draining ? "admit new calls again (operator key)"
        : "stop admitting new calls from every tenant (asks first; operator key)";
    }
    button.disabled = !o || drainBusy;
  }
  views.drainBusy = function (busy) {
    drainBusy = busy;
    drainButton(AC.state.overview);
  };

  // The server's policy names (``GET /v1/operator/policy``): the form offers the names of the
  // policy it switches, the one in force selected; null (a server that publishes none) keeps
  // the typed name.
  function fillPolicyChoice() {
    const choices = AC.state.policyChoices;
    const pick = $("#policy-choice");
    $("#policy-name").hidden = !!choices;
    pick.hidden = !choices;
    if (!choices) return;
    const field = $("#policy-field").value;
    const names = field === "kv_policy" ? choices.kv_policies : choices.policies;
    pick.replaceChildren(...names.map((name) => {
      const option = document.createElement("option");
      option.value = name;
      option.textContent = name;
      return option;
    }));
    pick.value = choices[field];
  }
  views.policyChoices = function () { fillPolicyChoice(); };

  // A tenant's key (the server refused it an operator route): the controls only an operator
  // key may use are hidden (marked ``data-operator``); its cancel stays.
  views.tenantKey = function (tenant) {
    document.body.classList.toggle("tenant-key", tenant);
    views.keyState();
  };

  views.show = function (view) {
    for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + view;
    for (const a of document.querySelectorAll("#tabs a")) {
      a.classList.toggle("active", a.dataset.view === view || (view === "program" && a.dataset.view === "programs"));
    }
  };

  // Views fed by polled objects redraw only when a new object arrives (the tenants view has
  // two reads, either of which may fail while the other succeeds).
  const SOURCES = { overview: (st) => [st.overview], tenants: (st) => [st.tenants, st.door], kv: (st) => [st.kv],
    audit: (st) => [st.audit], tools: (st) => [st.toolCalls, st.refused.tools] };
  const drawn = {};
  views.render = function (view) {
    const st = AC.state;
    header(st.overview);
    stale(st, view);
    if (SOURCES[view]) {
      const sources = SOURCES[view](st);
      const before = drawn[view];
      if (before && sources.every((source, i) => source === before[i])) return;
      drawn[view] = sources;
    }
    if (view === "overview") renderOverview(st);
    else if (view === "programs") renderPrograms(st);
    else if (view === "program") renderDetail(st);
    else if (view === "tenants") renderTenants(st);
    else if (view === "kv") renderKV(st);
    else if (view === "audit") renderAudit(st);
    else if (view === "events") renderTail(st);
    else if (view === "tools") AC.tools.render(st);
  };

  // -- stale marker: a view whose last read failed says so, with the server's message, and
  // that what it shows is the last good read (or nothing); cleared by the next success ------
  const READS = { overview: ["overview"], programs: ["programs"], program: ["detail"], tenants: ["tenants", "door"],
    kv: ["kv"], audit: ["audit"], events: [], tools: ["tools"] };
  // whether a read's last good answer is still on screen (none after a key change, or before
  // any answer: the marker must not claim one is shown)
  const SHOWN = { overview: (st) => !!st.overview, programs: (st) => st.programs.size > 0, detail: (st) => !!st.detail,
    tenants: (st) => st.tenants.length > 0, door: (st) => !!st.door, kv: (st) => !!st.kv, audit: (st) => st.audit.length > 0,
    tools: (st) => !!st.toolCalls };
  const READ_NAMES = { overview: "the overview", programs: "the program list", detail: "the program",
    tenants: "the tenants", door: "the admission door", kv: "the KV tiers", audit: "the audit log",
    tools: "the tool calls" };
  function stale(st, view) {
    const lines = (READS[view] || []).filter((name) => st.failed[name]).map((name) => {
      const f = st.failed[name];
      const what = name === "detail" ? "program " + st.detailId : READ_NAMES[name];
      const status = f.status ? "HTTP " + f.status + ": " : "";
      const shown = SHOWN[name](st) ? "showing the last good read" : "nothing to show";
      return what + " could not be read at " + fmt.clock(f.at) + " (" + status + f.message + "); " + shown;
    });
    const box = $("#stale");
    const text = lines.join("\n");
    if (box.textContent !== text) box.textContent = text;
    box.hidden = !text;
  }

  // -- a key change: nothing read with the previous key stays on screen -------------------
  function purge(id) {
    const node = document.getElementById(id);
    if (node && node.data && window.Plotly) window.Plotly.purge(node);
  }
  views.forget = function () {
    for (const k of Object.keys(drawn)) delete drawn[k];
    header(null);
    $("#cards").replaceChildren();
    for (const id of ["chart-rates", "chart-latency", "chart-queue", "chart-kv", "chart-tenants", "chart-tiers", "chart-placement"]) purge(id);
    $("#replay").hidden = true;
    $("#compat").hidden = true;
    rowCache.clear();
    $("#programs tbody").replaceChildren();
    $("#programs-count").textContent = "";
    shownKey = "";
    programsSeen = "";
    clearDetail();
    $("#tenants tbody").replaceChildren();
    $("#door-section").hidden = true;
    $("#door-cards").replaceChildren();
    $("#door tbody").replaceChildren();
    $("#kv-cards").replaceChildren();
    $("#retained tbody").replaceChildren();
    $("#audit tbody").replaceChildren();
    $("#audit-refused").hidden = true;
    $("#tail").replaceChildren();
    tailSeen = -1;
    $("#stale").hidden = true;
    $("#stale").textContent = "";
  };

  function cards(target, items) {
    target.replaceChildren(...items.map(([label, value, cls]) =>
      el("div", { class: "card" }, el("div", { class: "label" }, label), el("div", { class: "value " + (cls || "") }, value))));
  }

  function renderOverview(st) {
    const o = st.overview;
    if (!o) return;
    const p = o.programs || {};
    cards($("#cards"), [
      ["running", String(p.running || 0)], ["finished", String(p.finished || 0)],
      ["failed", String(p.failed || 0)], ["cancelled", String(p.cancelled || 0)],
      ["throughput", fmt.rate(o.throughput_programs_per_s)], ["goodput", fmt.rate(o.goodput_programs_per_s)],
      ["E2E p50", fmt.secs(o.e2e_p50_s)], ["E2E p95", fmt.secs(o.e2e_p95_s)], ["E2E p99", fmt.secs(o.e2e_p99_s)],
      ["queue depth", String(o.queue_depth || 0)], ["running calls", String(o.running_calls || 0)],
      ["prefix hit tokens", fmt.count(o.prefix_hit_tokens)], ["ghost tokens", fmt.count(o.ghost_tokens)],
      ["policy", o.policy + " / " + o.kv_policy], ["admission", o.draining ? "DRAINING" : "open", o.draining ? "late" : ""],
    ]);
    AC.charts.overview(st.history, o);
  }

  // -- programs ----------------------------------------------------------------------------
  function matches(p, query) {
    const q = query.trim();
    const invert = q.startsWith("!");
    const words = q.replace(/^!/, "").toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) return true;
    const labels = Object.entries(p.labels || {}).map(([k, v]) => k + ":" + v).join(" ");
    const hay = (p.program_id + " " + p.tenant + " " + p.state + " " + labels).toLowerCase();
    return words.every((w) => hay.includes(w)) !== invert;
  }
  views.matches = matches;

  // the policy's key as the dashboard sorts it: its numbers in order (none: first)
  const keyNumbers = (k) => (Array.isArray(k) ? k : [k]).filter((v) => typeof v === "number");

  // one order for every column: numbers and strings as such, a missing value first, keys
  // (arrays) element by element; a comparator that is consistent, so the sort is too
  function compareValues(x, y) {
    if (Array.isArray(x) || Array.isArray(y)) {
      const a = Array.isArray(x) ? x : [], b = Array.isArray(y) ? y : [];
      for (let i = 0; i < Math.min(a.length, b.length); i++) {
        const c = compareValues(a[i], b[i]);
        if (c) return c;
      }
      return a.length - b.length;
    }
    if (x === y) return 0;
    if (x === null || x === undefined) return -1;
    if (y === null || y === undefined) return 1;
    return x < y ? -1 : 1;
  }
  views.compareValues = compareValues;

  function sortValue(p, col) {
    if (col === "progress") return p.nodes_known ? p.nodes_done / p.nodes_known : 0;
    if (col === "priority") return keyNumbers(p.priority_key);
    if (col === "deadline_slack_s") return p.deadline_slack_s === null ? Infinity : p.deadline_slack_s;
    return p[col];
  }

  function programCells(p) {
    const late = p.deadline_slack_s !== null && p.deadline_slack_s < 0;
    return [
      [p.program_id, ""], [p.tenant, ""], [p.state, "st-" + p.state],
      [p.nodes_done + "/" + p.nodes_known, "num"], [fmt.secs(p.attained_service_s), "num"],
      [fmt.prio(p.priority_key), ""], [fmt.secs(p.critical_path_idle_s), "num"],
      [fmt.secs(p.deadline_slack_s), "num" + (late ? " late" : "")],
    ];
  }

  const rowCache = new Map();
  function programRow(p) {
    let tr = rowCache.get(p.program_id);
    if (!tr) {
      tr = el("tr", { "data-id": p.program_id });
      for (let i = 0; i < 8; i++) tr.append(el("td"));
      const id = p.program_id;
      tr.append(el("td", {},
        el("button", { "data-action": "preempt", "data-operator": "", title: "preempt", onclick: (e) => { e.stopPropagation(); AC.act("preempt", id); } }, "P"),
        el("button", { "data-action": "boost", "data-operator": "", title: "boost", onclick: (e) => { e.stopPropagation(); AC.act("boost", id); } }, "B"),
        el("button", { class: "danger", "data-action": "cancel", title: "cancel…", onclick: (e) => { e.stopPropagation(); views.confirmCancel(id); } }, "C")));
      tr.addEventListener("click", () => { location.hash = "#/program/" + encodeURIComponent(id); });
      rowCache.set(p.program_id, tr);
    }
    const cells = programCells(p);
    const tds = tr.children;
    for (let i = 0; i < cells.length; i++) {
      const [text, cls] = cells[i];
      if (tds[i].textContent !== text) tds[i].textContent = text;
      if (tds[i].className !== cls) tds[i].className = cls;
    }
    const running = p.state === "running";
    for (const b of tr.children[8].children) b.disabled = !running;
    return tr;
  }

  // A table of thousands of rows costs the browser a long layout on every change; past this
  // many the rest is counted as hidden (filter or sort to reach it), as Ray's dashboard does.
  const MAX_ROWS = 500;
  let shownKey = "";
  let programsSeen = "";
  // Rows do not move under the pointer: while it is over the table the rows' order and set
  // are held (a reorder between a press and its release drops the click, or lands it on
  // another program); their cells still update, and leaving the table applies the rest.
  let pointerOverPrograms = false;
  function renderPrograms(st) {
    const { col, dir } = st.sort;
    const seen = [st.programsVersion, st.filter, col, dir].join("|");
    if (seen === programsSeen) return;
    programsSeen = seen;
    const rows = [];
    for (const p of st.programs.values()) if (matches(p, st.filter)) rows.push(p);
    rows.sort((a, b) => {
      const c = compareValues(sortValue(a, col), sortValue(b, col));
      if (c === 0) return a.program_id < b.program_id ? -1 : 1;
      return c * dir;
    });
    const body = $("#programs tbody");
    const shown = rows.slice(0, MAX_ROWS);
    const key = shown.map((p) => p.program_id).join("\n");
    const trs = shown.map(programRow);
    if (key !== shownKey) {
      if (pointerOverPrograms) programsSeen = "";  // held: redo once the pointer leaves
      else { body.replaceChildren(...trs); shownKey = key; }
    }
    for (const id of rowCache.keys()) if (!st.programs.has(id)) rowCache.delete(id);
    const hidden = Math.max(0, st.programsTotal - st.programs.size) + (rows.length - shown.length);
    $("#programs-count").textContent = shown.length + " shown of " + st.programs.size +
      (hidden ? " · " + hidden + " hidden (filter or sort to reach them)" : "");
    for (const th of document.querySelectorAll("#programs th[data-sort]")) {
      th.classList.toggle("sorted", th.dataset.sort === col);
      th.classList.toggle("desc", th.dataset.sort === col && dir < 0);
    }
  }

  // -- program detail ----------------------------------------------------------------------
  // Nothing of a program stays on screen once another is routed to, or once it cannot be read
  // (404, 403): no cards, DAG, timeline or nodes, and its buttons disabled.
  let detailShown = true;  // the page's first draw clears the static markup too
  function clearDetail() {
    renderDetail.stamp = "";
    timelineDrawn = 0;
    if (!detailShown) return;
    detailShown = false;
    $("#detail-summary").replaceChildren();
    $("#dag").replaceChildren();
    $("#dag-legend").textContent = "";
    purge("chart-timeline");
    $("#nodes tbody").replaceChildren();
    for (const b of document.querySelectorAll("#view-program button.act")) b.disabled = true;
    AC.nodeCancel.render(null);
  }

  // an open span (end null: a tool still running, a call still decoding) grows with the
  // clock: its timeline is redrawn at most this often while one is open
  const OPEN_SPAN_REDRAW_MS = 1000;
  let timelineDrawn = 0;
  const hasOpenSpan = (d) => d.nodes.some((n) => (n.timeline || []).some((p) => p.end === null || p.end === undefined));

  function renderDetail(st) {
    const d = st.detail;
    $("#detail-title").textContent = st.detailId || "";
    if (!d || d.program_id !== st.detailId) { clearDetail(); return; }
    detailShown = true;
    const kv = d.kv || {};
    cards($("#detail-summary"), [
      ["state", d.state, "st-" + d.state], ["tenant", d.tenant], ["nodes", d.nodes_done + "/" + d.nodes_known],
      ["service", fmt.secs(d.attained_service_s)], ["priority", fmt.prio(d.priority_key)],
      ["CP idle", fmt.secs(d.critical_path_idle_s)], ["slack", fmt.secs(d.deadline_slack_s)],
      ["tokens", fmt.count(d.tokens_used)], ["tool calls", String(d.tool_calls)],
      ["KV hbm / dram / disk", TIER_ORDER.map((t) => fmt.count(kv[t + "_tokens"] || 0)).join(" / ")],
      ["lost reuse", fmt.count((d.prompt_insertions || {}).lost_reuse_tokens || 0)],
    ]);
    for (const b of document.querySelectorAll("#view-program button.act")) b.disabled = d.state !== "running";
    AC.nodeCancel.render(d);  // the picked node's state may have changed: offered or not
    const stamp = JSON.stringify([d.nodes, d.critical_path]);
    const now = performance.now();
    if (stamp === renderDetail.stamp) {
      if (hasOpenSpan(d) && now - timelineDrawn >= OPEN_SPAN_REDRAW_MS) {
        timelineDrawn = now;
        AC.charts.timeline(d);
      }
      return;
    }
    renderDetail.stamp = stamp;
    AC.dag.draw($("#dag"), d, $("#dag-fit").checked);
    $("#dag-legend").textContent = d.nodes.length + " nodes · critical path " + (d.critical_path || []).length;
    timelineDrawn = now;
    AC.charts.timeline(d);
    const path = new Set(d.critical_path || []);
    const pickedId = AC.nodeCancel.pickedId(d.program_id);
    $("#nodes tbody").replaceChildren(...d.nodes.map((n) => el("tr", { "data-node": n.node_id,
      class: n.node_id === pickedId ? "picked" : "", onclick: () => views.pickNode(n.node_id) },
      el("td", { class: path.has(n.node_id) ? "late" : "" }, (path.has(n.node_id) ? "◆ " : "") + n.node_id),
      el("td", n.model ? { class: "model", title: (n.model_choice || {}).reason || "" } : {},
        (n.tool || n.kind) + (n.model ? " @ " + n.model : "")),
      // a node cancel's (withdrawn) told apart from one its program's end cancelled
      AC.nodeCancel.withdrawn(n) ? el("td", { class: "st-cancelled withdrawn", title: "cancelled by a node cancel" }, "withdrawn")
        : el("td", { class: "st-" + n.state }, n.state),
      el("td", { class: "tier-" + (n.kv_tier || "none") }, n.kv_tier || "-"),
      el("td", { class: "num" }, fmt.secs(n.queue_s)), el("td", { class: "num" }, fmt.secs(n.service_s)),
      el("td", { class: "num" }, fmt.secs(n.tool_s)), el("td", { class: "num" }, fmt.secs(n.kv_restore_s)),
      el("td", { class: "num" }, fmt.count(n.prompt_tokens)), el("td", { class: "num" }, fmt.count(n.cached_tokens)),
      el("td", { class: "num" }, fmt.count(n.output_tokens)))));
  }
  // A node picked in the DAG or the table: its row and box marked, and the node cancel's
  // button names it (offered only if it has not ended).
  views.pickNode = function (nodeId) {
    for (const tr of document.querySelectorAll("#nodes tr.picked")) tr.classList.remove("picked");
    const tr = document.querySelector('#nodes tr[data-node="' + CSS.escape(nodeId) + '"]');
    if (tr) { tr.classList.add("picked"); tr.scrollIntoView({ block: "nearest" }); }
    for (const g of document.querySelectorAll("#dag .node")) g.classList.toggle("picked", g.dataset.node === nodeId);
    AC.nodeCancel.pick(AC.state.detailId, nodeId);
  };

  // -- tenants, KV, audit, events ----------------------------------------------------------
  function fill(tbody, rows) {
    tbody.replaceChildren(...rows.map((cells) => el("tr", {}, ...cells.map(([t, c]) => el("td", { class: c || "" }, t)))));
  }

  // a tenant-level usage against its limit (none: unlimited), flagged once reached
  function against(used, limit, format) {
    const shown = format(used || 0);
    if (limit === null || limit === undefined) return [shown, "num"];
    return [shown + " / " + format(limit), "num" + ((used || 0) >= limit ? " late" : "")];
  }

  // starvation is a ratio (a program's wait over its service, the tenant's worst): as the
  // dashboard, two decimals, flagged above this
  const STARVED = 0.2;
  function starvation(v) {
    // no service yet: no ratio (not 0), as the dashboard shows it
    if (typeof v !== "number" || !Number.isFinite(v)) return ["-", "num muted"];
    return [v.toFixed(2), "num" + (v > STARVED ? " warn" : "")];
  }

  function renderTenants(st) {
    fill($("#tenants tbody"), st.tenants.map((t) => [
      [t.tenant], [String(t.programs), "num"], [String(t.running), "num"],
      [t.slowdown === null || t.slowdown === undefined ? "-" : t.slowdown.toFixed(2) + "x", "num" + (t.slowdown > 2 ? " late" : "")],
      starvation(t.starvation),
      [fmt.secs(t.max_queue_wait_s), "num"], [fmt.count(t.tokens_used), "num"],
      [Object.entries(t.quota_use || {}).map(([k, v]) => k + " " + fmt.pct(v)).join("  ") || "-"],
      against(t.tokens_last_minute, (t.limits || {}).tokens_per_minute, fmt.count),
      against(t.stored_bytes, (t.limits || {}).stored_bytes, fmt.bytes),
      [fmt.count((t.prompt_insertions || {}).lost_reuse_tokens || 0), "num"],
    ]));
    AC.charts.tenants(st.tenants);
    renderDoor(st.door);
  }

  // the admission door: its counts, and each tenant's kinds' learned run and peak
  function renderDoor(door) {
    $("#door-section").hidden = !door;
    if (!door) return;
    cards($("#door-cards"), [
      ["door", door.enabled ? "on, " + door.order : "off"],
      ["waiting", String(door.waiting)],
      ["predicted / budget", door.budget_tokens === null ? "not sized" : fmt.count(door.predicted_tokens) + " / " + fmt.count(door.budget_tokens)],
      ["held now", fmt.count(door.held_tokens)],
      ["shared room", fmt.count(door.reserved_tokens || 0)],
      ["boundary parks", String(door.boundary_parks)],
    ]);
    // as the dashboard: each tenant's kinds with their run (by tenant, kind), then the kinds
    // with a peak learned but no run yet (a kind whose programs all failed or still run); a
    // kind is a name in its tenant's namespace, so both key a row
    const key = (p) => JSON.stringify([p.tenant, p.kind]);
    const learned = (door.peaks || []).filter((p) => typeof p.peak_private_tokens === "number");
    const peaks = new Map(learned.map((p) => [key(p), p.peak_private_tokens]));
    const peak = (p) => (peaks.has(key(p)) ? fmt.count(Math.round(peaks.get(key(p)))) : "-");
    const byName = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
    const byTenantKind = (a, b) => byName(a.tenant, b.tenant) || byName(a.kind, b.kind);
    const runs = (door.runs || []).slice().sort(byTenantKind);
    const withRun = new Set(runs.map(key));
    const peakOnly = learned.filter((p) => !withRun.has(key(p))).sort(byTenantKind);
    fill($("#door tbody"), [
      ...runs.map((r) => [[r.tenant], [r.kind], [fmt.secs(r.expected_run_s), "num"], [peak(r), "num"]]),
      ...peakOnly.map((p) => [[p.tenant], [p.kind], ["-", "num muted"], [peak(p), "num"]]),
    ]);
  }

  function renderKV(st) {
    const kv = st.kv;
    if (!kv) return;
    const tiers = kv.tiers || {};
    cards($("#kv-cards"), [
      ...Object.keys(tiers).map((t) => [t + " used", fmt.count(tiers[t].used_tokens) + " / " + fmt.count(tiers[t].capacity_tokens)]),
      ["migrations", String(kv.migrations || 0)], ["recomputes", String(kv.recomputes || 0)],
      ["retained prefixes", String((kv.retained || []).length)],
    ]);
    fill($("#retained tbody"), (kv.retained || []).map((r) => [
      [r.program_id], [r.tenant], [fmt.count(r.tokens), "num"], [r.tier, "tier-" + r.tier], [fmt.clock(r.until)],
    ]));
    AC.charts.kv(kv);
  }

  function renderAudit(st) {
    $("#audit-refused").hidden = !st.refused.audit;
    fill($("#audit tbody"), st.audit.map((a) => [
      [fmt.clock(a.ts)], [a.actor], [a.action, a.action === "cancel" ? "late" : ""], [a.target],
      [fmt.compact(a.args)], [fmt.compact(a.result)],
    ]));
  }

  let tailSeen = 0;
  function renderTail(st) {
    $("#events-count").textContent = st.eventsSeen + " events received · showing the last " + st.events.length;
    if (st.tailPaused || tailSeen === st.eventsSeen) return;
    tailSeen = st.eventsSeen;
    const box = $("#tail");
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    box.replaceChildren(...st.events.slice(-400).map((e) => el("div", {},
      fmt.clock(e.t) + " ", el("span", { class: "k-" + e.kind.split(".")[0] }, e.kind.padEnd(18)),
      " " + e.program_id + (e.node_id ? "/" + e.node_id : "") + " " + (e.tenant || "") + " " + fmt.compact(e.data))));
    if (atEnd) box.scrollTop = box.scrollHeight;
  }

  // -- replay this window -----------------------------------------------------------------
  views.replayBusy = function (busy) {
    $("#replay-window").disabled = busy;
    $("#replay-state").textContent = busy ? "writing the trace…" : "";
  };

  views.replay = function (body, spanS) {
    if (!body.path || !body.programs) {
      $("#replay").hidden = true;
      views.toast(body.message || "nothing to replay in this window", true);
      return;
    }
    $("#replay-summary").textContent = body.programs + " programs of the last " + Math.round(spanS / 60) +
      " min written to " + body.path;
    $("#replay-command").value = body.command;
    $("#replay").hidden = false;
    views.toast(body.programs + " programs written to " + body.path, false);
  };

  async function copyCommand() {
    const box = $("#replay-command");
    box.focus();
    box.select();
    try {
      await navigator.clipboard.writeText(box.value);
    } catch (e) {
      document.execCommand("copy"); // no clipboard API (not a secure origin): the selection
    }
    views.toast("bench command copied", false);
  }

  // -- controls ----------------------------------------------------------------------------
  // The one confirmation dialog, asking ``text``: "Keep" (focused, and Escape) does nothing;
  // the danger button, labelled ``yes`` for what it goes on to do, runs ``onYes``. Each
  // question sets both, so no label of an earlier question is left on the next one.
  function confirm(text, yes, onYes) {
    const dialog = $("#confirm");
    $("#confirm-text").textContent = text;
    $("#confirm-yes").textContent = yes;
    dialog.returnValue = "";
    dialog.onclose = () => { if (dialog.returnValue === "yes") onYes(); };
    dialog.showModal();
  }

  views.confirm = confirm;

  views.confirmCancel = function (programId) {
    confirm("Cancel program " + programId + "? Its running calls are aborted, " +
      "pending nodes dropped and KV reclaimed. This cannot be undone.", "Cancel program", () => AC.act("cancel", programId));
  };

  // What a drain does on this server (server/live/errors.py Draining): a new call is refused,
  // not held, so every tenant's agents see 503s until it ends.
  views.confirmDrain = function () {
    confirm("Start a drain? New calls from every tenant are refused (503, retry later) until the drain ends, " +
      "the next call of running programs included; calls already admitted continue.", "Start drain", () => AC.drain(true));
  };

  views.bind = function () {
    $("#keyform").addEventListener("submit", (e) => { e.preventDefault(); AC.setKey($("#key").value.trim()); $("#key").value = ""; });
    $("#forget").addEventListener("click", () => AC.setKey(""));
    $("#policyform").addEventListener("submit", async (e) => {
      e.preventDefault();
      const published = AC.state.policyChoices;
      const field = $("#policy-field").value;
      const name = published ? $("#policy-choice").value : $("#policy-name").value.trim();
      if (!name || (published && name === published[field])) return;  // nothing changed
      if (await AC.setPolicy($("#policy-field").value, name)) $("#policy-name").value = "";
    });
    // ending a drain only lets calls in again: nothing to confirm
    $("#drain").addEventListener("click", () => {
      const o = AC.state.overview;
      if (!o) return;
      if (o.draining) AC.drain(false);
      else views.confirmDrain();
    });
    $("#policy-field").addEventListener("change", () => { header(AC.state.overview); fillPolicyChoice(); });
    $("#filter").addEventListener("input", (e) => { AC.state.filter = e.target.value; AC.schedule(); });
    $("#scope").addEventListener("change", (e) => { AC.state.scope = e.target.value; AC.poll(true); });
    const programs = $("#programs tbody");
    programs.addEventListener("pointerenter", () => { pointerOverPrograms = true; });
    programs.addEventListener("pointerleave", () => { pointerOverPrograms = false; AC.schedule(); });
    for (const th of document.querySelectorAll("#programs th[data-sort]")) {
      th.addEventListener("click", () => {
        const s = AC.state.sort;
        AC.state.sort = { col: th.dataset.sort, dir: s.col === th.dataset.sort ? -s.dir : 1 };
        AC.schedule();
      });
    }
    for (const b of document.querySelectorAll("#view-program button.act")) {
      b.addEventListener("click", () => {
        const id = AC.state.detailId;
        if (b.dataset.action === "cancel") views.confirmCancel(id);
        else AC.act(b.dataset.action, id);
      });
    }
    $("#replay-window").addEventListener("click", () => AC.replayWindow());
    $("#replay-copy").addEventListener("click", copyCommand);
    $("#replay-close").addEventListener("click", () => { $("#replay").hidden = true; });
    $("#dag-fit").addEventListener("change", () => { renderDetail.stamp = ""; AC.schedule(); });
    $("#pause-tail").addEventListener("click", (e) => {
      AC.state.tailPaused = !AC.state.tailPaused;
      e.target.textContent = AC.state.tailPaused ? "Resume" : "Pause";
      AC.schedule();
    });
  };
})();
