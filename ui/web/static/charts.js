// agentconsole browser console: plotly.js figures, updated in place with Plotly.react.
// plotly.min.js is served by the server from its installed plotly package (no CDN).
"use strict";
(function () {
  const AC = (window.AC = window.AC || {});
  const charts = (AC.charts = {});
  const COLORS = { queue: "#f5a623", kv: "#ff4d6d", prefill: "#4aa3ff", decode: "#52c41a", tool: "#c86bfa" };
  const TIERS = { hbm: "#52c41a", dram: "#f5a623", disk: "#4aa3ff" };
  const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  // Plotly reads a subset of HTML in every text it draws (ticks, legends, bar texts, hover
  // labels): <a href> becomes a link, <span style> restyles, <b>, <i>, <br> format. Names
  // from the server (tenants, program and node ids, tier names) are chosen by others, so
  // each goes through plain() before it reaches a chart; Plotly turns &amp; &lt; &gt; back
  // into the characters, so the name shows as sent. Hover templates substitute values as
  // they are (%{x}, %{y}): escaped values keep those plain too. Applied to every string
  // of a category axis alike (its values, categoryarray, tickvals), so they still match.
  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;" };
  function plain(value) {
    return String(value).replace(/[&<>]/g, (c) => ESCAPES[c]);
  }

  function layout(title, extra) {
    return Object.assign({
      title: { text: title, font: { size: 13 }, x: 0.02 },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: "#d8dee6", family: "system-ui, sans-serif", size: 11 },
      margin: { l: 48, r: 12, t: 32, b: 32 }, height: 260,
      legend: { orientation: "h", y: -0.18 },
      xaxis: { gridcolor: "#2a313b", zerolinecolor: "#2a313b" },
      yaxis: { gridcolor: "#2a313b", zerolinecolor: "#2a313b", rangemode: "tozero" },
    }, extra || {});
  }

  function react(id, data, lay) {
    const node = document.getElementById(id);
    if (!node || !window.Plotly) return;
    window.Plotly.react(node, data, lay, CONFIG);
  }

  function line(xs, ys, name, color) {
    return { x: xs, y: ys, name, type: "scatter", mode: "lines", line: { color, width: 2 } };
  }

  charts.overview = function (history, o) {
    const xs = history.map((h) => h.t);
    const get = (k) => history.map((h) => h.o[k]);
    react("chart-rates", [
      line(xs, get("throughput_programs_per_s"), "throughput", "#4aa3ff"),
      line(xs, get("goodput_programs_per_s"), "goodput", "#52c41a"),
    ], layout("Programs per second"));
    react("chart-latency", [
      line(xs, get("e2e_p50_s"), "p50", "#52c41a"),
      line(xs, get("e2e_p95_s"), "p95", "#f5a623"),
      line(xs, get("e2e_p99_s"), "p99", "#ff4d6d"),
    ], layout("E2E latency (s)"));
    react("chart-queue", [
      line(xs, get("queue_depth"), "queue depth", "#f5a623"),
      line(xs, get("running_calls"), "running calls", "#4aa3ff"),
    ], layout("Queue and batch"));
    charts.tiers("chart-kv", o.kv || {}, "KV by tier (share of capacity)");
  };

  charts.tiers = function (id, tiers, title) {
    // shares of capacity, so a 1 M-token HBM and a 64 M-token disk tier read alike
    const names = Object.keys(tiers);
    const share = (t) => (tiers[t].capacity_tokens ? (100 * tiers[t].used_tokens) / tiers[t].capacity_tokens : 0);
    const text = names.map((t) => AC.views.fmt.count(tiers[t].used_tokens) + " / " + AC.views.fmt.count(tiers[t].capacity_tokens));
    react(id, [
      { type: "bar", name: "used", x: names.map(plain), y: names.map(share), text, textposition: "outside",
        hovertemplate: "%{x}: %{y:.1f}% (%{text} tokens)<extra></extra>",
        marker: { color: names.map((t) => TIERS[t] || "#888") } },
    ], layout(title, { yaxis: { range: [0, 110], ticksuffix: "%", gridcolor: "#2a313b" }, showlegend: false }));
  };

  charts.kv = function (kv) {
    charts.tiers("chart-tiers", kv.tiers || {}, "Occupancy per tier (share of capacity)");
    const top = Object.entries(kv.placement || {})
      .map(([pid, t]) => [pid, t, Object.values(t).reduce((a, b) => a + b, 0)])
      .sort((a, b) => b[2] - a[2]).slice(0, 20).reverse();
    react("chart-placement", Object.keys(TIERS).map((tier) => ({
      type: "bar", orientation: "h", name: tier, y: top.map((r) => plain(r[0])), x: top.map((r) => r[1][tier] || 0),
      marker: { color: TIERS[tier] },
    })), layout("Where programs' KV sits (top 20, tokens)", {
      barmode: "stack", margin: { l: 150, r: 12, t: 32, b: 32 }, height: Math.max(260, 18 * top.length + 90),
      yaxis: { automargin: true, gridcolor: "#2a313b" },
    }));
  };

  charts.tenants = function (rows) {
    const names = rows.map((t) => plain(t.tenant));
    react("chart-tenants", [
      { type: "bar", name: "slowdown (x)", x: names, y: rows.map((t) => t.slowdown || 0), marker: { color: "#f5a623" } },
      { type: "bar", name: "starvation (wait/service)", x: names, y: rows.map((t) => t.starvation || 0), marker: { color: "#ff4d6d" } },
    ], layout("Per-tenant slowdown and starvation", { barmode: "group" }));
  };

  charts.timeline = function (detail) {
    const nodes = detail.nodes || [];
    const starts = nodes.flatMap((n) => (n.timeline || []).map((p) => p.start));
    const t0 = starts.length ? Math.min(...starts) : 0;
    // node ids as the chart spells them (escaped): its bars, categories, ticks and hover
    const ids = nodes.map((n) => plain(n.node_id));
    const path = new Set((detail.critical_path || []).map(plain));
    // an open span (end null: the tool still runs, the call still decodes) lasts until now
    const now = Date.now() / 1000;
    const data = Object.keys(COLORS).map((phase) => {
      const ys = [], xs = [], base = [], open = [];
      for (const n of nodes) for (const p of n.timeline || []) {
        if (p.phase !== phase) continue;
        const running = p.end === null || p.end === undefined;
        const end = running ? Math.max(now, p.start) : p.end;
        ys.push(plain(n.node_id)); base.push(p.start - t0); xs.push(Math.max(end - p.start, 1e-3));
        open.push(running ? " (still running)" : "");
      }
      return { type: "bar", orientation: "h", name: phase, y: ys, x: xs, base, customdata: open,
        marker: { color: COLORS[phase] },
        hovertemplate: "%{y} " + phase + ": %{x:.3f}s from %{base:.3f}s%{customdata}<extra></extra>" };
    });
    const ticks = ids.map((id) => (path.has(id) ? "◆ " + id : id));
    react("chart-timeline", data, layout("Per-node phases (s since the first)", {
      barmode: "overlay", bargap: 0.25, height: Math.max(360, 16 * ids.length + 80),
      margin: { l: 70, r: 12, t: 32, b: 40 },
      yaxis: { type: "category", categoryorder: "array", categoryarray: ids.slice().reverse(),
        tickvals: ids, ticktext: ticks, gridcolor: "#2a313b", automargin: true },
      xaxis: { gridcolor: "#2a313b", title: { text: "seconds" } },
    }));
  };
})();
