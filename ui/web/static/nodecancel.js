// agentconsole browser console: the node cancel of the program view. A node is picked in the
// DAG or the nodes table; "Cancel node…" is offered only for one that has not ended, in a
// running program. It asks first (the node, how many of its descendants go with it, that side
// effects run to their commit), then posts POST /v1/programs/{id}/nodes/{node_id}/cancel: the
// program's own route, as the program cancel's (an operator key makes it the operator's,
// audited; a tenant's key may cancel a node of its own program there). The toast says what
// the server stopped.
"use strict";
(function () {
  const AC = (window.AC = window.AC || {});
  const $ = (s) => document.querySelector(s);
  // ended node states: such a node is not offered a cancel (the server answers 409)
  const ENDED = new Set(["done", "failed", "cancelled"]);
  // how many descendants the question names (the count is always whole)
  const NAMED = 3;
  // the node picked, and of which program: another program's pick is no pick
  let picked = { programId: null, nodeId: null };

  const pickedId = (programId) => (picked.programId === programId ? picked.nodeId : null);
  const cancellable = (d, n) => !!n && d.state === "running" && !ENDED.has(n.state);
  const withdrawn = (n) => !!n.withdrawn && n.state === "cancelled";

  // What a cancel of ``nodeId`` stops with it: its descendants not yet ended (the server's
  // rule, scheduler/dag.py cancel_subtree), in the detail's node order.
  function descendants(d, nodeId) {
    const children = new Map();
    for (const n of d.nodes || []) {
      for (const p of n.parents || []) {
        if (!children.has(p)) children.set(p, []);
        children.get(p).push(n.node_id);
      }
    }
    const seen = new Set([nodeId]);
    const stack = [nodeId];
    while (stack.length) {
      for (const c of children.get(stack.pop()) || []) if (!seen.has(c)) { seen.add(c); stack.push(c); }
    }
    return (d.nodes || []).filter((n) => n.node_id !== nodeId && seen.has(n.node_id) && !ENDED.has(n.state))
      .map((n) => n.node_id);
  }

  function question(d, n) {
    const below = descendants(d, n.node_id);
    const named = below.slice(0, NAMED).join(", ") + (below.length > NAMED ? " and " + (below.length - NAMED) + " more" : "");
    return "Cancel node " + n.node_id + " (" + (n.tool || n.kind) + ", " + n.state + ") of program " + d.program_id +
      (below.length ? " and its " + below.length + " descendants not yet ended (" + named + ")" : " (no descendant not yet ended)") +
      "? Their queued and running calls are aborted and read-only tools interrupted; side-effecting tools " +
      "run on to their commit. The program keeps running, with nothing new under these nodes. This cannot be undone.";
  }

  // ``cancelled n3 of p1 and 2 descendants: 1 calls aborted, 0 tools interrupted`` and what
  // still runs, as the dashboard's notice says it
  function describe(programId, nodeId, body) {
    const list = (k) => (Array.isArray(body && body[k]) ? body[k].map(String) : []);
    const cancelled = list("cancelled_nodes");
    const where = nodeId + " of " + programId;
    if (!cancelled.length) return where + " was cancelled already: nothing more to stop";
    const others = cancelled.filter((id) => id !== nodeId).length;
    let text = "cancelled " + where + (others ? " and " + others + " descendants" : "") + ": " +
      list("aborted_calls").length + " calls aborted, " + list("interrupted_tools").length + " tools interrupted";
    if (list("flagged_tools").length) text += "; " + AC.views.stillRunning(list("flagged_tools"));
    return text + AC.views.leftToTheAgent(list("running_tools"));
  }

  async function send(programId, nodeId) {
    let outcome;
    const path = "/v1/programs/" + encodeURIComponent(programId) + "/nodes/" + encodeURIComponent(nodeId) + "/cancel";
    try {
      const body = await AC.api(path, { method: "POST", body: {} });
      const warn = Array.isArray(body && body.flagged_tools) && body.flagged_tools.length > 0;
      outcome = { action: "cancel node", programId, nodeId, ok: true, text: describe(programId, nodeId, body), warn };
    } catch (e) {
      outcome = { action: "cancel node", programId, nodeId, ok: false, text: "cancel node " + nodeId + " of " + programId + ": " + e.message };
    }
    AC.outcome(outcome);
    AC.poll(true);
  }

  // The button says which node it cancels, and is enabled only for one that may be.
  function render(d) {
    const button = $("#cancel-node");
    const id = d ? pickedId(d.program_id) : null;
    const node = id === null ? null : (d.nodes || []).find((n) => n.node_id === id) || null;
    const label = node ? "Cancel node " + node.node_id + "…" : "Cancel node…";
    if (button.textContent !== label) button.textContent = label;
    button.disabled = !d || !cancellable(d, node);
    button.title = !node ? "pick a node in the DAG or the table first"
      : button.disabled ? node.node_id + " has ended: nothing to cancel"
        : "cancel " + node.node_id + " and its descendants not yet ended (asks first)";
  }

  function pick(programId, nodeId) {
    picked = { programId, nodeId };
    render(AC.state.detail && AC.state.detail.program_id === programId ? AC.state.detail : null);
  }

  function ask() {
    const d = AC.state.detail;
    const id = d ? pickedId(d.program_id) : null;
    const node = id === null ? null : (d.nodes || []).find((n) => n.node_id === id);
    if (!node || !cancellable(d, node)) return;
    AC.views.confirm(question(d, node), "Cancel node", () => send(d.program_id, node.node_id));
  }

  document.addEventListener("DOMContentLoaded", () => $("#cancel-node").addEventListener("click", ask));

  AC.nodeCancel = { pick, pickedId, render, describe, descendants, withdrawn, send };
})();
