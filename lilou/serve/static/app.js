// Lilou's page: rank devices for an uploaded ONNX file, show one device's kernel breakdown, and the
// LLM form. Plain DOM calls against the service's own /v1 endpoints; nothing is loaded from elsewhere.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const TOP_KERNELS = 12;

function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

const ms = (x) => (x >= 100 ? x.toFixed(1) : x >= 1 ? x.toFixed(3) : x.toFixed(4));

async function call(path, body) {
  const response = await fetch(path, { method: "POST", body });
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    const detail = data && data.detail ? data.detail : `HTTP ${response.status}`;
    throw new Error(detail);
  }
  return { data, response };
}

// ----------------------------------------------------------------- devices
async function loadDevices() {
  const response = await fetch("/v1/gpus");
  const gpus = await response.json();
  const select = $("devices");
  const names = $("gpu-names");
  for (const gpu of gpus) {
    select.append(el("option", gpu.name, { value: gpu.name }));
    names.append(el("option", null, { value: gpu.name }));
    for (const profile of gpu.mig_profiles || []) {
      select.append(el("option", `${gpu.name} MIG ${profile.name}`, { value: `${gpu.name}/${profile.name}` }));
    }
  }
}

function chosenDevices() {
  if ($("all-devices").checked) return null;
  return Array.from($("devices").selectedOptions).map((o) => o.value);
}

// ----------------------------------------------------------------- ranking
// "input_ids=8x512, sequence_length=512" -> {"input_ids": [8, 512], "sequence_length": [512]} (as --shape reads it)
function parseShapes(text) {
  const shapes = {};
  for (const item of text.split(/[\s,;]+/).filter(Boolean)) {
    const match = /^([^=]+)=(\d+(?:[xX]\d+)*)$/.exec(item);
    if (!match) throw new Error(`cannot read shape "${item}"; write NAME=D1xD2 (an input) or NAME=N (a named dimension)`);
    shapes[match[1]] = match[2].split(/[xX]/).map(Number);
  }
  return shapes;
}

// "use_cache_branch=false sr=16000" -> {"use_cache_branch": [false], "sr": [16000]} (as --value reads it)
function parseValues(text) {
  const values = {};
  for (const item of text.split(/[\s;]+/).filter(Boolean)) {
    const match = /^([^=]+)=(.+)$/.exec(item);
    const parsed = match && match[2].split(",").map((v) =>
      /^(true|false)$/i.test(v) ? v.toLowerCase() === "true"
        : /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/.test(v) ? Number(v) : null);
    if (!parsed || parsed.includes(null)) {
      throw new Error(`cannot read value "${item}"; write NAME=true, NAME=false or NAME=number`);
    }
    values[match[1]] = parsed;
  }
  return values;
}

// The model and its options as the form holds them now: a ranking keeps these, so that its breakdowns predict
// what its table shows even after the form has changed (a breakdown read the live form: batch 64 under a table of batch 1).
function modelInputs() {
  const inputs = { file: $("file").files[0], batch: $("batch").value || null, precision: $("precision").value || null };
  const shapes = parseShapes($("shapes").value);
  inputs.shapes = Object.keys(shapes).length ? JSON.stringify(shapes) : null;
  const values = parseValues($("values").value);
  inputs.values = Object.keys(values).length ? JSON.stringify(values) : null;
  return inputs;
}

function modelForm(inputs, extra) {
  const form = new FormData();
  for (const [k, v] of Object.entries({ ...inputs, ...extra })) if (v !== null && v !== undefined) form.append(k, v);
  return form;
}

function showWarnings(lists) {
  const seen = new Set();
  const ul = $("warnings");
  ul.replaceChildren();
  for (const list of lists) for (const w of list || []) {
    if (seen.has(w)) continue;
    seen.add(w);
    ul.append(el("li", w));
  }
  $("warnings-box").hidden = seen.size === 0;
}

let rankWarnings = [];
let rankedInputs = null;   // the inputs of the ranking on screen (modelInputs)

// An error leaves no figures of an earlier request on screen, as if they answered this one.
function clearRanking() {
  rankedInputs = null;
  rankWarnings = [];
  $("ranking").hidden = true;
  $("ranking").tBodies[0].replaceChildren();
  clearBreakdown();
  showWarnings([]);
}

function clearBreakdown() {
  $("breakdown").hidden = true;
  $("chart").replaceChildren();
}

