// The playground: the key, the form, the calls to the HTTP API. The key lives in this
// tab's sessionStorage and travels only in the Authorization header.
import { renderDocument, renderFusion, renderHits, renderPlan, renderTrace } from "./render.js";

const KEY = "pgbraid.key";
const PIPELINE = "pgbraid.pipeline";
const HIGHLIGHTS = new Set(["fulltext", "bm25", "hybrid", "auto"]);
const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, cache: "no-store", credentials: "omit",
                                   body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, "network", `the server could not be reached (${err.message})`);
  }
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || `http_${response.status}`,
                       error.message || response.statusText);
  }
  return data;
}

const segment = encodeURIComponent;
const idPath = (id) => id.split("/").map(segment).join("/");

// -- messages -------------------------------------------------------------------------

function say(text, kind = "error") {
  const box = $("message");
  box.textContent = text;
  box.className = kind;
  box.hidden = !text;
}

function explain(err) {
  if (err.status === 401) {
    sessionStorage.removeItem(KEY);
    $("key-status").textContent = "key refused";
    $("key").setAttribute("aria-invalid", "true");
    $("key").focus();
    return `The server refused the API key: ${err.message}. Enter a valid key above ` +
           "(pgbraid keys create).";
  }
  if (err.status === 403) return `This key may not do that: ${err.message}.`;
  return `${err.code}: ${err.message}`;
}

// -- key and pipelines ------------------------------------------------------------------

async function loadPipelines() {
  const select = $("pipeline");
  let pipelines;
  try {
    pipelines = await api("GET", "/pipelines");
  } catch (err) {
    select.replaceChildren();
    say(explain(err));
    return;
  }
  const kept = sessionStorage.getItem(PIPELINE);
  select.replaceChildren(...pipelines.map((p) => {
    const option = new Option(`${p.name} (${p.documents} docs)`, p.name);
    option.selected = p.name === kept;
    return option;
  }));
  say(pipelines.length ? "" : "This key can read no pipeline yet.", "info");
  if (sessionStorage.getItem(KEY)) $("key-status").textContent = "key in use (this tab only)";
  $("query").focus();
}

function useKey(event) {
  event.preventDefault();
  const key = $("key").value.trim();
  if (key) sessionStorage.setItem(KEY, key);  // empty: a --no-auth server needs none
  else sessionStorage.removeItem(KEY);
  $("key").value = "";
  $("key").removeAttribute("aria-invalid");
  $("key-status").textContent = "checking…";
  loadPipelines();
}

function forgetKey() {
  sessionStorage.removeItem(KEY);
  $("key-status").textContent = "no key";
  $("pipeline").replaceChildren();
  say("Key forgotten.", "info");
}

// -- search ---------------------------------------------------------------------------

function jsonField(id, label) {
  const text = $(id).value.trim();
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new ApiError(0, "invalid_request", `${label} is not valid JSON (${err.message})`);
  }
}

function searchBody() {
  const type = $("type").value;
  const params = jsonField("params", "More params") || {};
  if ($("k").value !== "") params.k = Number($("k").value);
  if ($("highlight").checked && HIGHLIGHTS.has(type) && !("highlight" in params)) {
    params.highlight = true;
  }
  const body = { query: $("query").value, type, params,
                 distance_strategy: $("distance").value };
  const classification = $("classification").value.trim();
  if (classification) body.classification = classification.split(",").map((c) => c.trim());
  const filters = jsonField("filters", "Filters");
  if (filters !== undefined) body.filters = filters;
  return body;
}

let current = null;  // the pipeline of the last search, for the document view

async function search(event) {
  event.preventDefault();
  const pipeline = $("pipeline").value;
  if (!pipeline) {
    say("Choose a pipeline first (enter a key that can read one).");
    return;
  }
  sessionStorage.setItem(PIPELINE, pipeline);
  $("go").disabled = true;
  $("summary").textContent = "searching…";
  const began = performance.now();
  try {
    const response = await api("POST", `/pipelines/${segment(pipeline)}/search`, searchBody());
    current = pipeline;
    say("");
    const took = Math.round(performance.now() - began);
    $("summary").textContent = `${response.hits.length} hits · ${response.type} · ` +
      `${Math.round(response.trace.ms)} ms in the engine, ${took} ms here`;
    renderHits($("results"), response, openDocument);
    renderTrace($("trace"), response);
    renderFusion($("fusion"), response);
    renderPlan($("plan"), response);
  } catch (err) {
    $("summary").textContent = "";
    say(explain(err));
  } finally {
    $("go").disabled = false;
  }
}

async function openDocument(id, version) {
  const pipeline = current;
  const base = `/pipelines/${segment(pipeline)}`;
  try {
    const query = version ? `?version=${version}` : "";
    const [doc, versions] = await Promise.all([
      api("GET", `${base}/documents/${idPath(id)}${query}`),
      api("GET", `${base}/versions/${idPath(id)}`)]);
    renderDocument($("document"), doc, versions, (v) => openDocument(id, v));
    showTab("document");
  } catch (err) {
    say(explain(err));
  }
}

// -- tabs and keys ----------------------------------------------------------------------

function showTab(name) {
  for (const tab of document.querySelectorAll("#tabs [role=tab]")) {
    const chosen = tab.dataset.tab === name;
    tab.setAttribute("aria-selected", String(chosen));
    tab.tabIndex = chosen ? 0 : -1;
    $(tab.dataset.tab).hidden = !chosen;
  }
}

function tabKeys(event) {
  const tabs = [...document.querySelectorAll("#tabs [role=tab]")];
  const at = tabs.indexOf(document.activeElement);
  if (at < 0 || !["ArrowLeft", "ArrowRight"].includes(event.key)) return;
  const next = tabs[(at + (event.key === "ArrowRight" ? 1 : tabs.length - 1)) % tabs.length];
  next.focus();
  showTab(next.dataset.tab);
}

function slash(event) {
  const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
  if (event.key === "/" && !typing) {
    event.preventDefault();
    $("query").focus();
    $("query").select();
  }
}

function start() {
  $("key-form").addEventListener("submit", useKey);
  $("forget").addEventListener("click", forgetKey);
  $("search-form").addEventListener("submit", search);
  $("type").addEventListener("change", () => {
    $("highlight").disabled = !HIGHLIGHTS.has($("type").value);
  });
  for (const tab of document.querySelectorAll("#tabs [role=tab]")) {
    tab.addEventListener("click", () => showTab(tab.dataset.tab));
  }
  $("tabs").addEventListener("keydown", tabKeys);
  document.addEventListener("keydown", slash);
  showTab("trace");
  if (sessionStorage.getItem(KEY)) {
    $("key-status").textContent = "key in use (this tab only)";
    loadPipelines();
  } else {
    $("key-status").textContent = "no key";
    say("Enter an API key to start (pgbraid keys create); on a server started with " +
        "--no-auth, press Use key with the field empty.", "info");
    $("key").focus();
  }
}

start();
