// agentconsole browser console: the served models' KV compatibility
// (GET /v1/models/compatibility): each pair's verdict (shared leading layers of all) and
// reasons, and that no engine shares KV across models (sharing is off).
"use strict";
(function () {
  const AC = (window.AC = window.AC || {});
  const $ = (s) => document.querySelector(s);

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
  }

  function verdict(p) {
    return p.compatible ? "compatible: " + p.shared_kv_layers + " of " + p.layers + " layers" : "incompatible";
  }

  function render(body) {
    const models = body.models.map((m) => m.error ? m.name + ": " + m.error : m.name + " (" + m.layers + " layers)");
    $("#compat-models").textContent = "models: " + (models.join("; ") || "none");
    $("#compat-sharing").textContent = "cross-model KV sharing: " + (body.enabled ? "on" : "off") + " (" + body.note + ")";
    const tbody = $("#compat-pairs tbody");
    tbody.replaceChildren();
    for (const p of body.pairs) {
      const row = document.createElement("tr");
      cell(row, p.a); cell(row, p.b); cell(row, verdict(p), p.compatible ? "ok" : "muted");
      cell(row, p.reasons.join("; "));
      row.lastChild.style.whiteSpace = "normal"; // reasons are sentences: wrap them
      tbody.appendChild(row);
    }
    if (!body.pairs.length) $("#compat-models").textContent += " (one model: no pair)";
    $("#compat").hidden = false;
  }

  AC.modelCompat = async function () {
    $("#model-compat").disabled = true;
    try {
      render(await AC.api("/v1/models/compatibility"));
    } catch (e) {
      AC.views.toast("model compatibility: " + e.message, true);
    } finally {
      $("#model-compat").disabled = false;
    }
  };

  document.addEventListener("DOMContentLoaded", () => {
    $("#model-compat").addEventListener("click", () => AC.modelCompat());
    $("#compat-close").addEventListener("click", () => { $("#compat").hidden = true; });
  });
})();