function renderRanking(entries) {
  const table = $("ranking");
  const body = table.tBodies[0];
  body.replaceChildren();
  const withIntervals = entries.some((e) => Array.isArray(e.interval_ms));
  for (const th of table.querySelectorAll("th.interval")) th.hidden = !withIntervals;
  const fastest = entries.length ? entries[0].latency_ms : 0;
  entries.forEach((entry, i) => {
    const row = el("tr");
    row.append(el("td", i + 1), el("td", entry.gpu), el("td", entry.mig || "–"),
               el("td", ms(entry.latency_ms), { class: "num" }));
    if (withIntervals) {
      const iv = entry.interval_ms;
      row.append(el("td", Array.isArray(iv) ? `${ms(iv[0])} – ${ms(iv[1])}` : "–", { class: "num" }));
    }
    row.append(el("td", fastest ? `${(entry.latency_ms / fastest).toFixed(2)}×` : "–", { class: "num" }));
    const cell = el("td");
    const button = el("button", "breakdown", { type: "button",
      "aria-label": `kernel breakdown on ${entry.gpu}${entry.mig ? " MIG " + entry.mig : ""}` });
    button.addEventListener("click", () => breakdown(entry.gpu, entry.mig));
    cell.append(button);
    row.append(cell);
    body.append(row);
  });
  $("ranking-caption").textContent = `Predicted latency on ${entries.length} devices, fastest first`;
  table.hidden = false;
}

function renderChart(prediction) {
  const kernels = prediction.kernels.slice().sort((a, b) => b.latency_ms - a.latency_ms);
  const top = kernels.slice(0, TOP_KERNELS);
  const rest = kernels.slice(TOP_KERNELS);
  const bars = top.map((k) => ({ label: `${k.type} · ${k.nodes[0]}`, value: k.latency_ms,
                                 title: `${k.nodes.join(", ")}: ${ms(k.latency_ms)} ms` }));
  const max = Math.max(...bars.map((b) => b.value), 1e-9);
  const rowH = 22, labelW = 300, barW = 420, width = labelW + barW + 90;
  const chart = svg("svg", { width, height: bars.length * rowH + 10, viewBox: `0 0 ${width} ${bars.length * rowH + 10}`,
                             role: "img", class: "chart",
                             "aria-label": `${prediction.kernels.length} kernels, ${ms(prediction.latency_ms)} ms in all; ` +
                                           `the ${top.length} longest are drawn` });
  bars.forEach((bar, i) => {
    const y = 5 + i * rowH;
    const group = svg("g");
    group.append(svg("title", {}, bar.title));
    const label = bar.label.length > 48 ? bar.label.slice(0, 47) + "…" : bar.label;
    group.append(svg("text", { x: labelW - 8, y: y + 15, "text-anchor": "end", class: "label" }, label));
    group.append(svg("rect", { x: labelW, y: y + 3, height: rowH - 6, width: Math.max(1, (bar.value / max) * barW),
                               class: "bar" }));
    group.append(svg("text", { x: labelW + (bar.value / max) * barW + 6, y: y + 15, class: "value" },
                     `${ms(bar.value)} ms`));
    chart.append(group);
  });
  const total = prediction.latency_ms || 1e-9;
  const restMs = rest.reduce((sum, k) => sum + k.latency_ms, 0);
  const shown = el("p", `The ${top.length} longest kernels carry ${(100 * (1 - restMs / total)).toFixed(1)} % of the ` +
                        `time` + (rest.length ? `; ${rest.length} others ${ms(restMs)} ms.` : "."), { class: "hint" });
  $("chart").replaceChildren(chart, shown);
  const device = prediction.mig ? `${prediction.gpu} MIG ${prediction.mig}` : prediction.gpu;
  const interval = Array.isArray(prediction.interval_ms)
    ? ` (90 % interval ${ms(prediction.interval_ms[0])} – ${ms(prediction.interval_ms[1])} ms)` : "";
  const batch = prediction.batch === null || prediction.batch === undefined ? "" : `, batch ${prediction.batch}`;
  $("breakdown-title").textContent = `Kernel breakdown on ${device}${batch}: ${ms(prediction.latency_ms)} ms${interval}, ` +
    `${prediction.kernels.length} kernels`;
  $("breakdown").hidden = false;
}

async function breakdown(gpu, mig) {
  const inputs = rankedInputs;
  if (!inputs) return;
  $("rank-status").textContent = `Predicting the kernels on ${gpu}${mig ? " MIG " + mig : ""}…`;
  try {
    const { data } = await call("/v1/predict", modelForm(inputs, { gpu, mig }));
    if (inputs !== rankedInputs) return;   // another ranking replaced this one meanwhile
    renderChart(data);
    showWarnings([rankWarnings, data.warnings]);
    $("rank-status").textContent = "Done.";
  } catch (error) {
    if (inputs !== rankedInputs) return;
    clearBreakdown();
    showWarnings([rankWarnings]);
    $("rank-status").textContent = `Error: ${error.message}`;
  }
}

async function rank(event) {
  event.preventDefault();
  if (!$("file").files.length) {
    $("rank-status").textContent = "Choose an ONNX file first.";
    return;
  }
  const devices = chosenDevices();
  if (devices !== null && devices.length === 0) {
    $("rank-status").textContent = "Pick at least one device, or tick “every GPU and MIG slice”.";
    return;
  }
  $("rank-button").disabled = true;
  $("rank-status").textContent = "Ranking…";
  try {
    const inputs = modelInputs();
    const { data, response } = await call("/v1/rank", modelForm(inputs, { gpus: devices ? devices.join(",") : null }));
    clearRanking();
    rankedInputs = inputs;
    rankWarnings = JSON.parse(response.headers.get("Lilou-Warnings") || "[]");
    renderRanking(data);
    showWarnings([rankWarnings]);
    if (data.length) await breakdown(data[0].gpu, data[0].mig);
  } catch (error) {
    clearRanking();
    $("rank-status").textContent = `Error: ${error.message}`;
  } finally {
    $("rank-button").disabled = false;
  }
}

