// Rendering of search responses and documents. Every value from a response becomes
// text (text nodes, textContent); nothing is ever parsed as HTML.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const ENTITIES = { amp: "&", lt: "<", gt: ">", quot: '"', "#39": "'", "#x27": "'" };

function unescapeHtml(text) {
  return text.replace(/&(amp|lt|gt|quot|#39|#x27);/g, (_, name) => ENTITIES[name]);
}

// A highlight passage is HTML-escaped text with <mark>...</mark> around matched words:
// split on the two tags, unescape the rest into text nodes.
export function passage(text) {
  const out = el("p", { class: "passage" });
  text = text.trim().replace(/\n\s*\n+/g, "\n");  // blank lines waste the four shown
  let marked = false;
  for (const part of text.split(/(<mark>|<\/mark>)/)) {
    if (part === "<mark>" || part === "</mark>") {
      marked = part === "<mark>";
    } else if (part) {
      const plain = unescapeHtml(part);
      out.append(marked ? el("mark", {}, plain) : document.createTextNode(plain));
    }
  }
  return out;
}

const number = (value, digits = 4) =>
  typeof value === "number" ? Number(value.toPrecision(digits)).toString() : String(value);
const ms = (value) => `${number(value ?? 0, 3)} ms`;
const json = (value) => JSON.stringify(value, null, 2);

function excerpt(text, limit = 320) {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > limit ? `${flat.slice(0, limit)}…` : flat;
}

// -- hits --------------------------------------------------------------------------

function hitCard(hit, onOpen) {
  const title = el("button", { type: "button", class: "link title" },
                   hit.title || hit.document_id);
  title.addEventListener("click", () => onOpen(hit.document_id, hit.version));
  const found = hit.found_by.map((f) =>
    el("span", { class: `chip leg-${f.strategy}`, title: `score ${number(f.score)}` },
       `${f.strategy} #${f.rank}`));
  const passages = hit.highlights && hit.highlights.length
    ? hit.highlights.map(passage)
    : [el("p", { class: "passage plain" }, excerpt(hit.page_content))];
  return el("article", { class: "hit", "data-document": hit.document_id },
    el("div", { class: "hit-head" },
       el("span", { class: "rank" }, hit.rank), title,
       el("span", { class: "score", title: "score" }, number(hit.score))),
    el("div", { class: "hit-meta" },
       el("code", {}, hit.document_id), ` · v${hit.version}`,
       hit.language ? ` · ${hit.language}` : "",
       hit.classifications.length ? ` · ${hit.classifications.join(", ")}` : "",
       hit.matched_terms ? ` · matched: ${hit.matched_terms.join(" ")}` : "",
       found.length ? el("span", { class: "found" }, found) : ""),
    passages);
}

export function renderHits(target, response, onOpen) {
  target.replaceChildren();
  if (!response.hits.length) {
    target.append(zeroHits(response));
    return;
  }
  for (const hit of response.hits) target.append(hitCard(hit, onOpen));
  if (response.next_cursor) {
    target.append(el("p", { class: "muted" }, "More hits follow (next_cursor)."));
  }
}

// Why nothing matched: each retriever's own account (fulltext names the tokens).
function zeroHits(response) {
  const box = el("div", { class: "zero", id: "zero-hits" },
                 el("h2", {}, "No hits"),
                 el("p", {}, `Nothing matched “${response.query}” (${response.type}).`));
  for (const entry of response.trace.retrievers) {
    const d = entry.details || {};
    const why = entry.status !== "ran"
      ? `${entry.status}: ${entry.reason || "no reason given"}`
      : d.explanation || entry.reason || "found nothing";
    const item = el("div", { class: "why" }, el("h3", {}, entry.retriever), el("p", {}, why));
    if (d.restricting_tokens && d.restricting_tokens.length) {
      item.append(el("p", {}, "Over-restricting: ",
        d.restricting_tokens.map((t) => el("span", { class: "chip bad" }, t))));
    }
    if (d.token_document_frequency) {
      const rows = Object.entries(d.token_document_frequency).map(([token, n]) =>
        el("tr", { class: n === 0 ? "absent" : "" }, el("td", {}, el("code", {}, token)),
           el("td", { class: "num" }, n)));
      item.append(el("table", { class: "tokens" },
        el("thead", {}, el("tr", {}, el("th", {}, "token"), el("th", {}, "fragments with it"))),
        el("tbody", {}, rows)));
    }
    if (d.best_partial) {
      item.append(el("p", { class: "muted" },
        `At most ${d.best_partial.tokens_matched} of ${d.best_partial.of} tokens occur together.`));
    }
    if (d.tsquery) item.append(el("p", { class: "muted" }, "tsquery: ", el("code", {}, d.tsquery)));
    box.append(item);
  }
  return box;
}

// -- trace: one bar per retriever, its length its time ----------------------------------

export function renderTrace(target, response) {
  const entries = response.trace.retrievers;
  const longest = Math.max(response.trace.ms || 0, ...entries.map((e) => e.ms || 0), 0.001);
  target.replaceChildren(el("p", { class: "muted" },
    `${response.type}: ${entries.length} retriever(s), the whole search ${ms(response.trace.ms)}`));
  for (const entry of entries) {
    const bar = el("div", { class: `bar ${entry.status}` });
    bar.style.width = `${Math.max(1, (100 * (entry.ms || 0)) / longest)}%`;
    const details = { ...(entry.details || {}) };
    const row = el("div", { class: `leg ${entry.status}`, "data-retriever": entry.retriever },
      el("div", { class: "leg-head" },
         el("span", { class: "name" }, entry.retriever),
         el("span", { class: `chip ${entry.status}` }, entry.status),
         el("span", { class: "nums" }, `${entry.hits} hits · ${ms(entry.ms)}`)),
      el("div", { class: "track" }, bar),
      entry.reason ? el("p", { class: "reason" }, entry.reason) : "");
    if (Object.keys(details).length) {
      row.append(el("details", {}, el("summary", {}, "details"), el("pre", {}, json(details))));
    }
    target.append(row);
  }
}

// -- fusion: which strategy found each hit at which rank --------------------------------

export function renderFusion(target, response) {
  const fusion = response.trace.fusion;
  if (!fusion) {
    target.replaceChildren(el("p", { class: "muted" },
      `${response.type} runs one strategy: fusion applies to hybrid and auto.`));
    return;
  }
  const legs = response.trace.retrievers.filter((e) => e.status === "ran").map((e) => e.retriever);
  const head = el("tr", {}, el("th", {}, "#"), el("th", {}, "hit"), el("th", {}, "fused"),
                  legs.map((leg) => el("th", { class: "num" }, leg)));
  const rows = response.hits.map((hit) => {
    const ranks = Object.fromEntries(hit.found_by.map((f) => [f.strategy, f]));
    return el("tr", {}, el("td", { class: "num" }, hit.rank),
      el("td", { class: "doc" }, hit.title || hit.document_id),
      el("td", { class: "num" }, number(hit.score)),
      legs.map((leg) => ranks[leg]
        ? el("td", { class: "num", title: `score ${number(ranks[leg].score)}` }, `#${ranks[leg].rank}`)
        : el("td", { class: "num muted" }, "—")));
  });
  const weights = Object.entries(fusion.weights || {}).map(([s, w]) => `${s} ${number(w, 3)}`);
  target.replaceChildren(
    el("p", { class: "muted" }, `${fusion.method}${fusion.rrf_k ? ` (k = ${fusion.rrf_k})` : ""}`,
       ` over ${fusion.candidates} candidates; weights: ${weights.join(", ") || "none"}`),
    el("table", { class: "fusion" }, el("thead", {}, head), el("tbody", {}, rows)),
    el("p", { class: "muted" }, "Each cell: the hit's rank in that strategy's own list (— : not found)."));
}

// -- plan: what the planner chose and why -----------------------------------------------

export function renderPlan(target, response) {
  const plan = response.trace.fusion && response.trace.fusion.plan;
  if (!plan) {
    target.replaceChildren(el("p", { class: "muted" },
      `${response.type} runs one strategy as asked: no plan.`));
    return;
  }
  const legs = plan.legs.map((leg) => el("tr", {}, el("td", {}, leg.strategy),
    el("td", { class: "num" }, number(leg.weight, 3)), el("td", {}, leg.query || "")));
  target.replaceChildren(
    el("h3", {}, "Reasons"), el("ul", { class: "reasons" }, plan.reasons.map((r) => el("li", {}, r))),
    el("h3", {}, "Legs"),
    el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "strategy"), el("th", {}, "weight"),
                                        el("th", {}, "query"))), el("tbody", {}, legs)),
    plan.identifiers && plan.identifiers.length
      ? el("p", {}, "Identifiers found: ", plan.identifiers.map((i) => el("code", {}, i)))
      : el("p", { class: "muted" }, "No identifiers in the query."));
}

