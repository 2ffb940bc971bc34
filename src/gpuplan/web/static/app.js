// gpuplan page: form -> POST /api/plan?charts=1 -> table, reasons, charts. No dependencies.
"use strict";
const form = document.getElementById("plan-form");
const $ = (id) => document.getElementById(id);
const FIELDS = ["model", "layers", "hidden", "heads", "kv_heads", "vocab", "ffn", "mlp", "tokens",
  "seq_len", "deadline_days", "budget_usd", "objective", "max_gpus", "gpu", "vendor",
  "acquisition", "export_region", "pricing"];
const NUMBERS = new Set(["layers", "hidden", "heads", "kv_heads", "vocab", "ffn", "seq_len",
  "deadline_days", "max_gpus"]);
const LISTS = new Set(["gpu", "pricing"]);
const SHAPE = new Set(["layers", "hidden", "heads", "kv_heads", "vocab", "ffn", "mlp"]);
let configText = null;

function source() { return form.elements.source.value; }

function showSource() {
  for (const div of form.querySelectorAll("[data-source]")) div.hidden = div.dataset.source !== source();
}

function values() {
  // the form as {field: value} with the API's names; empty fields left out
  const out = {};
  for (const name of FIELDS) {
    const el = form.elements[name];
    if (!el) continue;
    if (name === "model" && source() !== "preset") continue;
    if (SHAPE.has(name) && source() !== "shape") continue;
    let v;
    if (el.multiple) v = Array.from(el.selectedOptions, (o) => o.value);
    else if (LISTS.has(name)) v = el.value.split(/[\s,]+/).filter(Boolean);
    else v = el.value.trim();
    if (v === "" || (Array.isArray(v) && !v.length)) continue;
    out[name] = NUMBERS.has(name) && !isNaN(Number(v)) ? Number(v) : v;
  }
  return out;
}

function toQuery(v) {
  const q = new URLSearchParams();
  for (const [k, val] of Object.entries(v)) (Array.isArray(val) ? val : [val]).forEach((x) => q.append(k, x));
  return q.toString();
}

function fromQuery(q) {
  const p = new URLSearchParams(q);
  if (![...p.keys()].length) return false;
  if (p.has("layers")) form.elements.source.value = "shape";
  for (const name of FIELDS) {
    const el = form.elements[name];
    if (!el || !p.has(name)) continue;
    const all = p.getAll(name);
    if (el.multiple) for (const o of el.options) o.selected = all.includes(o.value);
    else if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === all[0])) el.add(new Option(all[0], all[0], true, true));
    else el.value = LISTS.has(name) ? all.join(", ") : all[0];
  }
  showSource();
  return true;
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function render(r) {
  $("summary").textContent = `${r.model} on ${r.tokens.toExponential(2)} tokens: ` +
    `${r.evaluated.toLocaleString()} candidates evaluated, ${r.feasible.toLocaleString()} feasible.`;
  const body = $("plans").tBodies[0];
  body.replaceChildren();
  r.table.forEach((cells, i) => {
    const tr = body.insertRow();
    tr.className = "plan";
    tr.tabIndex = 0;
    [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12].forEach((j) => cell(tr, cells[j], [0, 2, 8, 9, 10, 11].includes(j) ? "r" : ""));
    const detail = body.insertRow();
    detail.className = "detail";
    detail.hidden = true;
    const td = detail.insertCell();
    td.colSpan = 12;
    const mem = document.createElement("table");
    mem.className = "memory";
    for (const [part, gib] of r.memory_tables[i] || []) { const m = mem.insertRow(); cell(m, part); cell(m, `${gib} GiB`, "r"); }
    const code = document.createElement("code");
    code.textContent = r.commands[i] || "";
    const p = document.createElement("p");
    p.append("reproduce: ", code);
    td.append(mem, p);
    const toggle = () => { detail.hidden = !detail.hidden; tr.classList.toggle("open", !detail.hidden); };
    tr.addEventListener("click", toggle);
    tr.addEventListener("keydown", (e) => { if (e.key === "Enter") toggle(); });
  });
  const why = $("why");
  why.replaceChildren(...(r.plans.length ? r.why : ["No feasible plan.", ...r.relax]).map((t) => {
    const li = document.createElement("li"); li.textContent = t; return li;
  }));
  for (const name of ["pareto", "memory", "outlook", "buy_rent"]) $(`chart-${name}`).innerHTML = (r.charts || {})[name] || "";
  const ex = $("excluded").tBodies[0];
  ex.replaceChildren();
  Object.entries(r.excluded).sort((a, b) => b[1] - a[1]).forEach(([k, n]) => { const tr = ex.insertRow(); cell(tr, k); cell(tr, n.toLocaleString(), "r"); });
  $("command").textContent = r.command;
  $("output").hidden = false;
}

async function request(path, body) {
  const res = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const data = await res.json().catch(() => ({ error: `the server answered ${res.status}` }));
  if (!res.ok) throw new Error(data.error || `the server answered ${res.status}`);
  return data;
}

let last = null;
async function submit(ev) {
  if (ev) ev.preventDefault();
  const body = values();
  if (source() === "config") {
    if (!configText) { showError("choose a config.json file first"); return; }
    try { body.config = JSON.parse(configText); } catch (e) { showError(`config.json is not JSON: ${e.message}`); return; }
  }
  const q = toQuery(body);
  if (source() !== "config") {
    history.replaceState(null, "", `?${q}`);
    $("permalink").href = `?${q}`;
    $("permalink").hidden = false;
  }
  $("error").hidden = true;
  $("busy").hidden = false;
  $("submit").disabled = true;
  try {
    last = body;
    render(await request("/api/plan?charts=1", body));
  } catch (e) {
    showError(e.message);
  } finally {
    $("busy").hidden = true;
    $("submit").disabled = false;
  }
}

function showError(msg) {
  $("error").textContent = msg;
  $("error").hidden = false;
  $("output").hidden = true;
}

async function report(ev) {
  ev.preventDefault();
  const res = await fetch("/api/report/plan", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(last) });
  const url = URL.createObjectURL(new Blob([await res.text()], { type: "text/html" }));
  const a = document.createElement("a");
  a.href = url; a.download = "gpuplan-plan.html"; a.click();
}

async function loadModels() {
  try {
    const res = await fetch("/api/catalog/models");
    const models = await res.json();
    const sel = $("model");
    const keep = sel.value;
    sel.replaceChildren(...models.map((m) => new Option(m.id, m.id)));
    sel.value = keep;
  } catch (e) { /* the preset typed in stays usable */ }
}

for (const r of form.elements.source) r.addEventListener("change", showSource);
$("config").addEventListener("change", async (e) => { const f = e.target.files[0]; configText = f ? await f.text() : null; });
form.addEventListener("submit", submit);
$("report").addEventListener("click", report);
loadModels().then(() => { if (fromQuery(location.search)) submit(); });