// ----------------------------------------------------------------- LLM
const LLM_FIELDS = [["ttft_ms", "time to first token (ms)"], ["itl_ms", "inter-token latency (ms)"],
                    ["e2e_ms", "end to end (ms)"], ["tokens_per_s", "tokens/s"], ["power_w", "power (W)"],
                    ["energy_per_token_j", "energy per token (J)"], ["max_batch_fitting", "largest batch that fits"]];

function clearLLM() {
  $("llm-result").hidden = true;
  $("llm-result").replaceChildren();
  $("llm-warnings").replaceChildren();
}

async function llm(event) {
  event.preventDefault();
  const config = $("llm-config").files[0];
  if (!config && !$("llm-model").value.trim()) {  // the box is not `required`: a chosen config.json stands for it
    clearLLM();
    $("llm-status").textContent = "Give a model name, or choose a config.json.";
    return;
  }
  const body = {
    model: $("llm-model").value.trim(), gpu: $("llm-gpu").value.trim(), mig: $("llm-mig").value.trim() || null,
    tp: Number($("llm-tp").value), batch: Number($("llm-batch").value),
    input_len: Number($("llm-input").value), output_len: Number($("llm-output").value),
    dtype: $("llm-dtype").value || null, engine: $("llm-engine").value,
  };
  $("llm-status").textContent = "Predicting…";
  try {
    let request = { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
    if (config) {  // an uploaded config.json stands for the model name (multipart part "file")
      const form = new FormData();
      form.append("file", config);
      for (const [key, value] of Object.entries(body)) {
        if (key !== "model" && value !== null && value !== undefined) form.append(key, value);
      }
      request = { method: "POST", body: form };
    }
    const response = await fetch("/v1/llm", request);
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) throw new Error(data && data.detail ? data.detail : `HTTP ${response.status}`);
    clearLLM();
    const dl = $("llm-result");
    for (const [key, name] of LLM_FIELDS) {
      if (!(key in data)) continue;
      const value = typeof data[key] === "number" ? Number(data[key].toPrecision(4)) : data[key];
      const iv = data.intervals && data.intervals[key];
      dl.append(el("dt", name), el("dd", Array.isArray(iv) ? `${value} (90 %: ${iv[0]} – ${iv[1]})` : value));
    }
    const steady = data.steady_state;
    if (steady) {
      const iv = steady.interval_ms;
      dl.append(el("dt", `ITL, server with ${data.batch} running (ms)`),
                el("dd", `${Number(steady.itl_ms.toPrecision(4))}` + (Array.isArray(iv) ? ` (90 %: ${iv[0]} – ${iv[1]})` : "")),
                el("dt", `tokens/s, server with ${data.batch} running`),
                el("dd", `${Number(steady.tokens_per_s.toPrecision(4))}`));
    }
    if (data.memory) {
      dl.append(el("dt", "memory (GB)"),
                el("dd", `${data.memory.total_gb} of ${data.memory.device_gb}` + (data.memory.fits ? ", fits" : ", does not fit")));
    }
    dl.hidden = false;
    const ul = $("llm-warnings");
    ul.replaceChildren(...(data.warnings || []).map((w) => el("li", w)));
    $("llm-status").textContent = "Done.";
  } catch (error) {
    clearLLM();
    $("llm-status").textContent = `Error: ${error.message}`;
  }
}

async function setUpLLM() {
  const health = await (await fetch("/v1/healthz")).json();
  if (!health.endpoints || !health.endpoints.llm) {
    $("llm-form").hidden = true;
    $("llm-unavailable").hidden = false;
    return;
  }
  const models = await (await fetch("/v1/llm/models")).json();
  for (const name of models) $("llm-models").append(el("option", null, { value: name }));
  if (models.length && !$("llm-model").value) $("llm-model").value = models[0];
  $("llm-form").addEventListener("submit", llm);
}

// ----------------------------------------------------------------- drag and drop
function setUpDrop() {
  const zone = $("drop");
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    if (e.dataTransfer.files.length) {
      $("file").files = e.dataTransfer.files;
      $("rank-status").textContent = `${e.dataTransfer.files[0].name} ready.`;
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  $("all-devices").addEventListener("change", (e) => { $("devices").disabled = e.target.checked; });
  $("rank-form").addEventListener("submit", rank);
  setUpDrop();
  loadDevices().catch((e) => { $("rank-status").textContent = `Cannot list GPUs: ${e.message}`; });
  setUpLLM().catch((e) => { $("llm-status").textContent = `Cannot reach /v1/llm: ${e.message}`; });
});
