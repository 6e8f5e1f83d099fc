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

// cleanTree / setMarkup (markup from Python, parsed inert and cleaned) come from markup.js,
// which canvas.py and the report put before this file.

// A module breadcrumb of the details panel (data-expand="/model/layers.0"): Python shows
// that module (focuses its box, or draws it open).
function moduleLink(model) {
  return (e) => {
    const c = e.target.closest && e.target.closest("[data-expand]");
    if (c) model.send({ type: "module", key: c.getAttribute("data-expand") });
  };
}

// Labels are readable from this on-screen height on (px): the first view, a found node and an
// opened box are shown at least this large; below LOD_PX the labels are hidden while zoomed out.
const READ_PX = 11.5, LOD_PX = 4;
// A drawing of more elements (nodes, edges, clusters) than BIG is drawn from its scene
// (scene.js) while the view moves: a <canvas> layer over the SVG, painted cell by cell (what
// is off screen is skipped, labels too small to read are not drawn). SETTLE_MS after the last
// move the SVG itself comes back, holding only the elements in view (the others out of the
// document: no style, layout or paint for them), when at most
// SVG_MAX elements are in view; with more (zoomed far out) the canvas layer stays.
const BIG = 1500, SVG_MAX = 1500, SETTLE_MS = 140;
// The canvas layer's painters by the number of elements in view: the 2-D context's
// antialiased shapes and labels up to FINE_MAX; beyond, while moving, each element written
// as pixels (scene.dots: boxes and 1 px lines, a few ms for tens of thousands), and once
// settled boxes and straight antialiased lines (COARSE).
const FINE_MAX = 800;
// Farther out still, while moving: one bitmap of the whole drawing (at most OVERVIEW_PX
// pixels, drawn once after the first paint) moved and scaled by the compositor alone,
// up to twice its own scale.
const OVERVIEW_PX = 4e6;

