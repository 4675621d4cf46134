// agentconsole browser console: a layered DAG layout (Sugiyama-style) drawn as SVG.
// Layers are longest paths from the roots; within a layer, nodes are ordered by the mean
// position of their parents and children (a few barycenter sweeps), which keeps fan-outs and
// joins of agent programs tidy. Hundreds of nodes lay out in a few milliseconds.
"use strict";
(function () {
  const AC = (window.AC = window.AC || {});
  const SVG = "http://www.w3.org/2000/svg";
  const W = 96, H = 28, GX = 14, GY = 34, PAD = 12;
  const FILL = { done: "#2f6f22", running: "#8a6410", ready: "#1f6b6b", pending: "#39414d",
    failed: "#8a1f33", cancelled: "#5e2b7a" };

  function layout(nodes) {
    const ids = nodes.map((n) => n.node_id);
    const known = new Set(ids);
    const parents = new Map(nodes.map((n) => [n.node_id, (n.parents || []).filter((p) => known.has(p))]));
    const children = new Map(ids.map((id) => [id, []]));
    for (const [id, ps] of parents) for (const p of ps) children.get(p).push(id);
    // longest-path layering in topological (Kahn) order; a cycle (a bug) lands last
    const indeg = new Map(ids.map((id) => [id, parents.get(id).length]));
    const depth = new Map();
    const queue = ids.filter((id) => indeg.get(id) === 0);
    for (let i = 0; i < queue.length; i++) {
      const id = queue[i];
      const d = Math.max(-1, ...parents.get(id).map((p) => depth.get(p) ?? -1)) + 1;
      depth.set(id, d);
      for (const c of children.get(id)) { indeg.set(c, indeg.get(c) - 1); if (indeg.get(c) === 0) queue.push(c); }
    }
    const bottom = Math.max(-1, ...depth.values()) + 1;
    for (const id of ids) if (!depth.has(id)) depth.set(id, bottom);
    const layers = [];
    for (const id of ids) (layers[depth.get(id)] = layers[depth.get(id)] || []).push(id);
    const pos = new Map();
    const index = () => layers.forEach((l) => l.forEach((id, i) => pos.set(id, i)));
    index();
    const mean = (list) => (list.length ? list.reduce((a, id) => a + pos.get(id), 0) / list.length : null);
    for (let sweep = 0; sweep < 4; sweep++) {
      const down = sweep % 2 === 0;
      const order = down ? layers.slice(1) : layers.slice(0, -1).reverse();
      for (const layer of order) {
        const key = new Map(layer.map((id, i) => [id, mean(down ? parents.get(id) : children.get(id)) ?? i]));
        layer.sort((a, b) => key.get(a) - key.get(b));
        layer.forEach((id, i) => pos.set(id, i));
      }
    }
    const widest = Math.max(1, ...layers.map((l) => l.length));
    const xy = new Map();
    layers.forEach((layer, d) => {
      const offset = ((widest - layer.length) * (W + GX)) / 2;
      layer.forEach((id, i) => xy.set(id, [PAD + offset + i * (W + GX), PAD + d * (H + GY)]));
    });
    return { xy, parents, width: 2 * PAD + widest * (W + GX) - GX, height: 2 * PAD + layers.length * (H + GY) - GY };
  }

  function make(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function draw(target, detail, fit) {
    const nodes = detail.nodes || [];
    const t0 = performance.now();
    if (!nodes.length) {  // opened before its first node: nothing to lay out (no SVG of height < 0)
      const note = document.createElement("p");
      note.className = "muted";
      note.textContent = "no nodes yet";
      target.replaceChildren(note);
      AC.dag.lastMs = performance.now() - t0;
      return;
    }
    const { xy, parents, width, height } = layout(nodes);
    const cp = detail.critical_path || [];
    const onPath = new Set(cp);
    const cpEdges = new Set(cp.slice(1).map((id, i) => cp[i] + ">" + id));
    const svg = make("svg", { width: fit ? "100%" : width, height: fit ? "" : height,
      viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": "program DAG" });
    const edges = make("g", {});
    const plain = [], hot = [];
    for (const n of nodes) {
      const [x2, y2] = xy.get(n.node_id);
      for (const p of parents.get(n.node_id)) {
        const [x1, y1] = xy.get(p);
        const sx = x1 + W / 2, sy = y1 + H, ex = x2 + W / 2, ey = y2, my = (sy + ey) / 2;
        const path = make("path", { d: `M${sx},${sy} C${sx},${my} ${ex},${my} ${ex},${ey}`,
          class: cpEdges.has(p + ">" + n.node_id) ? "edge cp" : "edge" });
        (cpEdges.has(p + ">" + n.node_id) ? hot : plain).push(path);
      }
    }
    edges.append(...plain, ...hot);  // critical-path edges drawn last, on top
    const group = make("g", {});
    for (const n of nodes) {
      const [x, y] = xy.get(n.node_id);
      // a node cancel's (withdrawn) drawn apart from one its program's end cancelled
      const gone = AC.nodeCancel.withdrawn(n);
      const picked = AC.nodeCancel.pickedId(detail.program_id) === n.node_id;
      const g = make("g", { class: "node" + (onPath.has(n.node_id) ? " cp" : "") + (gone ? " withdrawn" : "") +
        (picked ? " picked" : ""), "data-node": n.node_id, transform: `translate(${x},${y})` });
      const why = n.model_choice ? ` (${n.model_choice.reason})` : "";
      g.append(make("title", {}, `${n.node_id} ${n.tool || n.kind} · ${n.state}` + (gone ? " (withdrawn: node cancel)" : "") +
        (n.model ? ` · model ${n.model}${why}` : "") +
        (n.kv_tier ? ` · KV in ${n.kv_tier}` : "") + (onPath.has(n.node_id) ? " · critical path" : "")));
      g.append(make("rect", { width: W, height: H, fill: FILL[n.state] || "#39414d" }));
      // several models served: the model that ran it, in place of the kind
      const label = (n.node_id + " " + (n.model ? "@" + n.model : n.tool || n.kind)).slice(0, 15);
      g.append(make("text", { x: 6, y: 18, "data-model": n.model || "" }, label));
      g.addEventListener("click", () => AC.views.pickNode(n.node_id));
      group.append(g);
    }
    svg.append(edges, group);
    target.replaceChildren(svg);
    AC.dag.lastMs = performance.now() - t0;
  }

  AC.dag = { layout, draw, lastMs: 0 };
})();