// -- a document and its versions ----------------------------------------------------------

export function renderDocument(target, doc, versions, onVersion) {
  const list = versions.map((v) => {
    const button = el("button", { type: "button", class: "version",
                                  "aria-pressed": v.version === doc.version ? "true" : "false" },
      `v${v.version}`, el("span", { class: "muted" },
        ` ${v.valid_from}${v.valid_to ? ` → ${v.valid_to}` : ""}${v.current ? " · current" : ""}`));
    button.addEventListener("click", () => onVersion(v.version));
    return el("li", {}, button);
  });
  target.replaceChildren(
    el("h2", {}, doc.title || doc.document_id),
    el("p", { class: "hit-meta" }, el("code", {}, doc.document_id),
       ` · v${doc.version}${doc.current ? " (current)" : ""} · ${doc.fragments} fragments`,
       doc.language ? ` · ${doc.language}` : "", ` · ${doc.classifications.join(", ")}`,
       doc.quarantined ? " · quarantined" : ""),
    el("h3", {}, `Versions (${versions.length})`), el("ul", { class: "versions" }, list),
    Object.keys(doc.metadata || {}).length
      ? el("details", {}, el("summary", {}, "metadata"), el("pre", {}, json(doc.metadata))) : "",
    el("pre", { class: "doc-text" }, doc.text));
}
