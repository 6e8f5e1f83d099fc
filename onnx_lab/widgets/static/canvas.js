// onnx_lab graph canvas: graphviz SVG with fit, zoom, pan, minimap, search and a details panel.
// A plain ES module loaded by anywidget from the installed package: no CDN, no build step.
// Python owns the data (svg, items, details_html); this file owns the view (view = {x, y, k}).

const MIN_K = 0.02, MAX_K = 8;

function el(tag, cls, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
}

// Markup from Python (the SVG, the details panel, the legend) is built with escaping
// helpers (onnx_lab/render/_html.py). As a second wall it is parsed in an inert document
// (no script runs, nothing loads there), cleaned of script-like elements, event handlers and
// links other than #anchors / data:image, and only then moved into the page. Model strings
// themselves are only ever set with textContent.
const DROP = new Set(["script", "iframe", "object", "embed", "foreignobject", "base", "link",
                      "meta", "frame", "frameset", "style", "template"]);
const URL_ATTRS = new Set(["href", "xlink:href", "src", "action", "formaction", "srcset"]);

function cleanTree(root) {
  for (const n of Array.from(root.querySelectorAll("*"))) {
    if (DROP.has(n.localName.toLowerCase())) { n.remove(); continue; }
    for (const a of Array.from(n.attributes)) {
      const name = a.name.toLowerCase(), v = a.value.trim().toLowerCase();
      if (name.startsWith("on")) n.removeAttribute(a.name);
      else if (URL_ATTRS.has(name) && !(v.startsWith("#") || v.startsWith("data:image/")))
        n.removeAttribute(a.name);
      else if (name === "style" && /url\s*\(/.test(v)) n.removeAttribute(a.name);
    }
  }
  return root;
}

function setMarkup(target, markup) {
  const doc = new DOMParser().parseFromString(String(markup || ""), "text/html");
  cleanTree(doc.body);
  target.replaceChildren(...Array.from(doc.body.childNodes));
}

// A module breadcrumb of the details panel (data-expand="/model/layers.0"): Python shows
// that module (focuses its box, or draws it open).
function moduleLink(model) {
  return (e) => {
    const c = e.target.closest && e.target.closest("[data-expand]");
    if (c) model.send({ type: "module", key: c.getAttribute("data-expand") });
  };
}

function render({ model, el: root }) {
  root.classList.add("olc-root");
  const bar = el("div", "olc-bar", root);
  const search = el("input", "olc-search", bar);
  search.type = "search";
  search.placeholder = "search id, name, op type, tensor  (/)";
  const hits = el("span", "olc-hits", bar);
  const btn = (label, title, cls) => {
    const b = el("button", "olc-btn " + cls, bar);
    b.textContent = label; b.title = title; return b;
  };
  const zoomIn = btn("+", "zoom in (+)", "olc-zoom-in");
  const zoomOut = btn("−", "zoom out (-)", "olc-zoom-out");
  const fitBtn = btn("fit", "fit to view (0)", "olc-fit");
  const title = el("span", "olc-title-text", bar);
  const legend = el("div", "olc-legend", root);
  const body = el("div", "olc-body", root);
  const port = el("div", "olc-port", body);
  port.tabIndex = 0;
  const stage = el("div", "olc-stage", port);
  const mini = el("div", "olc-mini", port);
  const miniRect = el("div", "olc-mini-rect");
  const panel = el("div", "olc-panel", body);
  const panelClose = el("button", "olc-panel-close", panel);
  panelClose.textContent = "×"; panelClose.title = "close";
  const panelBody = el("div", "olc-panel-body", panel);
  const showModule = moduleLink(model);

  let svg = null, W = 1, H = 1;            // natural size of the drawing (px)
  let v = { x: 0, y: 0, k: 1 };            // screen = natural * k + (x, y)
  let byKey = new Map();                   // drawn key -> <g>
  let userMoved = false, syncTimer = null, hitList = [], hitPos = -1;

  function setHeight() { port.style.height = (model.get("height") || 560) + "px"; }

  function apply(sync = true) {
    if (!svg) return;
    svg.style.transform = `translate(${v.x}px, ${v.y}px) scale(${v.k})`;
    root.dataset.k = v.k.toFixed(4);
    root.dataset.x = v.x.toFixed(1);
    root.dataset.y = v.y.toFixed(1);
    drawMini();
    if (sync) {
      clearTimeout(syncTimer);
      syncTimer = setTimeout(() => {
        model.set("view", { x: v.x, y: v.y, k: v.k, width: port.clientWidth,
                            height: port.clientHeight });
        model.save_changes();
      }, 200);
    }
  }

  // Fit the whole drawing; on open, a long strip (BERT: 24 layers in a column) whose whole
  // fit would be unreadable shows its top at a readable scale instead (the minimap shows all).
  const READABLE = 0.3;
  function fit(whole = true) {
    const pw = port.clientWidth, ph = port.clientHeight;
    if (!svg || !pw || !ph) return false;
    let k = Math.min(pw / W, ph / H, 1.5) * 0.96;
    let top = false;
    if (!whole && k < READABLE) { k = Math.min(pw / W * 0.96, 0.6); top = k > READABLE * 0.9; }
    if (!top) k = Math.min(pw / W, ph / H, 1.5) * 0.96;
    v = { k, x: (pw - W * k) / 2, y: top ? 8 : Math.max(4, (ph - H * k) / 2) };
    root.dataset.fit = top ? "top" : "whole";
    apply();
    return true;
  }

  function zoomAt(factor, cx, cy) {
    const k = Math.min(MAX_K, Math.max(MIN_K, v.k * factor));
    const f = k / v.k;
    v = { k, x: cx - (cx - v.x) * f, y: cy - (cy - v.y) * f };
    userMoved = true;
    apply();
  }

  function centre(key, zoomTo) {
    const g = byKey.get(key);
    if (!g || !svg) return false;
    const r = g.getBoundingClientRect(), s = svg.getBoundingClientRect();
    const nx = (r.left - s.left + r.width / 2) / v.k, ny = (r.top - s.top + r.height / 2) / v.k;
    const nw = r.width / v.k;
    let k = v.k;
    if (zoomTo) k = Math.min(MAX_K, Math.max(k, Math.min(1.2, port.clientWidth / (nw * 6))));
    v = { k, x: port.clientWidth / 2 - nx * k, y: port.clientHeight / 2 - ny * k };
    userMoved = true;
    apply();
    return true;
  }

  function mark(cls, keys) {
    if (!svg) return;
    svg.querySelectorAll("." + cls).forEach((g) => g.classList.remove(cls));
    for (const k of keys) { const g = byKey.get(k); if (g) g.classList.add(cls); }
  }

  function drawMini() {
    if (!svg) { mini.style.display = "none"; return; }
    const pw = port.clientWidth, ph = port.clientHeight;
    const big = W * v.k > pw * 1.05 || H * v.k > ph * 1.05;
    mini.style.display = big ? "block" : "none";
    if (!big) return;
    const mw = 160, mk = Math.min(mw / W, 120 / H);
    mini.style.width = W * mk + "px"; mini.style.height = H * mk + "px";
    const clone = mini.querySelector("svg");
    if (clone) clone.style.transform = `scale(${mk})`;
    miniRect.style.left = (-v.x / v.k) * mk + "px";
    miniRect.style.top = (-v.y / v.k) * mk + "px";
    miniRect.style.width = (pw / v.k) * mk + "px";
    miniRect.style.height = (ph / v.k) * mk + "px";
    mini._mk = mk;
  }

  function loadSvg() {
    const text = model.get("svg") || "";
    stage.replaceChildren();
    mini.replaceChildren();
    byKey = new Map();
    svg = null;
    if (!text) { stage.textContent = model.get("fallback") || ""; return; }
    const i = text.indexOf("<svg");
    setMarkup(stage, i >= 0 ? text.slice(i) : text);
    svg = stage.querySelector("svg");
    if (!svg) return;
    const vb = svg.viewBox && svg.viewBox.baseVal;
    W = vb && vb.width ? vb.width : parseFloat(svg.getAttribute("width")) || 100;
    H = vb && vb.height ? vb.height : parseFloat(svg.getAttribute("height")) || 100;
    svg.setAttribute("width", W + "px");
    svg.setAttribute("height", H + "px");
    svg.style.transformOrigin = "0 0";
    svg.querySelectorAll("g.node").forEach((g) => {
      const id = g.getAttribute("id") || "";
      if (id.startsWith("n:")) byKey.set(id.slice(2), g);
    });
    // The minimap: a scaled copy without ids (ids must stay unique in the page).
    const clone = svg.cloneNode(true);
    clone.removeAttribute("id");
    clone.querySelectorAll("[id]").forEach((n) => n.removeAttribute("id"));
    clone.style.transformOrigin = "0 0";
    clone.style.transform = "";
    mini.appendChild(clone);
    mini.appendChild(miniRect);
    root.dataset.nodes = String(byKey.size);
    userMoved = false;
    const view = model.get("view") || {};
    // a kept view is the user's: a later resize must not re-fit it (userMoved)
    if (view.k && model.get("keep_view")) { v = { x: view.x, y: view.y, k: view.k }; userMoved = true; apply(false); }
    else if (!fit(false)) requestAnimationFrame(() => fit(false));
    mark("olc-selected", [model.get("selected")]);
    mark("olc-hit", model.get("highlight") || []);
    root.dataset.rendered = String((+root.dataset.rendered || 0) + 1);
  }

  function showDetails() {
    const html = model.get("details_html") || "";
    setMarkup(panelBody, html);
    panel.style.display = html ? "block" : "none";
    root.dataset.details = String((+root.dataset.details || 0) + 1);
  }

  function runSearch(step) {
    const q = search.value.trim().toLowerCase();
    if (!q) { hitList = []; hits.textContent = ""; mark("olc-hit", []); return; }
    if (step === 0 || !hitList.length) {
      const items = model.get("items") || {};
      const exact = [], part = [];
      for (const [key, text] of Object.entries(items)) {
        if (key.toLowerCase() === q) exact.push(key);
        else if (text.includes(q)) part.push(key);
      }
      hitList = exact.concat(part);
      hitPos = -1;
    }
    hits.textContent = hitList.length ? `${hitList.length} hit${hitList.length > 1 ? "s" : ""}`
                                      : "no match";
    mark("olc-hit", hitList);
    if (!hitList.length) return;
    hitPos = (hitPos + 1) % hitList.length;
    const key = hitList[hitPos];
    centre(key, true);
    select(key);
    hits.textContent = `${hitPos + 1}/${hitList.length}`;
  }

  function select(key) {
    mark("olc-selected", [key]);
    root.dataset.selected = key;
    model.set("selected", key);
    model.save_changes();
  }

  // ---- events
  let drag = null;
  port.addEventListener("pointerdown", (e) => {
    if (e.button !== 0 || e.target.closest(".olc-mini")) return;
    drag = { x: e.clientX, y: e.clientY, vx: v.x, vy: v.y, moved: false };
    port.setPointerCapture(e.pointerId);
  });
  port.addEventListener("pointermove", (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    drag.moved = true;
    port.classList.add("olc-dragging");
    v = { ...v, x: drag.vx + dx, y: drag.vy + dy };
    userMoved = true;
    apply();
  });
  port.addEventListener("pointerup", (e) => {
    const d = drag; drag = null;
    port.classList.remove("olc-dragging");
    if (!d || d.moved) return;
    // A click (no drag): the element under the pointer.
    const hit = document.elementFromPoint(e.clientX, e.clientY);
    const g = hit && hit.closest && hit.closest("g.node");
    if (!g || !stage.contains(g)) return;
    const key = (g.getAttribute("id") || "").slice(2);
    if (g.classList.contains("onnx-box")) {
      select(key);
      model.send({ type: "expand", key });
    } else select(key);
  });
  port.addEventListener("dblclick", (e) => {
    const g = e.target.closest && e.target.closest("g.node");
    if (g) model.send({ type: "open", key: (g.getAttribute("id") || "").slice(2) });
  });
  port.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = port.getBoundingClientRect();
    zoomAt(Math.exp(-e.deltaY * 0.0015), e.clientX - r.left, e.clientY - r.top);
  }, { passive: false });
  port.addEventListener("keydown", (e) => {
    if (e.key === "/") { e.preventDefault(); search.focus(); }
    else if (e.key === "+" || e.key === "=") zoomAt(1.25, port.clientWidth / 2, port.clientHeight / 2);
    else if (e.key === "-") zoomAt(0.8, port.clientWidth / 2, port.clientHeight / 2);
    else if (e.key === "0") fit();
  });
  mini.addEventListener("pointerdown", (e) => {
    e.stopPropagation();
    const r = mini.getBoundingClientRect(), mk = mini._mk || 1;
    const nx = (e.clientX - r.left) / mk, ny = (e.clientY - r.top) / mk;
    v = { ...v, x: port.clientWidth / 2 - nx * v.k, y: port.clientHeight / 2 - ny * v.k };
    userMoved = true;
    apply();
  });
  zoomIn.addEventListener("click", () => zoomAt(1.25, port.clientWidth / 2, port.clientHeight / 2));
  zoomOut.addEventListener("click", () => zoomAt(0.8, port.clientWidth / 2, port.clientHeight / 2));
  fitBtn.addEventListener("click", () => { userMoved = false; fit(); });
  search.addEventListener("input", () => { hitList = []; });
  search.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); runSearch(hitList.length ? 1 : 0); }
    else if (e.key === "Escape") { search.value = ""; runSearch(0); port.focus(); }
    e.stopPropagation();  // keep JupyterLab's notebook shortcuts away from the search box
  });
  panelClose.addEventListener("click", () => { panel.style.display = "none"; });
  panelBody.addEventListener("click", (e) => {
    const b = e.target.closest && e.target.closest("[data-body]");
    if (b) model.send({ type: "open_body", graph: b.getAttribute("data-body") });
    const n = e.target.closest && e.target.closest("[data-focus]");
    if (n) model.send({ type: "focus", key: n.getAttribute("data-focus") });
    showModule(e);
  });

  const ro = new ResizeObserver(() => { if (!userMoved) fit(false); else drawMini(); });
  ro.observe(port);

  // ---- model changes
  const onFocus = () => {
    const f = model.get("_focus") || {};
    if (!f.key) return;
    const go = () => { centre(f.key, true); mark("olc-selected", [f.key]);
                       root.dataset.selected = f.key;
                       root.dataset.focused = String(f.seq || 0); };
    if (port.clientWidth) go(); else requestAnimationFrame(go);
  };
  const onView = () => {
    const n = model.get("view") || {};
    if (n.k && (Math.abs(n.k - v.k) > 1e-6 || Math.abs(n.x - v.x) > 0.5 || Math.abs(n.y - v.y) > 0.5)) {
      v = { x: n.x, y: n.y, k: n.k }; userMoved = true; apply(false);
    }
  };
  const onLegend = () => {
    const html = model.get("legend_html") || "";
    setMarkup(legend, html);
    legend.style.display = html ? "block" : "none";
  };
  const onTitle = () => { title.textContent = model.get("title") || ""; };
  model.on("change:svg", loadSvg);
  model.on("change:_focus", onFocus);
  model.on("change:_fit", () => { userMoved = false; fit(); });
  model.on("change:view", onView);
  model.on("change:details_html", showDetails);
  model.on("change:legend_html", onLegend);
  model.on("change:title", onTitle);
  model.on("change:height", () => { setHeight(); fit(); });
  model.on("change:selected", () => { const k = model.get("selected"); mark("olc-selected", [k]);
                                       root.dataset.selected = k; });
  model.on("change:highlight", () => mark("olc-hit", model.get("highlight") || []));
  setHeight();
  onTitle();
  onLegend();
  loadSvg();
  showDetails();
  if ((model.get("_focus") || {}).key) requestAnimationFrame(onFocus);
  return () => { ro.disconnect(); clearTimeout(syncTimer); };
}

export default { render };