function render({ model, el: root }) {
  root.classList.add("olc-root");
  const bar = el("div", "olc-bar", root);
  const search = el("input", "olc-search", bar);
  search.type = "search";
  search.placeholder = "search id, name, op, tensor, module, file:line  (/)";
  const hits = el("span", "olc-hits", bar);
  // What the view waits on (a box being laid out for a search hit), from Python or the page.
  const busy = el("span", "olc-busy", bar);
  const btn = (label, title, cls) => {
    const b = el("button", "olc-btn " + cls, bar);
    b.textContent = label; b.title = title; return b;
  };
  const zoomIn = btn("+", "zoom in (+)", "olc-zoom-in");
  const zoomOut = btn("−", "zoom out (-)", "olc-zoom-out");
  const fitBtn = btn("fit", "the whole graph (f or 0)", "olc-fit");
  const readBtn = btn("1:1", "readable size from the inputs (1)", "olc-readable");
  const title = el("span", "olc-title-text", bar);
  const results = el("div", "olc-results", root);
  const legend = el("div", "olc-legend", root);
  const body = el("div", "olc-body", root);
  const port = el("div", "olc-port", body);
  port.tabIndex = 0;
  const stage = el("div", "olc-stage", port);
  const layer = el("canvas", "olc-layer", port);
  const layerCtx = layer.getContext("2d", { alpha: false });
  const overview = el("canvas", "olc-layer olc-overview", port);
  let kov = 0, ovReady = false, ovTimer = 0;
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
  // The key of an element whose SVG id is not its key (a control character drawn as its
  // picture, a long name cut: render._html.dot_safe); every key the page sends or looks up
  // is the element's own.
  const realOf = (id) => {
    const d = model.get("drawn") || {};
    return Object.prototype.hasOwnProperty.call(d, id) ? d[id] : id;
  };
  let labelPx = 11.5;                      // median label height at k = 1 (measured on load)
  let userMoved = false, syncBy = "page", syncTimer = null, hitList = [], hitPos = -1, frameReq = 0;
  let lastSync = true;
  let scene = null, big = false, settleTimer = 0, layerUp = false;
  let shown = new Set();                   // elements of a big drawing the SVG draws now
  const marked = { "olc-selected": [], "olc-hit": [] };

  function setHeight() { port.style.height = (model.get("height") || 560) + "px"; }

  // The zoom that shows labels READ_PX tall.
  function kRead() { return Math.min(4, Math.max(MIN_K, READ_PX / labelPx)); }

  // A pan/zoom is one CSS transform of the drawing (no re-layout); the rest of a frame's
  // work (minimap, level of detail, the sync to Python) is coalesced into one animation frame.
  // `by`: "user" for the user's own moves (wheel, drag, minimap, zoom buttons and keys),
  // "page" for the canvas's (fit, centring a found node, a resize); sent with the view so
  // a linked view (the DiffView's sync) mirrors only the user's.
  function apply(sync = true, by = "page") {
    if (!svg) return;
    if (sync && by === "user") syncBy = "user";
    if (big) moving();
    else svg.style.transform = `translate(${v.x}px, ${v.y}px) scale(${v.k})`;
    root.dataset.k = v.k.toFixed(4);
    root.dataset.x = v.x.toFixed(1);
    root.dataset.y = v.y.toFixed(1);
    lastSync = lastSync || sync;
    if (!frameReq) frameReq = requestAnimationFrame(frame);
  }

  function frame() {
    frameReq = 0;
    if (!svg) return;
    // Level of detail: labels too small to read are not drawn (far cheaper to paint). Not
    // while a large drawing's SVG is under the canvas layer: it would repaint it for nothing.
    if (!layerUp) lod();
    else paintLayer();
    drawMini();
    if (lastSync) {
      lastSync = false;
      clearTimeout(syncTimer);
      syncTimer = setTimeout(() => {
        model.set("view", { x: v.x, y: v.y, k: v.k, width: port.clientWidth,
                            height: port.clientHeight, by: syncBy });
        syncBy = "page";
        model.save_changes();
      }, 200);
    }
  }

  function lod() {
    const far = labelPx * v.k < LOD_PX;
    if (root.classList.contains("olc-lod-far") !== far) root.classList.toggle("olc-lod-far", far);
  }

  // ---- large drawings: the canvas layer while moving, the culled SVG once settled
  function paintLayer(settled) {
    const pw = port.clientWidth, ph = port.clientHeight, dpr = window.devicePixelRatio || 1;
    if (!pw || !ph) return;
    const cw = Math.round(pw * dpr), ch = Math.round(ph * dpr);
    if (layer.width !== cw || layer.height !== ch) {
      layer.width = cw; layer.height = ch;
      layer.style.width = pw + "px"; layer.style.height = ph + "px";
    }
    const marks = [[marked["olc-hit"], "#f0a000", 4], [marked["olc-selected"], "#1f6feb", 5]];
    const n = scene.load(v, pw, ph);
    const far = !settled && n > FINE_MAX && ovReady && v.k <= 2 * kov;
    overview.style.visibility = far ? "visible" : "hidden";
    layer.style.visibility = "visible";
    if (far) {  // the layer under it: white, covering the SVG around the drawing
      if (root.dataset.painter !== "overview") {
        layerCtx.setTransform(1, 0, 0, 1, 0, 0);
        layerCtx.fillStyle = "#fff";
        layerCtx.fillRect(0, 0, layer.width, layer.height);
      }
      overview.style.transform = `translate(${v.x}px, ${v.y}px) scale(${v.k / kov})`;
      root.dataset.painter = "overview";
      return;
    }
    if (n > FINE_MAX && !settled) scene.dots(layerCtx, v, pw, ph, { marks });
    else scene.paint(layerCtx, v, pw, ph, { text: labelPx * v.k >= LOD_PX, coarse: n > FINE_MAX,
                                            marks });
    root.dataset.painter = n > FINE_MAX ? (settled ? "coarse" : "dots") : "fine";
  }

  function showLayer(up) {
    if (layerUp === up) return;
    layerUp = up;
    if (!up) layer.style.visibility = overview.style.visibility = "hidden";
    root.dataset.layer = up ? "canvas" : "svg";
  }

  // The bitmap of the whole drawing for the far levels (after the first paint: idle time).
  function drawOverview() {
    ovTimer = 0;
    if (!scene || ovReady) return;
    kov = Math.min(1, Math.sqrt(OVERVIEW_PX / (W * H)));
    const w = Math.max(1, Math.round(W * kov)), h = Math.max(1, Math.round(H * kov));
    overview.width = w; overview.height = h;
    overview.style.width = w + "px"; overview.style.height = h + "px";
    scene.dots(overview.getContext("2d", { alpha: false }), { x: 0, y: 0, k: kov }, w, h);
    ovReady = true;
  }

  // The view moves: the canvas layer covers the SVG (which is left as it is: no re-raster)
  // until SETTLE_MS after the last move.
  function moving() {
    showLayer(true);
    clearTimeout(settleTimer);
    settleTimer = setTimeout(settle, SETTLE_MS);
  }

  // The view in the drawing's px, with a margin of `m` views around it.
  function viewRect(m) {
    const pw = port.clientWidth, ph = port.clientHeight;
    const w = pw / v.k, h = ph / v.k, x0 = -v.x / v.k, y0 = -v.y / v.k;
    return { x0: x0 - w * m, y0: y0 - h * m, x1: x0 + w * (1 + m), y1: y0 + h * (1 + m) };
  }

  // The view stopped: when few enough elements are in it, the SVG shows them (the others
  // hidden) at the new transform and the layer goes; otherwise the layer stays.
  function settle() {
    settleTimer = 0;
    if (!svg || !big || !port.clientWidth) return;
    if (!ovReady && !ovTimer) ovTimer = setTimeout(drawOverview, 60);
    const vis = scene.visible(viewRect(0.25));
    root.dataset.inView = String(vis.length);
    if (vis.length > SVG_MAX) { paintLayer(true); showLayer(true); lod(); return; }
    const next = new Set(vis);
    for (const it of shown) if (!next.has(it)) scene.detach(it);
    for (const it of next) if (!shown.has(it)) scene.attach(it);
    shown = next;
    svg.style.transform = `translate(${v.x}px, ${v.y}px) scale(${v.k})`;
    lod();
    showLayer(false);
    root.dataset.drawn = String(shown.size);
    root.dataset.settled = String((+root.dataset.settled || 0) + 1);
  }

  // The whole drawing in the view (the overview: 'f', '0' or the fit button).
  function fit() {
    const pw = port.clientWidth, ph = port.clientHeight;
    if (!svg || !pw || !ph) return false;
    const k = Math.min(pw / W, ph / H, 1.5) * 0.96;
    v = { k, x: (pw - W * k) / 2, y: Math.max(4, (ph - H * k) / 2) };
    root.dataset.fit = "whole";
    apply();
    return true;
  }

  // Natural-size centre of drawn element `key` (px of the drawing at k = 1), from the scene:
  // no layout read, and the same for an element hidden off screen.
  function natural(key) { return scene ? scene.box(key) : null; }

  // Where drawn element `key` is on the screen now (client px), or null.
  function screenRect(key) {
    const b = natural(key);
    if (!b) return null;
    const pr = port.getBoundingClientRect();
    const left = pr.left + port.clientLeft + v.x + b.left * v.k;
    const top = pr.top + port.clientTop + v.y + b.top * v.k;
    return { left, top, right: left + b.w * v.k, bottom: top + b.h * v.k, width: b.w * v.k,
             height: b.h * v.k };
  }

  // The first view a person can read (the report's rule, and Netron's): when the whole
  // drawing fits with labels READ_PX tall, all of it; otherwise labels at that size from the
  // top of the layout, where the graph's inputs are, read from the left like a page: the
  // leftmost element of that first screen at the view's left margin (centring on the inputs'
  // middle cut the first of them, or what lies left of them, at the left edge), then moved
  // left as far as the leftmost input allows, to show all of the first screen's inputs whole.
  function readable() {
    const pw = port.clientWidth, ph = port.clientHeight;
    if (!svg || !pw || !ph) return false;
    const kr = kRead(), kFit = Math.min(pw / W, ph / H, 1.5) * 0.96;
    if (kFit >= kr) { fit(); return true; }
    const k = Math.max(kr, Math.min(1.5, (pw / W) * 0.96));
    const M = 16;  // margin (px on screen)
    let x = pw / 2 - (W / 2) * k, top = 0;
    const ins = [], all = [];
    for (const key of byKey.keys()) {
      const b = natural(key);
      if (!b) continue;
      all.push(b);
      if (key.startsWith("input:")) ins.push(b);
    }
    if (ins.length) {
      top = Math.min(...ins.map((n) => n.top));
      const screen = (n) => n.top < top + ph / k && n.top + n.h > top;
      const first = ins.filter((n) => n.top < top + (ph / k) * 0.5);
      const left = Math.min(...all.filter(screen).map((n) => n.left));
      const inL = Math.min(...first.map((n) => n.left));
      const inR = Math.max(...first.map((n) => n.left + n.w));
      x = M - left * k;
      if (x + inR * k > pw - M) x = Math.max(M - inL * k, pw - M - inR * k);
    }
    if (W * k <= pw) x = (pw - W * k) / 2;
    else x = Math.min(M, Math.max(pw - W * k - M, x));
    v = { k, x, y: 8 - Math.max(0, top - 8) * k };
    root.dataset.fit = "readable";
    apply();
    return true;
  }

  function firstView() {
    const fv = model.get("first_view") || "readable";
    if (fv === "fit") return fit();
    if (fv !== "readable" && byKey.has(fv)) {
      if (!port.clientWidth) return false;
      readable();
      centre(fv, true);
      root.dataset.fit = "focus";
      return true;
    }
    return readable();
  }

  function zoomAt(factor, cx, cy) {
    const k = Math.min(MAX_K, Math.max(MIN_K, v.k * factor));
    const f = k / v.k;
    v = { k, x: cx - (cx - v.x) * f, y: cy - (cy - v.y) * f };
    userMoved = true;
    apply(true, "user");
  }

  // Width of the view the details panel leaves free (the panel floats over its right side).
  function freeWidth() {
    const pw = port.clientWidth;
    if (panel.style.display !== "block") return pw;
    const free = pw - panel.offsetWidth - 12;
    return free > pw * 0.4 ? free : pw;
  }

  // Centre drawn element `key` in the part of the view the panel leaves free; zoomTo: at a
  // readable size at least.
  function centre(key, zoomTo) {
    const n = svg && byKey.has(key) ? natural(key) : null;
    if (!n) return false;
    let k = v.k;
    if (zoomTo) k = Math.min(MAX_K, Math.max(k, kRead()));
    v = { k, x: freeWidth() / 2 - n.x * k, y: port.clientHeight / 2 - n.y * k };
    userMoved = true;
    apply();
    return true;
  }

  // A view kept over a new drawing leaves the selection where it was on the screen, unless
  // that is over an edge (the layout moved it there): then the view moves just enough to
  // bring it inside, with a margin.
  function keepInside(key) {
    const r = byKey.has(key || "") ? screenRect(key) : null;
    const pr = port.getBoundingClientRect();
    if (!r || !pr.width || !pr.height) return;
    const m = 24;
    const into = (lo, hi, a, b) => (b - a > hi - lo ? (lo + hi) / 2 - (a + b) / 2
      : a < lo ? lo - a : b > hi ? hi - b : 0);
    const dx = into(pr.left + m, pr.left + freeWidth() - m, r.left, r.right);
    const dy = into(pr.top + m, pr.bottom - m, r.top, r.bottom);
    if (dx || dy) { v = { ...v, x: v.x + dx, y: v.y + dy }; apply(); }
  }

  // The panel just opened: move the view when it covers the selected element.
  function unhide() {
    const key = model.get("selected") || "";
    const r = byKey.has(key) ? screenRect(key) : null;
    if (!r || panel.style.display !== "block") return;
    const p = panel.getBoundingClientRect();
    if (r.right > p.left - 4 && r.left < p.right && r.bottom > p.top && r.top < p.bottom) {
      const pr = port.getBoundingClientRect();
      const dx = (pr.left + freeWidth() / 2) - (r.left + r.width / 2);
      v = { ...v, x: v.x + dx };
      apply();
    }
  }

  function mark(cls, keys) {
    if (!svg) return;
    for (const k of marked[cls] || []) { const g = byKey.get(k); if (g) g.classList.remove(cls); }
    svg.querySelectorAll("." + cls).forEach((g) => g.classList.remove(cls));
    for (const k of keys) { const g = byKey.get(k); if (g) g.classList.add(cls); }
    marked[cls] = keys.filter((k) => byKey.has(k));
    if (layerUp && !frameReq) frameReq = requestAnimationFrame(frame);
  }

  function drawMini() {
    if (!svg) { mini.style.display = "none"; return; }
    const pw = port.clientWidth, ph = port.clientHeight;
    const over = W * v.k > pw * 1.05 || H * v.k > ph * 1.05;
    mini.style.display = over ? "block" : "none";
    if (!over) return;
    const mw = 160, mk = Math.min(mw / W, 120 / H);
    if (mini._mk !== mk) {  // the map: the scene painted once at this scale, without labels
      const w = W * mk, h = H * mk, dpr = window.devicePixelRatio || 1;
      mini.style.width = w + "px"; mini.style.height = h + "px";
      const map = mini.querySelector("canvas") || el("canvas", "olc-mini-map", mini);
      map.width = Math.max(1, Math.round(w * dpr)); map.height = Math.max(1, Math.round(h * dpr));
      map.style.width = w + "px"; map.style.height = h + "px";
      if (scene) scene[big ? "dots" : "paint"](map.getContext("2d"), { x: 0, y: 0, k: mk }, w, h);
      if (miniRect.parentNode !== mini) mini.appendChild(miniRect);
    }
    miniRect.style.left = (-v.x / v.k) * mk + "px";
    miniRect.style.top = (-v.y / v.k) * mk + "px";
    miniRect.style.width = (pw / v.k) * mk + "px";
    miniRect.style.height = (ph / v.k) * mk + "px";
    mini._mk = mk;
  }

  // Median height of the node labels at k = 1 (a sample: one layout read).
  function measureLabels() {
    const texts = Array.from(svg.querySelectorAll("g.node text")).slice(0, 60);
    const hs = [];
    for (const t of texts) {
      const b = t.getBBox ? t.getBBox() : null;
      if (b && b.height > 0) hs.push(b.height);
    }
    hs.sort((a, b) => a - b);
    labelPx = hs.length ? hs[Math.floor(hs.length / 2)] : 11.5;
    root.dataset.labelPx = labelPx.toFixed(2);
  }

  function loadSvg() {
    const text = model.get("svg") || "";
    loaded = model.get("_drawing") || 0;
    stage.replaceChildren();
    mini.replaceChildren();
    mini._mk = 0;
    byKey = new Map();
    svg = null; scene = null; big = false; shown = new Set();
    clearTimeout(settleTimer); clearTimeout(ovTimer);
    ovReady = false; ovTimer = 0;
    showLayer(false);
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
      if (id.startsWith("n:")) byKey.set(realOf(id.slice(2)), g);
    });
    scene = sceneOf(svg, W, H, realOf);
    big = scene.size > BIG;
    root.dataset.nodes = String(byKey.size);
    root.dataset.big = big ? "1" : "";
    if (big) {
      // Laid out and painted only where the view is (settle()); the labels are measured
      // on a few nodes shown for that.
      svg.style.willChange = "auto";
      const sample = new Set(scene.items.filter((it) => it.kind === "node" && it.texts.length)
        .slice(0, 60));
      for (const it of scene.items) if (!sample.has(it)) scene.detach(it);
      measureLabels();
      for (const it of sample) scene.detach(it);
    } else measureLabels();
    userMoved = false;
    const view = model.get("view") || {};
    // a kept view is the user's: a later resize must not re-fit it (userMoved)
    if (view.k && model.get("keep_view")) { v = { x: view.x, y: view.y, k: view.k }; userMoved = true; apply(false); }
    else if (!firstView()) requestAnimationFrame(firstView);
    mark("olc-selected", [model.get("selected")]);
    mark("olc-hit", model.get("highlight") || []);
    if (view.k && model.get("keep_view")) keepInside(model.get("selected"));
    if (!(model.get("index") || {}).ids) hitList = [];
    const f = model.get("_focus") || {};
    if (f.key && f.seq !== focusDone && byKey.has(f.key)) onFocus();
    onBusy();  // the page's own "opening …" ends with a new drawing
    root.dataset.rendered = String((+root.dataset.rendered || 0) + 1);
  }

  function showDetails() {
    const html = model.get("details_html") || "";
    setMarkup(panelBody, html);
    const was = panel.style.display === "block";
    panel.style.display = html ? "block" : "none";
    root.classList.toggle("olc-panel-open", !!html);
    if (html && !was) unhide();
    root.dataset.details = String((+root.dataset.details || 0) + 1);
  }

  // ---- search: every node of the model (index), in the page, per keystroke
  function where(hit) {
    if (hit.open) return "";
    if (hit.note) return hit.note;  // the host's words (a report: "in /layers.35 (not drawn)")
    if (!hit.key) return "not in this view";
    return hit.key.startsWith("scope:") ? "in " + hit.key.slice(6) : "in body of " + hit.key;
  }

  function findHits(q) {
    const t0 = performance.now();
    const ix = model.get("index") || {}, pl = model.get("placement") || {};
    const items = model.get("items") || {};
    const ids = ix.ids || [], text = ix.text || [], labels = ix.label || [];
    const keys = pl.keys || [], at = pl.at || [], open = pl.open || [], note = pl.note || [];
    // the node whose id is the query, then those whose op type or name is (a search for
    // "If" from inside a body: the body's 1,000 ids hold "if", the If node itself comes
    // first), then the drawn ones, then the rest
    const exact = [], named = [], shown = [], hidden = [], seen = new Set();
    for (let i = 0; i < ids.length; i++) {
      if (!text[i].includes(q)) continue;
      const key = at[i] >= 0 ? keys[at[i]] : null;
      const hit = { id: ids[i], label: labels[i], key, open: !!open[i] && key === ids[i],
                    note: note[i] };
      seen.add(ids[i]);
      const cut = labels[i].indexOf("  ");  // "OpType  name" (an empty op type: at 0)
      if (ids[i].toLowerCase() === q) exact.push(hit);
      else if (cut >= 0 && (labels[i].slice(0, cut).toLowerCase() === q ||
                           labels[i].slice(cut + 2).toLowerCase() === q)) named.push(hit);
      else (hit.open ? shown : hidden).push(hit);
    }
    // Drawn elements that are not nodes (inputs, outputs, weights, boxes by their name) and,
    // without an index (the report), everything drawn.
    for (const [key, txt] of Object.entries(items)) {
      if (seen.has(key) || (ids.length && seenIndex(key))) continue;
      const box = key.startsWith("scope:");
      if (!(ids.length && box ? key.toLowerCase().includes(q) : txt.includes(q))) continue;
      const hit = { id: key, label: key, key, open: true };
      if (key.toLowerCase() === q) exact.push(hit); else shown.push(hit);
    }
    root.dataset.searchMs = (performance.now() - t0).toFixed(2);
    return exact.concat(named, shown, hidden);
  }
  let idSet = null, idSetOf = null;
  function seenIndex(key) {
    const ix = model.get("index") || {};
    if (idSetOf !== ix) { idSet = new Set(ix.ids || []); idSetOf = ix; }
    return idSet.has(key);
  }

  function listHits() {
    results.replaceChildren();
    if (!hitList.length) { results.style.display = "none"; return; }
    hitList.slice(0, 100).forEach((h, i) => {
      const row = el("div", "olc-result" + (i === hitPos ? " olc-current" : ""), results);
      row.dataset.i = String(i);
      const a = el("span", "olc-result-label", row); a.textContent = h.label;
      const b = el("span", "olc-result-where", row); b.textContent = where(h);
    });
    if (hitList.length > 100) el("div", "olc-result-more", results).textContent =
      `… ${hitList.length - 100} more: type more of the name`;
    results.style.display = "block";
  }

  function onType() {
    const q = search.value.trim().toLowerCase();
    hitPos = -1;
    if (!q) { hitList = []; hits.textContent = ""; mark("olc-hit", []); listHits(); return; }
    hitList = findHits(q);
    hits.textContent = hitList.length ? `${hitList.length} hit${hitList.length > 1 ? "s" : ""}`
                                      : "no match";
    mark("olc-hit", hitList.filter((h) => h.key).map((h) => h.key));
    listHits();
    if ((model.get("index") || {}).ids) want();
  }

  function choose(i) {
    if (!hitList.length) return;
    hitPos = ((i % hitList.length) + hitList.length) % hitList.length;
    const h = hitList[hitPos];
    hits.textContent = `${hitPos + 1}/${hitList.length}`;
    listHits();
    const cur = results.querySelector(".olc-current");
    if (cur && cur.scrollIntoView) cur.scrollIntoView({ block: "nearest" });
    const hidden = !h.open && (model.get("index") || {}).ids;
    if (!hidden) { if (h.key) { centre(h.key, true); select(h.key); } return; }
    // Inside a collapsed box or a body: Python selects the node (its details show at once),
    // opens the path to it, then centres it. The box is only centred meanwhile, not selected:
    // the page holds a state update back while another is in flight and custom messages are
    // not held, so a selection of the box could reach Python after the reveal.
    if (h.key) centre(h.key, true);
    busy.textContent = "opening " + where(h).replace(/^in (body of )?/, "") + "…";
    model.send({ type: "reveal", key: h.id });
  }

  // The boxes the first hits lie in, sent (once the typing pauses) so the Explorer lays their
  // expands out first, ahead of a choice.
  let wantTimer = 0, wanted = "";
  function want() {
    clearTimeout(wantTimer);
    wantTimer = setTimeout(() => {
      const keys = [...new Set(hitList.slice(0, 8).filter((h) => !h.open && h.key &&
                                                           h.key.startsWith("scope:"))
                                                 .map((h) => h.key))];
      const k = keys.join("\n");
      if (!keys.length || k === wanted) return;
      wanted = k;
      model.send({ type: "want", keys });
    }, 150);
  }

  function select(key) {
    mark("olc-selected", [key]);
    root.dataset.selected = key;
    model.set("selected", key);
    model.save_changes();
  }

  // The drawn node under a pointer event (the port captures the pointer on pointerdown, so
  // the event's own target can be the port).
  function nodeAt(e) {
    if (big) {  // the SVG may be under the canvas layer, or hidden there: ask the scene
      const pr = port.getBoundingClientRect();
      const it = scene.at((e.clientX - pr.left - port.clientLeft - v.x) / v.k,
                          (e.clientY - pr.top - port.clientTop - v.y) / v.k);
      return it ? it.g : null;
    }
    const hit = document.elementFromPoint(e.clientX, e.clientY);
    const g = hit && hit.closest && hit.closest("g.node");
    return g && stage.contains(g) ? g : null;
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
    apply(true, "user");
  });
  port.addEventListener("pointerup", (e) => {
    const d = drag; drag = null;
    port.classList.remove("olc-dragging");
    if (!d || d.moved) return;
    const g = nodeAt(e);
    if (!g) return;
    const key = realOf((g.getAttribute("id") || "").slice(2));
    if (g.classList.contains("onnx-box")) {
      // Outlined here; Python selects it and draws it open (no state update of its own
      // that could reach Python after the expand, as in choose()).
      mark("olc-selected", [key]);
      root.dataset.selected = key;
      model.send({ type: "expand", key });
    } else select(key);
  });
  port.addEventListener("dblclick", (e) => {
    const g = nodeAt(e);
    if (g) model.send({ type: "open", key: realOf((g.getAttribute("id") || "").slice(2)) });
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
    else if (e.key === "0" || e.key === "f") { userMoved = false; fit(); }
    else if (e.key === "1") { userMoved = false; readable(); }
  });
  mini.addEventListener("pointerdown", (e) => {
    e.stopPropagation();
    const r = mini.getBoundingClientRect(), mk = mini._mk || 1;
    const nx = (e.clientX - r.left) / mk, ny = (e.clientY - r.top) / mk;
    v = { ...v, x: port.clientWidth / 2 - nx * v.k, y: port.clientHeight / 2 - ny * v.k };
    userMoved = true;
    apply(true, "user");
  });
  zoomIn.addEventListener("click", () => zoomAt(1.25, port.clientWidth / 2, port.clientHeight / 2));
  zoomOut.addEventListener("click", () => zoomAt(0.8, port.clientWidth / 2, port.clientHeight / 2));
  fitBtn.addEventListener("click", () => { userMoved = false; fit(); });
  readBtn.addEventListener("click", () => { userMoved = false; readable(); });
  search.addEventListener("input", onType);
  search.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      if (!hitList.length) onType();
      choose(e.shiftKey ? hitPos - 1 : hitPos + 1);
      // the list closes: the chosen node is in view, the counter says which hit it is
      // (Enter keeps cycling; typing, a click in the box or the down arrow shows the list)
      results.style.display = "none";
    } else if (e.key === "ArrowDown" && hitList.length && results.style.display !== "block") {
      e.preventDefault();
      listHits();
    } else if (e.key === "Escape") {
      search.value = ""; onType(); port.focus();
    }
    e.stopPropagation();  // keep JupyterLab's notebook shortcuts away from the search box
  });
  // Keep the focus in the search box while a result is clicked (Enter keeps cycling).
  results.addEventListener("pointerdown", (e) => e.preventDefault());
  search.addEventListener("blur", () => { results.style.display = "none"; });
  search.addEventListener("focus", () => { if (hitList.length) listHits(); });
  search.addEventListener("click", () => { if (hitList.length) listHits(); });
  results.addEventListener("click", (e) => {
    const row = e.target.closest && e.target.closest(".olc-result");
    if (row) choose(+row.dataset.i);
  });
  panelClose.addEventListener("click", () => {
    panel.style.display = "none"; root.classList.remove("olc-panel-open");
  });
  panelBody.addEventListener("click", (e) => {
    const b = e.target.closest && e.target.closest("[data-body]");
    if (b) model.send({ type: "open_body", graph: b.getAttribute("data-body") });
    const n = e.target.closest && e.target.closest("[data-focus]");
    if (n) model.send({ type: "focus", key: n.getAttribute("data-focus") });
    showModule(e);
  });

  // (a kept view: the form beside the canvas may narrow it after the drawing came; and a
  // selection that was in view before the resize stays in view: a narrower canvas would
  // leave a node near its right edge half under it)
  let portSize = { w: port.clientWidth, h: port.clientHeight };
  const wasInView = (key, size) => {
    const r = byKey.has(key || "") ? screenRect(key) : null;
    if (!r) return false;
    const pr = port.getBoundingClientRect();
    return r.right > pr.left && r.left < pr.left + size.w && r.bottom > pr.top
      && r.top < pr.top + size.h;
  };
  const ro = new ResizeObserver(() => {
    const before = portSize;
    portSize = { w: port.clientWidth, h: port.clientHeight };
    if (!userMoved) firstView();
    else {
      drawMini();
      const key = model.get("selected");
      if (model.get("keep_view") || wasInView(key, before)) keepInside(key);
    }
    if (big) moving();
  });
  ro.observe(port);

  // ---- model changes
  // A focus names the drawing it is for (`_drawing`). One sent with a new drawing (an expand
  // keeping the opened box in view) may be handled before that drawing is loaded: it waits,
  // and loadSvg applies it once loaded. One already applied is not applied again on a later
  // drawing (the Editor's redraw after an edit keeps its view: re-centring the search hit
  // there moved the node the user was editing).
  let loaded = 0, focusDone = null;
  const onFocus = () => {
    const f = model.get("_focus") || {};
    if (!f.key) return;
    if (f.drawing !== undefined && f.drawing > loaded) return;  // its drawing is not here yet
    const go = () => {
      if (centre(f.key, true)) focusDone = f.seq;  // applied: never again on a later drawing
      if (f.select !== false) { mark("olc-selected", [f.key]); root.dataset.selected = f.key; }
      root.dataset.focused = String(f.seq || 0);
      onBusy();
      root.dataset.centred = f.key;
    };
    if (port.clientWidth) go(); else requestAnimationFrame(go);
  };
  const onView = () => {
    const n = model.get("view") || {};
    if (n.k && (Math.abs(n.k - v.k) > 1e-6 || Math.abs(n.x - v.x) > 0.5 || Math.abs(n.y - v.y) > 0.5)) {
      v = { x: n.x, y: n.y, k: n.k }; userMoved = true; apply(false);
      // a kept view set from Python (it may arrive after its drawing): the same rule
      if (model.get("keep_view")) keepInside(model.get("selected"));
    }
  };
  const onLegend = () => {
    const html = model.get("legend_html") || "";
    setMarkup(legend, html);
    legend.style.display = html ? "block" : "none";
  };
  const onTitle = () => { title.textContent = model.get("title") || ""; title.title = title.textContent; };
  const onBusy = () => {
    busy.textContent = model.get("busy") || "";
    root.dataset.busy = busy.textContent;
  };
  model.on("change:svg", loadSvg);
  model.on("change:_focus", onFocus);
  model.on("change:_fit", () => { userMoved = false; fit(); });
  model.on("change:view", onView);
  model.on("change:details_html", showDetails);
  model.on("change:legend_html", onLegend);
  model.on("change:title", onTitle);
  model.on("change:busy", onBusy);
  // Python's reveal ended without a new drawing or focus: the page's "opening …" ends too
  model.on("msg:custom", (m) => { if (m && m.type === "busy") onBusy(); });
  model.on("change:height", () => { setHeight(); firstView(); });
  // A new view (an expand): the hits keep their order, their places are the new ones.
  // The list stays as it was: a new view after an Undo opened it unasked over the buttons.
  model.on("change:placement", () => {
    if (!search.value.trim()) return;
    const p = hitPos, open = results.style.display === "block"; onType(); hitPos = p;
    if (hitList.length) { hits.textContent = `${hitPos + 1}/${hitList.length}`; listHits(); }
    if (!open) results.style.display = "none";
  });
  model.on("change:selected", () => { const k = model.get("selected"); mark("olc-selected", [k]);
                                       root.dataset.selected = k; });
  model.on("change:highlight", () => mark("olc-hit", model.get("highlight") || []));
  setHeight();
  onTitle();
  onLegend();
  loadSvg();
  showDetails();
  const f0 = model.get("_focus") || {};
  if (f0.key && f0.seq !== focusDone) requestAnimationFrame(onFocus);
  return () => { ro.disconnect(); clearTimeout(syncTimer); clearTimeout(settleTimer);
                 clearTimeout(ovTimer);
                 cancelAnimationFrame(frameReq); };
}

export default { render };
