// agentconsole browser console: state, API key, API calls, live feed, polling and routing.
// Talks to the server's HTTP API and SSE feed only (docs/API.md); every request goes to the
// page's own origin. Rendering lives in views.js, charts.js and dag.js.
"use strict";
(function () {
  const AC = (window.AC = window.AC || {});
  // The documented development default (docs/API.md): tried only when no key was given, so a
  // plain `serve --demo` needs no set-up; a server with real keys answers 401 and we ask.
  const DEV_KEY = "sk-operator";
  const HISTORY = 300;
  const TAIL = 1000;
  const TERMINAL = { "program.finished": "finished", "program.failed": "failed", "program.cancelled": "cancelled" };

  const state = (AC.state = {
    key: "", keySource: "", live: false, overview: null, history: [],
    programs: new Map(), programsTotal: 0, programsVersion: 0, scope: "running",
    filter: "", sort: { col: "program_id", dir: 1 },
    detailId: null, detail: null, tenants: [], door: null, refused: {}, kv: null, audit: [],
    // the tool calls that need an operator and the side effects running (tools.js): null
    // until read, and for a key that may not read them
    toolCalls: null,
    events: [], eventsSeen: 0, lastSeq: null, feedLife: null, view: "overview", tailPaused: false,
    stats: { updates: [], batches: 0, polls: 0, pausedPolls: 0 },
    // the server refused this key (401): no read is sent again until the key changes (every
    // refused operator read is a row in the server's audit, once a second)
    keyRefused: false,
    // the server refused this key an operator route (403): a tenant's key. The operator's
    // controls hide (each would be refused and audited); its cancel of its own program stays
    tenantKey: false,
    // settles once ``/v1/whoami`` answered (or failed): operator reads wait for it
    role: Promise.resolve(),
    // ``/v1/whoami`` said the key is an operator's: the reads no view asked for (the Tools
    // tab's count) are made only then, never as a probe a tenant's key would be refused
    operatorKey: false,
    // ``GET /v1/operator/policy``: the names the policy switch offers (null: none published)
    policyChoices: null,
    // which key every read and the feed were sent under: bumped when the key changes, so an
    // answer to the previous key (still in flight) is dropped instead of shown
    keyGen: 0,
    // read name -> {status, message, at} while its last read failed (cleared by a success):
    // the views mark what they show as stale instead of passing an old answer off as current
    failed: {},
    // the last operator actions' outcomes, newest last (what the toasts said, kept past them)
    outcomes: [],
  });
  const OUTCOMES = 20;

  // -- key -------------------------------------------------------------------------------
  function loadKey() {
    const m = location.hash.match(/[#&]key=([^&]+)/);
    if (m) {
      sessionStorage.setItem("agentconsole-key", decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname + "#/overview");
    }
    const stored = sessionStorage.getItem("agentconsole-key");
    state.key = stored || DEV_KEY;
    state.keySource = stored ? "key set for this tab" : "development default key";
    AC.views.keyState();
  }

  // One polled read, the only read path: ``request()`` under the current key, ``apply(body)``
  // with its answer unless the answer is no longer wanted: the key changed meanwhile (it is
  // the previous key's) or ``opts.wanted()`` says the view moved on. Either way a late answer
  // is dropped, its failure too. A failure is kept in ``state.failed[name]`` (the view marks
  // itself stale) until a success, and handed to ``opts.failed(e)`` where what is shown must
  // change with it.
  function read(name, request, apply, opts) {
    const gen = state.keyGen;
    const wanted = (opts && opts.wanted) || (() => true);
    const current = () => gen === state.keyGen && wanted();
    return request().then((body) => {
      if (!current()) return;
      delete state.failed[name];
      apply(body);
    }, (e) => {
      if (!current()) return;
      state.failed[name] = failure(e);
      if (opts && opts.failed) opts.failed(e);
    });
  }
  function failure(e) {
    return { status: e.status || 0, message: e.message || String(e), at: Date.now() / 1000 };
  }

  // An operator read (the door, the audit log, the tool calls): null once refused to this key
  // (403), and then
  // not asked again until the key changes; each refused call is a row in the server's audit.
  // A key the server does not know (401) stops every poll instead (see ``poll``). Any other
  // failure is a failed read (the view keeps its last answer, marked stale).
  const REFUSED = {};  // what an operator read answers a key the server refused it (403)
  // ``path`` may be a function that makes the read's requests itself (the tool calls: two).
  function operatorRead(what, path, apply) {
    if (state.refused[what]) { apply(null); return Promise.resolve(); }
    // the key's role first (``learnRole``): a tenant's key never asks, so never meets a 403
    const ask = () => state.role.then(() => {
      if (state.tenantKey) return REFUSED;
      return typeof path === "function" ? path() : AC.api(path);
    }).catch((e) => {
      if (e.status === 403) return REFUSED;
      throw e;
    });
    return read(what, ask, (body) => {
      if (body === REFUSED) state.refused[what] = true;
      apply(body === REFUSED ? null : body);
    });
  }

  AC.operatorRead = operatorRead;

  AC.setKey = function (key) {
    if (key) sessionStorage.setItem("agentconsole-key", key);
    else sessionStorage.removeItem("agentconsole-key");
    const changed = (key || DEV_KEY) !== state.key;
    state.refused = {};
    state.keyRefused = false;  // the new key (or the same one, entered again) is asked anew
    loadKey();
    if (changed) forgetKeyedViews();
    learnRole();
    AC.views.banner("");
    restartFeed();
    poll(true);
  };

  // Another key sees other tenants (or nothing: a wrong key, "Forget"): nothing read with the
  // previous key may stay on screen, and its reads still in flight are dropped when they land.
  function forgetKeyedViews() {
    state.keyGen += 1;
    state.overview = null;
    state.history = [];
    state.programs = new Map();
    state.programsTotal = 0;
    state.programsVersion += 1;
    state.detail = null;
    state.tenants = [];
    state.door = null;
    state.kv = null;
    state.audit = [];
    state.toolCalls = null;
    AC.tools.forget();
    state.failed = {};
    // the tail and the feed's cursor start afresh too
    state.events = [];
    state.eventsSeen = 0;
    state.lastSeq = null;
    state.feedLife = null;
    // another key may be an operator's: its controls are offered until a 403 says otherwise
    state.tenantKey = false;
    state.operatorKey = false;
    AC.views.tenantKey(false);
    AC.views.forget();
  }

  // Ask the server whose key this is (``GET /v1/whoami``) before any operator route: a
  // tenant's key hides the operator's controls without a refused call (each one is an audit
  // row on the server). An operator's key then reads the policy names the switch offers. A
  // server without the route (404) leaves the first 403 to tell, as before.
  function learnRole() {
    const gen = state.keyGen;
    state.policyChoices = null;
    AC.views.policyChoices(null);
    state.role = AC.api("/v1/whoami").then((me) => {
      if (gen !== state.keyGen) return;
      if (!me.operator) { foundTenantKey(); return; }
      state.operatorKey = true;
      AC.tools.read(true);  // the Tools tab's count, whatever the view
      return AC.api("/v1/operator/policy").then((choices) => {
        if (gen !== state.keyGen) return;
        state.policyChoices = choices;
        AC.views.policyChoices(choices);
      });
    }).catch(() => {});  // an older server, or none now: the 403 fallback stands
    return state.role;
  }

  // The server refused an operator route to this key (403): it is a tenant's.
  function foundTenantKey() {
    if (state.tenantKey) return;
    state.tenantKey = true;
    AC.views.tenantKey(true);
  }

  // -- API ---------------------------------------------------------------------------------
  AC.api = async function (path, opts) {
    opts = opts || {};
    const gen = state.keyGen;
    const headers = { Accept: "application/json", Authorization: "Bearer " + state.key };
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, {
      method: opts.method || "GET", headers, cache: "no-store",
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    });
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (!res.ok) {
      const err = (body && body.error) || {};
      const error = new Error(err.message || res.statusText || "request failed");
      error.status = res.status;
      if (gen === state.keyGen) {
        if (res.status === 401) {
          state.keyRefused = true;
          AC.views.banner("The server refused this key (HTTP 401); reading is paused until another is entered. " +
            "Use a key the server is configured with (an operator key of [auth] operator_keys, or a tenant's key), " +
            "or, on a server with no keys configured, the development operator key `agentconsole serve` prints at start.");
        } else if (res.status === 403 && path.startsWith("/v1/operator/")) {
          foundTenantKey();
        }
      }
      throw error;
    }
    return body;
  };

  // An operator action's outcome: kept (the last OUTCOMES), and told in a toast.
  AC.outcome = function (outcome) {
    state.outcomes.push(outcome);
    if (state.outcomes.length > OUTCOMES) state.outcomes.shift();
    AC.views.toast(outcome.text, !outcome.ok, outcome.warn);
  };

  // A boost sends no body: the server's default amount, as the dashboard does; the toast
  // says the amount the server applied. A cancel goes to the program's own route: with an
  // operator key the server makes it the operator cancel (audited alike), and a tenant's key
  // may cancel its own programs there (the operator route refuses it, and audits that).
  AC.act = async function (action, programId) {
    let outcome;
    const base = action === "cancel" ? "/v1/programs/" : "/v1/operator/programs/";
    try {
      const body = await AC.api(base + encodeURIComponent(programId) + "/" + action,
        { method: "POST", body: action === "boost" ? undefined : {} });
      const text = AC.views.describe(action, programId, body);
      outcome = { action, programId, ok: true, text, warn: AC.views.sideEffectsRunning(action, body) };
    } catch (e) {
      outcome = { action, programId, ok: false, text: action + " " + programId + ": " + e.message };
    }
    state.outcomes.push(outcome);
    if (state.outcomes.length > OUTCOMES) state.outcomes.shift();
    AC.views.toast(outcome.text, !outcome.ok, outcome.warn);
    poll(true);
  };

  // Switch the scheduling policy (``field`` "policy") or the tool-wait KV policy
  // ("kv_policy") by name: one of the server's names (``state.policyChoices``), or, from a
  // server that publishes none, a typed one it refuses with a message listing its names.
  AC.setPolicy = async function (field, name) {
    let outcome;
    try {
      const body = await AC.api("/v1/operator/policy", { method: "POST", body: { [field]: name } });
      if (state.overview) state.overview = Object.assign({}, state.overview, body);  // shown now
      if (state.policyChoices) {
        state.policyChoices = Object.assign({}, state.policyChoices, body);
        AC.views.policyChoices(state.policyChoices);
      }
      outcome = { action: "policy", programId: "", ok: true, text: "policy " + body.policy + " · kv policy " + body.kv_policy };
    } catch (e) {
      outcome = { action: "policy", programId: "", ok: false, text: "policy " + name + ": " + e.message };
    }
    state.outcomes.push(outcome);
    if (state.outcomes.length > OUTCOMES) state.outcomes.shift();
    AC.views.toast(outcome.text, !outcome.ok);
    schedule();
    return outcome.ok;
  };

  // Start (``enabled`` true) or end the server's drain; the header's button asks first before
  // a start (views.confirmDrain). The answer's ``draining`` goes into the overview at once:
  // with the feed live a poll does not read the overview again, so the pill and the button
  // would otherwise lag the toast until the feed's next overview.
  AC.drain = async function (enabled) {
    let outcome;
    AC.views.drainBusy(true);  // one at a time: a second click would ask the server twice
    try {
      const body = await AC.api("/v1/operator/drain", { method: "POST", body: { enabled } });
      const draining = body && typeof body.draining === "boolean" ? body.draining : enabled;
      if (state.overview) state.overview = Object.assign({}, state.overview, { draining });
      outcome = { action: "drain", programId: "", ok: true, text: draining ? "draining: new calls refused" : "drain ended" };
    } catch (e) {
      outcome = { action: "drain", programId: "", ok: false, text: (enabled ? "drain" : "end drain") + ": " + e.message };
    } finally {
      AC.views.drainBusy(false);
    }
    state.outcomes.push(outcome);
    if (state.outcomes.length > OUTCOMES) state.outcomes.shift();
    AC.views.toast(outcome.text, !outcome.ok);
    poll(true);
    return outcome.ok;
  };

  // "Replay this window": the span of the overview charts (HISTORY one-second samples) up
  // to now, written by the server as a trace; the answer names the file and the command.
  AC.replayWindow = async function () {
    AC.views.replayBusy(true);
    try {
      const since = Math.max(0, Date.now() / 1000 - HISTORY);
      const body = await AC.api("/v1/operator/whatif", { method: "POST", body: { since } });
      AC.views.replay(body, HISTORY);
    } catch (e) {
      AC.views.toast("replay this window: " + e.message, true);
    } finally {
      AC.views.replayBusy(false);
    }
  };

  // -- live feed (fetch streaming: EventSource cannot send the Authorization header) -------
  function SSEParser() { this.buf = ""; this.event = ""; this.data = []; }
  SSEParser.prototype.feed = function (chunk) {
    this.buf += chunk;
    const out = [];
    let m;
    while ((m = /\r\n|\n|\r(?=[^\n])/.exec(this.buf)) !== null) {
      const line = this.buf.slice(0, m.index);
      this.buf = this.buf.slice(m.index + m[0].length);
      if (line === "") {
        if (this.data.length) out.push({ event: this.event || "message", data: this.data.join("\n") });
        this.event = ""; this.data = [];
      } else if (line[0] !== ":") {
        const i = line.indexOf(":");
        const name = i < 0 ? line : line.slice(0, i);
        let value = i < 0 ? "" : line.slice(i + 1);
        if (value[0] === " ") value = value.slice(1);
        if (name === "event") this.event = value;
        else if (name === "data") this.data.push(value);
      }
    }
    return out;
  };
  AC.SSEParser = SSEParser;

  let feedAbort = null;
  function restartFeed() { if (feedAbort) feedAbort.abort(); }

  async function runFeed() {
    let delay = 500;
    for (;;) {
      const ctrl = new AbortController();
      feedAbort = ctrl;
      const gen = state.keyGen;
      try {
        // resume after the last seq seen, of the server life it came from (docs/API.md)
        let since = state.lastSeq === null ? "" : "?since=" + state.lastSeq;
        if (since && state.feedLife) since += "&life=" + encodeURIComponent(state.feedLife);
        const res = await fetch("/v1/events" + since, {
          headers: { Authorization: "Bearer " + state.key, Accept: "text/event-stream" },
          signal: ctrl.signal, cache: "no-store",
        });
        if (!res.ok) throw new Error("feed refused: HTTP " + res.status);
        setLive(true, "live");
        delay = 500;
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        const parser = new SSEParser();
        for (;;) {
          const chunk = await reader.read();
          if (chunk.done) break;
          for (const msg of parser.feed(decoder.decode(chunk.value, { stream: true }))) {
            if (gen === state.keyGen) onMessage(msg);  // else the previous key's feed, ending
          }
        }
        setLive(false, "reconnecting");
      } catch (e) {
        setLive(false, e.name === "AbortError" ? "reconnecting" : String(e.message || e));
        if (e.name === "AbortError") { delay = 0; }
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(5000, Math.max(500, delay * 2));
    }
  }

  function setLive(live, text) {
    state.live = live;
    AC.views.live(live, text);
  }

  function onMessage(msg) {
    let data;
    try { data = JSON.parse(msg.data); } catch (e) { return; }
    if (msg.event === "overview") {
      state.overview = data;
      delete state.failed.overview;
      state.history.push({ t: new Date(), o: data });
      if (state.history.length > HISTORY) state.history.shift();
      schedule("overview");
    } else if (msg.event === "batch") {
      onBatch(data);
    } else if (msg.event === "reset") {
      // the seq sent named events of an earlier server life that no longer exist (a crash):
      // resume from where the server says, even below the last seq seen
      state.lastSeq = data.seq;
      state.feedLife = data.life;
    }
  }

  function onBatch(batch) {
    const events = (batch && batch.events) || [];
    state.stats.batches += 1;
    if (typeof batch.seq === "number") state.lastSeq = Math.max(state.lastSeq || 0, batch.seq);
    if (batch.life) state.feedLife = batch.life;
    let touched = false;
    for (const e of events) {
      state.events.push(e);
      state.eventsSeen += 1;
      const next = TERMINAL[e.kind];
      const row = next && state.programs.get(e.program_id);
      if (row && row.state !== next) { row.state = next; state.programsVersion += 1; }
      if (e.program_id && e.program_id === state.detailId) touched = true;
    }
    if (state.events.length > TAIL) state.events.splice(0, state.events.length - TAIL);
    // only the open program's screen re-reads on its news: the detail id outlives the screen,
    // and a poll from the list would read every page of the list for one program's event
    if (touched && state.view === "program") reloadDetailSoon();
    // a tool ended (in doubt, perhaps) or a side effect started: the tool calls are read again
    AC.tools.onEvents(events);
    schedule("batch");
  }

  // Feed batches about the open program read it again once the batches of the next moment are
  // in, as the dashboard does (its DETAIL_RELOAD_S): one read for a burst of them, not one
  // each; that read is a poll, so it also joins poll's one in flight and one pending.
  const DETAIL_RELOAD_MS = 300;
  let detailReload = null;
  function reloadDetailSoon() {
    if (detailReload !== null) return;
    detailReload = setTimeout(() => {
      detailReload = null;
      if (state.view === "program") poll(true);  // else route() polled the view shown now
    }, DETAIL_RELOAD_MS);
  }

  // -- rendering is coalesced to one pass per animation frame ------------------------------
  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const t0 = performance.now();
      AC.views.render(state.view);
      const spent = performance.now() - t0;
      state.stats.updates.push(spent);
      if (state.stats.updates.length > 5000) state.stats.updates.shift();
    });
  }
  AC.schedule = schedule;

  // -- polling: what the visible view needs, once a second --------------------------------
  let polling = false;
  let again = false;
  async function poll(now) {
    // a key the server refused (401): nothing is read until the key changes (``AC.setKey``)
    if (state.keyRefused) { state.stats.pausedPolls += 1; schedule(); return; }
    if (polling) { again = again || !!now; return; }
    polling = true;
    try {
      const view = state.view;
      const jobs = [];
      if (!state.live || !state.overview) {
        jobs.push(read("overview", () => AC.api("/v1/overview"), (o) => { state.overview = o; }));
      }
      if (view === "programs") {
        const q = state.scope === "all" ? "" : "&state=running";
        jobs.push(read("programs", () => fetchPrograms(q), (listing) => {
          state.programs = listing.rows;
          state.programsTotal = listing.total;
          state.programsVersion += 1;
        }));
      }
      if (view === "program" && state.detailId) jobs.push(readDetail(state.detailId));
      if (view === "tenants") {
        jobs.push(read("tenants", () => AC.api("/v1/tenants"), (b) => { state.tenants = b.tenants || []; }));
        // the door is the operator's to see: with a tenant key its section stays hidden
        jobs.push(operatorRead("door", "/v1/operator/door", (d) => { state.door = d; }));
      }
      if (view === "kv") jobs.push(read("kv", () => AC.api("/v1/kv"), (b) => { state.kv = b; }));
      if (view === "tools") jobs.push(AC.tools.read());
      if (view === "audit") {
        jobs.push(operatorRead("audit", "/v1/operator/audit?limit=200", (b) => { state.audit = b ? b.actions || [] : []; }));
      }
      await Promise.allSettled(jobs);
      state.stats.polls += 1;
      schedule();
    } finally {
      polling = false;
      if (again) { again = false; poll(); }
    }
  }
  AC.poll = poll;

  // The detail of one program. An answer for another program than the one now routed to (the
  // operator moved on while it was in flight) is dropped, as is its failure. A program that
  // is not there for this key (404, 403) leaves nothing of its last detail on screen; any
  // other failure keeps the last detail, marked stale.
  function readDetail(id) {
    return read("detail", () => AC.api("/v1/programs/" + encodeURIComponent(id)), (d) => { state.detail = d; }, {
      wanted: () => id === state.detailId,
      failed: (e) => { if (e.status === 404 || e.status === 403) state.detail = null; },
    });
  }

  // Keyset paging: each page asks for the rows strictly after the last one of the page
  // before (the server's opaque next_cursor, null on the last page). An offset counted rows
  // that programs ending or starting between two reads had shifted, so past one page rows
  // were skipped or shown twice and the list flickered.
  async function fetchPrograms(query) {
    const rows = new Map();
    let total = 0;
    let after = "";
    let read = 0;
    for (let page = 0; page < 10; page += 1) {  // at most 5,000 rows, as before
      const body = await AC.api("/v1/programs?limit=500" + after + query);
      const got = body.programs || [];
      for (const p of got) rows.set(p.program_id, p);
      read += got.length;
      total = body.total || rows.size;
      if (!got.length) break;
      if ("next_cursor" in body) {
        if (body.next_cursor === null) break;
        after = "&cursor=" + encodeURIComponent(body.next_cursor);
      } else {
        // a server older than the cursor: page by offset, as it understands
        if (read >= total) break;
        after = "&offset=" + read;
      }
    }
    return { rows, total };
  }

  // -- routing -----------------------------------------------------------------------------
  function route() {
    const hash = location.hash || "#/overview";
    const m = hash.match(/^#\/program\/(.+)$/);
    if (m) {
      state.view = "program";
      const id = decodeURIComponent(m[1]);
      if (id !== state.detailId) {
        // nothing of the previous program stays on screen while this one is read
        state.detailId = id;
        state.detail = null;
        delete state.failed.detail;
      }
    } else {
      const view = hash.replace(/^#\/?/, "") || "overview";
      state.view = ["overview", "programs", "tenants", "kv", "audit", "events", "tools"].includes(view) ? view : "overview";
    }
    AC.views.show(state.view);
    poll(true);
    schedule();
  }

  document.addEventListener("DOMContentLoaded", () => {
    AC.views.bind();
    loadKey();
    learnRole();
    window.addEventListener("hashchange", route);
    route();
    runFeed();
    setInterval(poll, 1000);
    AC.tools.start();
  });
})();
