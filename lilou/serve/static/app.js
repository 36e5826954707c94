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
const sig4 = (x) => Number(x.toPrecision(4));   // the LLM figures and their intervals alike

// A status line: progress and success as a polite status, an error as an alert (styled apart, focused), so that an
// error does not read like "Done.".
function setStatus(id, text, isError = false) {
  const node = $(id);
  node.textContent = text;
  node.classList.toggle("error", isError);
  node.setAttribute("role", isError ? "alert" : "status");
  node.setAttribute("aria-live", isError ? "assertive" : "polite");
  if (isError) node.focus({ preventScroll: false });
}

// POST a FormData (or { body, headers } for JSON); the service's one-line error as the Error's message.
async function call(path, body, headers = {}) {
  let response;
  try {
    response = await fetch(path, { method: "POST", body, headers });
  } catch (e) {  // no answer at all: the browser's "Failed to fetch" said nothing of where
    throw new Error(`no answer from the Lilou server (${e.message}); is it still running?`);
  }
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
let breakdownAsked = 0;    // the latest breakdown asked for: an earlier one's answer, arriving after, is dropped

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

// A device that does not run the precision natively says so beside its name (rank's and plan's precision_path).
const PRECISION_MARKS = { weight_only: " (weight-only)", emulated: " (emulated)", no_runtime: " (no runtime: lower bound)" };

function deviceCell(name, entry) {
  const mark = PRECISION_MARKS[entry.precision_path] || "";
  return el("td", name + mark, mark ? { title: entry.precision_note || "" } : {});
}

function renderRanking(entries) {
  const table = $("ranking");
  const body = table.tBodies[0];
  body.replaceChildren();
  const withIntervals = entries.some((e) => Array.isArray(e.interval_ms));
  for (const th of table.querySelectorAll("th.interval")) th.hidden = !withIntervals;
  const fastest = entries.length ? entries[0].latency_ms : 0;
  entries.forEach((entry, i) => {
    const row = el("tr", null, entry.fits === false ? { class: "no-fit" } : {});
    row.append(el("td", i + 1), deviceCell(entry.gpu, entry),
               el("td", entry.mig || "–"),
               el("td", ms(entry.latency_ms), { class: "num" }));
    if (withIntervals) {
      const iv = entry.interval_ms;
      row.append(el("td", Array.isArray(iv) ? `${ms(iv[0])} – ${ms(iv[1])}` : "–", { class: "num" }));
    }
    row.append(el("td", fastest ? `${(entry.latency_ms / fastest).toFixed(2)}×` : "–", { class: "num" }));
    // the memory the model needs there, and whether it fits (a device it does not fit on was ranked like any other)
    const memory = typeof entry.memory_gb === "number" ? entry.memory_gb.toFixed(2) : "–";
    row.append(el("td", entry.fits === false ? `${memory}, does not fit` : memory, { class: "num memory" }));
    const cell = el("td");
    const button = el("button", "breakdown", { type: "button",
      "aria-label": `kernel breakdown on ${entry.gpu}${entry.mig ? " MIG " + entry.mig : ""}` });
    button.addEventListener("click", () => breakdown(entry.gpu, entry.mig));
    cell.append(button);
    row.append(cell);
    body.append(row);
  });
  const misfits = entries.filter((e) => e.fits === false).length;
  $("ranking-caption").textContent = `Predicted latency on ${entries.length} devices, fastest first` +
    (misfits ? `; the model does not fit in the memory of ${misfits} of them (marked)` : "");
  table.hidden = false;
}

function renderChart(prediction) {
  const kernels = prediction.kernels.slice().sort((a, b) => b.latency_ms - a.latency_ms);
  const top = kernels.slice(0, TOP_KERNELS);
  const rest = kernels.slice(TOP_KERNELS);
  const bars = top.map((k) => ({ label: `${k.type} · ${k.nodes[0]}`, value: k.latency_ms,
                                 title: `${k.nodes.join(", ")}: ${ms(k.latency_ms)} ms` }));
  const max = Math.max(...bars.map((b) => b.value), 1e-9);
  // On a narrow screen (a phone) each label goes above its bar and the chart is drawn at the width it gets, so its
  // 12 px labels stay 12 px: the wide layout (810 units) was shrunk to 350 px, its labels to about 5 px.
  $("breakdown").hidden = false;   // shown first: a hidden box has no width to measure
  const room = $("chart").clientWidth || 810;
  const narrow = room < 640;
  const width = narrow ? Math.max(280, Math.floor(room)) : 810;
  const rowH = narrow ? 40 : 22, labelW = narrow ? 0 : 300, barW = narrow ? width - 90 : 420;
  const labelMax = narrow ? Math.floor(width / 7) : 48;
  const height = bars.length * rowH + 10;
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`,
                             role: "img", class: "chart",
                             "aria-label": `${prediction.kernels.length} kernels, ${ms(prediction.latency_ms)} ms in all; ` +
                                           `the ${top.length} longest are drawn` });
  bars.forEach((bar, i) => {
    const y = 5 + i * rowH;
    const group = svg("g");
    group.append(svg("title", {}, bar.title));
    const label = bar.label.length > labelMax ? bar.label.slice(0, labelMax - 1) + "…" : bar.label;
    const barY = narrow ? y + 18 : y + 3, barH = narrow ? 16 : rowH - 6;
    group.append(narrow ? svg("text", { x: 0, y: y + 13, class: "label" }, label)
                        : svg("text", { x: labelW - 8, y: y + 15, "text-anchor": "end", class: "label" }, label));
    group.append(svg("rect", { x: labelW, y: barY, height: barH, width: Math.max(1, (bar.value / max) * barW),
                               class: "bar" }));
    group.append(svg("text", { x: labelW + (bar.value / max) * barW + 6, y: barY + 12, class: "value" },
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
  const asked = ++breakdownAsked;
  const stale = () => inputs !== rankedInputs || asked !== breakdownAsked;   // another ranking or breakdown since
  setStatus("rank-status", `Predicting the kernels on ${gpu}${mig ? " MIG " + mig : ""}…`);
  try {
    const { data } = await call("/v1/predict", modelForm(inputs, { gpu, mig }));
    if (stale()) return;
    renderChart(data);
    showWarnings([rankWarnings, data.warnings]);
    setStatus("rank-status", "Done.");
  } catch (error) {
    if (stale()) return;
    clearBreakdown();
    showWarnings([rankWarnings]);
    setStatus("rank-status", `Error: ${error.message}`, true);
  }
}

async function rank(event) {
  event.preventDefault();
  if (!$("file").files.length) {
    setStatus("rank-status", "Choose an ONNX file first.", true);
    return;
  }
  const devices = chosenDevices();
  if (devices !== null && devices.length === 0) {
    setStatus("rank-status", "Pick at least one device, or tick “every GPU and MIG slice”.", true);
    return;
  }
  $("rank-button").disabled = true;
  setStatus("rank-status", "Ranking…");
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
    setStatus("rank-status", `Error: ${error.message}`, true);
  } finally {
    $("rank-button").disabled = false;
  }
}

// ----------------------------------------------------------------- plan
const orDash = (x, format) => (typeof x === "number" ? format(x) : "–");

function clearPlan() {
  $("plan").hidden = true;
  $("plan").tBodies[0].replaceChildren();
  $("plan-message").hidden = true;
  for (const id of ["plan-unmet", "plan-warnings"]) $(id).replaceChildren();
}

function renderPlan(data) {
  const body = $("plan").tBodies[0];
  for (const entry of data.plan) {
    const iv = entry.interval_ms;
    const row = el("tr");
    row.append(deviceCell(entry.device, entry), el("td", entry.batch, { class: "num" }),
      el("td", ms(entry.latency_ms), { class: "num" }),
      el("td", Array.isArray(iv) ? `${ms(iv[0])} – ${ms(iv[1])}` : "–", { class: "num" }),
      el("td", orDash(entry.throughput_per_s, sig4), { class: "num" }),
      el("td", orDash(entry.usd_per_hour, (x) => x.toFixed(2)), { class: "num" }),
      el("td", orDash(entry.usd_per_million, sig4), { class: "num" }),
      el("td", orDash(entry.memory_gb, (x) => x.toFixed(2)), { class: "num" }));
    body.append(row);
  }
  const order = data.sort === "cost" ? "cheapest per million first" : "highest throughput first";
  $("plan-caption").textContent = `${data.plan.length} of ${data.devices} devices meet the SLO of ${data.slo_ms} ms, ` +
    `${order} (throughput in ${data.unit}s per second, cost in USD per million ${data.unit}s)`;
  $("plan").hidden = data.plan.length === 0;
  if (data.message) {
    $("plan-message").textContent = data.message;
    $("plan-message").hidden = false;
  }
  $("plan-unmet").replaceChildren(...(data.unmet || []).map((u) => el("li", `not met on ${u.device}: ${u.reason}`)));
  $("plan-warnings").replaceChildren(...(data.warnings || []).map((w) => el("li", w)));
}

async function plan(event) {
  event.preventDefault();
  clearPlan();
  if (!$("file").files.length) {
    setStatus("plan-status", "Choose an ONNX file first (under “Which GPU for this model?”).", true);
    return;
  }
  const devices = chosenDevices();
  if (devices !== null && devices.length === 0) {
    setStatus("plan-status", "Pick at least one device above, or tick “every GPU and MIG slice”.", true);
    return;
  }
  $("plan-button").disabled = true;
  setStatus("plan-status", "Planning…");
  try {
    const extra = { slo_ms: $("plan-slo").value, gpus: devices ? devices.join(",") : null,
                    batches: $("plan-batches").value.trim() || null, prices: $("plan-prices").value.trim() || null };
    const { data } = await call("/v1/plan", modelForm(modelInputs(), extra));
    clearPlan();
    renderPlan(data);
    setStatus("plan-status", "Done.");
  } catch (error) {
    clearPlan();
    setStatus("plan-status", `Error: ${error.message}`, true);
  } finally {
    $("plan-button").disabled = false;
  }
}

// ----------------------------------------------------------------- LLM
const LLM_FIELDS = [["ttft_ms", "time to first token (ms)"], ["itl_ms", "inter-token latency (ms)"],
                    ["e2e_ms", "end to end (ms)"], ["tokens_per_s", "tokens/s"], ["power_w", "power (W)"],
                    ["energy_per_token_j", "energy per token (J)"], ["max_batch_fitting", "largest batch that fits"]];

function clearLLM() {
  $("llm-result").hidden = true;
  $("llm-result").replaceChildren();
  $("llm-result-title").hidden = true;
  $("llm-result-title").textContent = "";
  $("llm-warnings").replaceChildren();
}

// A number box left empty is a field left out (the server's default), not 0 ("tp: Input should be greater than 0").
function numberField(id) {
  const text = $(id).value.trim();
  return text === "" ? null : Number(text);
}

const interval = (iv) => (Array.isArray(iv) ? ` (90 %: ${sig4(iv[0])} – ${sig4(iv[1])})` : "");

// What the figures describe, as the server resolved it: a chosen config.json stood for the typed name, and nothing
// on screen said so.
function llmTitle(data) {
  const device = data.mig ? `${data.gpu} MIG ${data.mig}` : data.gpu;
  const tp = data.tp > 1 ? `, TP ${data.tp}` : "";
  return `${data.model} on ${device}${tp}, batch ${data.batch}: weights ${data.dtype}, KV cache ${data.kv_dtype}, ` +
         `${data.engine}`;
}

async function llm(event) {
  event.preventDefault();
  const config = $("llm-config").files[0];
  if (!config && !$("llm-model").value.trim()) {  // the box is not `required`: a chosen config.json stands for it
    clearLLM();
    setStatus("llm-status", "Give a model name, or choose a config.json.", true);
    return;
  }
  const body = {
    model: $("llm-model").value.trim(), gpu: $("llm-gpu").value.trim(), mig: $("llm-mig").value.trim() || null,
    tp: numberField("llm-tp"), batch: numberField("llm-batch"),
    input_len: numberField("llm-input"), output_len: numberField("llm-output"),
    dtype: $("llm-dtype").value || null, kv_dtype: $("llm-kv-dtype").value || null, engine: $("llm-engine").value,
  };
  $("llm-button").disabled = true;   // one request at a time: a second click sent a second request
  setStatus("llm-status", "Predicting…");
  try {
    const fields = Object.fromEntries(Object.entries(body).filter(([, v]) => v !== null && v !== undefined));
    let answer;
    if (config) {  // an uploaded config.json stands for the model name (multipart part "file")
      const form = new FormData();
      form.append("file", config);
      for (const [key, value] of Object.entries(fields)) if (key !== "model") form.append(key, value);
      answer = await call("/v1/llm", form);
    } else {
      answer = await call("/v1/llm", JSON.stringify(fields), { "Content-Type": "application/json" });
    }
    const data = answer.data;
    clearLLM();
    $("llm-result-title").textContent = llmTitle(data);
    $("llm-result-title").hidden = false;
    const dl = $("llm-result");
    const fits = !data.memory || data.memory.fits !== false;
    if (!fits) {  // no latency is predicted: say so, not a list of figures with empty values
      dl.append(el("dt", "result"), el("dd", `does not fit on ${data.gpu}${data.mig ? " MIG " + data.mig : ""}: ` +
                                              "no latency is predicted (see the warnings)", { class: "no-fit" }));
    }
    for (const [key, name] of LLM_FIELDS) {
      if (!(key in data) || data[key] === null) continue;
      // a count (the largest batch that fits) as it is: 4 significant digits made 163489 sequences 163500
      const value = typeof data[key] === "number" && !Number.isInteger(data[key]) ? sig4(data[key]) : data[key];
      dl.append(el("dt", name), el("dd", `${value}${interval(data.intervals && data.intervals[key])}`));
    }
    const steady = data.steady_state;
    if (steady) {
      dl.append(el("dt", `ITL, server with ${data.batch} running (ms)`),
                el("dd", `${sig4(steady.itl_ms)}${interval(steady.interval_ms)}`),
                el("dt", `tokens/s, server with ${data.batch} running`),
                el("dd", `${sig4(steady.tokens_per_s)}`));
    }
    if (data.memory) {  // GiB, as the warnings say (device_gb 79.65 for an H100's 80 GB)
      dl.append(el("dt", "memory per GPU (GiB)"),
                el("dd", `${sig4(data.memory.total_gb)} of ${sig4(data.memory.device_gb)}` +
                         (fits ? ", fits" : ", does not fit"), fits ? {} : { class: "no-fit" }));
    }
    dl.hidden = false;
    const ul = $("llm-warnings");
    ul.replaceChildren(...(data.warnings || []).map((w) => el("li", w)));
    setStatus("llm-status", "Done.");
  } catch (error) {
    clearLLM();
    setStatus("llm-status", `Error: ${error.message}`, true);
  } finally {
    $("llm-button").disabled = false;
  }
}

// A chosen config.json stands for the Model box: the box is disabled while one is chosen, and "Clear" gives it back
// (the file input had no way to drop a file but reloading the page, and its figures answered a model typed after it).
function configChosen() {
  const chosen = $("llm-config").files.length > 0;
  $("llm-model").disabled = chosen;
  $("llm-config-clear").hidden = !chosen;
  $("llm-model-hint").hidden = !chosen;
}

function clearConfig() {
  $("llm-config").value = "";
  configChosen();
  $("llm-model").focus();
}

// The plan and LLM forms, where the server offers /v1/plan and /v1/llm (/v1/healthz says which).
async function setUpOptional() {
  const offered = (await (await fetch("/v1/healthz")).json()).endpoints || {};
  for (const [name, setUp] of [["plan", setUpPlan], ["llm", setUpLLM]]) {
    $(`${name}-form`).hidden = !offered[name];
    $(`${name}-unavailable`).hidden = Boolean(offered[name]);
    if (offered[name]) await setUp();
  }
}

function setUpPlan() {
  $("plan-form").addEventListener("submit", plan);
}

async function setUpLLM() {
  const models = await (await fetch("/v1/llm/models")).json();
  for (const name of models) $("llm-models").append(el("option", null, { value: name }));
  if (models.length && !$("llm-model").value) $("llm-model").value = models[0];
  $("llm-form").addEventListener("submit", llm);
  $("llm-config").addEventListener("change", configChosen);
  $("llm-config-clear").addEventListener("click", clearConfig);
  configChosen();
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
      setStatus("rank-status", `${e.dataTransfer.files[0].name} ready.`);
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  $("all-devices").addEventListener("change", (e) => { $("devices").disabled = e.target.checked; });
  $("rank-form").addEventListener("submit", rank);
  setUpDrop();
  loadDevices().catch((e) => setStatus("rank-status", `Cannot list GPUs: ${e.message}`, true));
  setUpOptional().catch((e) => setStatus("llm-status", `Cannot set up the LLM form: ${e.message}`, true));
});
