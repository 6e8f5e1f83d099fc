// onnx_lab report: the widgets' graph canvas (canvas.js, inlined before this file as
// window.OnnxLabCanvas) hosted without a kernel, sortable tables, and the side-by-side diff.
// Everything comes from one gzip'd JSON payload in #olr-data; nothing is fetched.
(function () {
  "use strict";

  async function inflate(b64) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    if (typeof DecompressionStream === "undefined") {
      throw new Error("this browser cannot inflate the report's data (no DecompressionStream): " +
                      "open the file in a current Chrome, Edge, Firefox or Safari.");
    }
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }

  // A model's names are keys of plain objects here: read own keys only ("constructor" or
  // "__proto__" would read Object.prototype's).
  const ownKey = (obj, key) => (obj && Object.hasOwn(obj, key) ? obj[key] : undefined);

  // The model object canvas.js talks to (anywidget's get/set/on/send), backed by a plain
  // object: the host plays the kernel's part.
  function staticModel(state, onSet, onMsg) {
    const listeners = {};
    const fire = (k) => (listeners["change:" + k] || []).slice().forEach((cb) => cb());
    return {
      get: (k) => state[k],
      set: (k, v) => { state[k] = v; fire(k); onSet(k, v); },
      save_changes: () => {},
      on: (ev, cb) => { (listeners[ev] = listeners[ev] || []).push(cb); },
      send: (msg) => onMsg(msg || {}),
      update: (k, v) => { state[k] = v; fire(k); },
    };
  }

  // One canvas over a payload {views, details, where}: views are pre-drawn, a click on a
  // box opens the box's view, the breadcrumb goes back.
  function Host(el, payload, opts) {
    const state = { svg: "", fallback: "", items: {}, selected: "", highlight: [], view: {},
                    keep_view: false, details_html: "", legend_html: "", title: "",
                    height: (opts && opts.height) || 600, _focus: {}, _fit: 0,
                    index: payload.index || {}, placement: {}, drawn: payload.drawn || {} };
    const crumbs = document.createElement("div");
    crumbs.className = "olr-crumbs";
    el.appendChild(crumbs);
    const holder = document.createElement("div");
    el.appendChild(holder);
    const host = { el, payload, current: null, onSelect: null, onPan: null, lastView: null,
                   justLoaded: false, seq: 0, quietUntil: 0 };
    const model = staticModel(state, onSet, onMsg);
    host.model = model;

    function view() { return payload.views[host.current] || {}; }

    // The nodes no view draws as itself (render.report._undrawn): id -> [view key, drawn key
    // of the box or If/Loop node holding it there, where text, panel note, ids]; and the
    // where text of each index entry, for the hit list ("in /layers.35 (not drawn)").
    const undrawn = new Map();
    for (const u of payload.undrawn || []) for (const id of u[4]) undrawn.set(id, u);
    const hitNotes = ((payload.index || {}).ids || []).map((id) => (undrawn.get(id) || [])[2]);

    function detailsFor(key) {
      if (!key) return "";
      const child = ownKey(view().boxes, key);
      if (child !== undefined) {
        const drawn = ownKey(payload.views, child) ? "" :
          "<div class='olr-note'>this box was not pre-drawn (size budget of the report)</div>";
        return (ownKey(payload.details, child) || "") + drawn;
      }
      return ownKey(payload.details, key) || "";
    }

    function onSet(k, v) {
      if (k === "selected") {
        el.dataset.selected = v || "";
        delete el.dataset.revealed;
        model.update("details_html", detailsFor(v));
        if (host.onSelect) host.onSelect(v);
      } else if (k === "view") {
        if (performance.now() > host.quietUntil && !host.justLoaded) host.moved = true;
        // A move the host made (focus, a followed selection) is not the user's: not synced.
        if (host.onPan && performance.now() > host.quietUntil) host.onPan(v);
        host.lastView = v;
        host.justLoaded = false;
      }
    }

    function onMsg(msg) {
      const key = String(msg.key || "");
      if (msg.type === "expand" || (msg.type === "open" && key.startsWith("scope:"))) {
        const child = (view().boxes || {})[key];
        if (child !== undefined && payload.views[child]) show(child);
      } else if (msg.type === "open") {
        const body = Object.keys(payload.views).find((k) => k.startsWith("graph:" + key + "/"));
        if (body) show(body);
      } else if (msg.type === "open_body") {
        if (payload.views["graph:" + msg.graph]) show("graph:" + msg.graph);
      } else if (msg.type === "focus" || msg.type === "reveal") {
        host.focus(key);  // reveal: a search hit inside a box, drawn in that box's view
        model.update("busy", "");  // the canvas's "opening …" ends here, whatever was found
      }
    }

    // Where every node of the search index shows in view `vk` (canvas.js's `placement`, as
    // the widget's render.details.placement gives it): drawn as itself there, or inside the
    // box of `vk` whose view (or a view under it) draws it.
    function placementOf(vk) {
      const ids = (payload.index || {}).ids || [], where = payload.where || {};
      const boxOf = new Map(Object.entries((payload.views[vk] || {}).boxes || {}).map(([k, c]) => [c, k]));
      const under = new Map();  // view key -> the box of vk above it, or null
      const boxAbove = (w) => {
        if (under.has(w)) return under.get(w);
        let c = w, found = null;
        for (let i = 0; c !== null && c !== undefined && i < 64; i++) {
          if (boxOf.has(c)) { found = boxOf.get(c); break; }
          c = (payload.views[c] || {}).parent;
        }
        under.set(w, found);
        return found;
      };
      const keys = [], pos = new Map(), at = [], open = [];
      for (const id of ids) {
        const w = ownKey(where, id), u = w ? null : undrawn.get(id);
        let key = null, own = 0;
        if (w && w[0] === vk) { key = w[1]; own = 1; } else if (w) key = boxAbove(w[0]);
        else if (u && u[0] === vk) key = u[1];  // not drawn: the element holding it here
        else if (u && u[0] !== null) key = boxAbove(u[0]);
        if (key === null) { at.push(-1); open.push(0); continue; }
        if (!pos.has(key)) { pos.set(key, keys.length); keys.push(key); }
        at.push(pos.get(key)); open.push(own);
      }
      return { keys, at, open, note: hitNotes };
    }

    function drawCrumbs() {
      crumbs.replaceChildren();
      const chain = [];
      for (let k = host.current; k !== null && k !== undefined; k = (payload.views[k] || {}).parent) {
        chain.unshift(k);
        if (k === "") break;
      }
      if (chain[0] !== "") chain.unshift("");
      chain.forEach((k, i) => {
        const a = document.createElement(i === chain.length - 1 ? "b" : "a");
        a.textContent = k === "" ? "overview" : (payload.views[k] || {}).label || k;
        a.dataset.view = k;
        if (i < chain.length - 1) { a.href = "#"; a.addEventListener("click", (e) => { e.preventDefault(); show(k); }); }
        crumbs.appendChild(a);
        if (i < chain.length - 1) crumbs.appendChild(document.createTextNode(" › "));
      });
    }

    function show(key) {
      const v = payload.views[key];
      if (!v) return false;
      host.current = key;
      host.justLoaded = true;
      host.moved = false;
      state.items = v.items || {};
      state.fallback = v.fallback || "";
      state.highlight = [];
      state.selected = "";
      el.dataset.view = key;
      model.update("legend_html", v.legend || "");
      model.update("title", key === "" ? "" : v.label);
      model.update("details_html", "");
      state.placement = placementOf(key);
      model.update("svg", v.svg || "");
      model.update("placement", state.placement);  // the search's hits, placed in this view
      drawCrumbs();
      requestAnimationFrame(readable);
      return true;
    }

    // A report is read, not explored first: when the whole drawing only fits at a scale
    // whose labels cannot be read, open on its top at a readable scale (the minimap and the
    // fit button show the whole).
    const READABLE = 0.8;  // node titles about 9 px on screen
    function readable() {
      const root = holder, port = holder.querySelector(".olc-port");
      const svg = holder.querySelector(".olc-stage svg");
      if (!root || !port || !svg || !port.clientWidth) return;
      const k0 = parseFloat(root.dataset.k || "1");
      if (k0 >= READABLE || root.dataset.fit === "readable" || host.moved) return;
      const W = parseFloat(svg.getAttribute("width")) || 1;
      const k = Math.min(1.0, Math.max(READABLE, (port.clientWidth / W) * 0.96));
      const x = W * k < port.clientWidth ? (port.clientWidth - W * k) / 2 : 8;
      host.quietUntil = performance.now() + 600;
      model.update("view", { x, y: 8, k });
      root.dataset.fit = "readable";
    }
    host.show = show;
    host.readable = readable;

    // The drawn key showing node id / tensor / drawn key `name` in the current view (a box
    // holding it), or null.
    host.keyIn = function (name) {
      if (ownKey(state.items, name) !== undefined) return name;
      const members = view().members || {};
      for (const [k, ids] of Object.entries(members)) if (ids.includes(name)) return k;
      return null;
    };

    // Centre, select and highlight `name`; switch to the view that draws it when the
    // current one does not show it. select=false: centre and outline only.
    host.focus = function (name, select = true) {
      let key = host.keyIn(name);
      // (own keys only: a node named "__proto__" is not the object's prototype)
      if (key === null && Object.hasOwn(payload.where, name)) {
        const [vk, dk] = payload.where[name];
        show(vk);
        key = dk;
      }
      if (key === null) return host.reveal(name, select);
      if (select) model.set("selected", key);
      host.quietUntil = performance.now() + 600;  // canvas.js reports the move ~200 ms later
      model.update("_focus", { key, seq: ++host.seq });
      return true;
    };

    // A node no view draws as itself (its box or body was left out by the view budget): the
    // deepest pre-drawn view that holds it, the box (or If/Loop node) holding it centred and
    // selected, and the node's own panel under a note saying why and how to see it drawn.
    host.reveal = function (name, select = true) {
      const u = undrawn.get(name);
      if (!u) return false;
      const [vk, key, , note] = u;
      if (vk !== null && vk !== host.current) show(vk);
      const here = key !== null && ownKey(state.items, key) !== undefined;
      if (select) {
        if (here) model.set("selected", key);  // (its panel: the box's, replaced below)
        model.update("details_html", note + (Object.hasOwn(payload.details, name)
                                             ? payload.details[name] : ""));
        el.dataset.revealed = name;
      }
      if (here) {  // centred in the part of the view the panel leaves free
        host.quietUntil = performance.now() + 600;
        model.update("_focus", { key, seq: ++host.seq, select });
      }
      return true;
    };

    host.outline = function (names) {
      const keys = [];
      for (const n of names) { const k = host.keyIn(n); if (k !== null && !keys.includes(k)) keys.push(k); }
      model.update("highlight", keys);
      el.dataset.outlined = keys.join(" ");
      return keys;
    };

    window.OnnxLabCanvas.render({ model, el: holder });
    // canvas.js refits on a resize of its view (the page growing a scrollbar): read again.
    const port = holder.querySelector(".olc-port");
    if (port) new ResizeObserver(() => requestAnimationFrame(readable)).observe(port);
    show("");
    return host;
  }

  // ---------------------------------------------------------------- tables
  function cmp(a, b) {
    if (a === null || a === undefined) return (b === null || b === undefined) ? 0 : 1;
    if (b === null || b === undefined) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b), undefined, { numeric: true });
  }

  function fmt(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number" && !Number.isInteger(v)) return Number(v.toPrecision(4)).toString();
    return String(v);
  }

  function mountTable(el, t, onKey) {
    const PAGE = 50;
    let rows = t.rows.slice(), sortCol = -1, desc = false, page = 0, query = "";
    const bar = document.createElement("div");
    bar.className = "olr-table-bar";
    const filter = document.createElement("input");
    filter.type = "search"; filter.placeholder = "filter rows"; filter.className = "olr-filter";
    const info = document.createElement("span");
    const prev = document.createElement("button"); prev.textContent = "‹"; prev.className = "olr-page";
    const next = document.createElement("button"); next.textContent = "›"; next.className = "olr-page";
    bar.append(filter, prev, next, info);
    const table = document.createElement("table");
    table.className = "olr-grid";
    el.append(bar, table);
    const keyIdx = t.key ? t.columns.indexOf(t.key) : -1;

    function visible() {
      if (!query) return rows;
      return rows.filter((r) => r.some((c) => c !== null && String(c).toLowerCase().includes(query)));
    }
    function draw() {
      const vis = visible();
      const pages = Math.max(1, Math.ceil(vis.length / PAGE));
      page = Math.min(page, pages - 1);
      // Cells are model strings: built as elements with textContent, never as markup.
      const head = document.createElement("tr");
      t.columns.forEach((c, i) => {
        const th = document.createElement("th");
        th.dataset.col = String(i);
        if (i === sortCol) th.className = desc ? "olr-desc" : "olr-asc";
        th.textContent = String(c);
        head.appendChild(th);
      });
      const rowsEl = vis.slice(page * PAGE, page * PAGE + PAGE).map((r) => {
        const tr = document.createElement("tr");
        if (keyIdx >= 0 && onKey) { tr.className = "olr-link"; tr.dataset.key = fmt(r[keyIdx]); }
        for (const c of r) {
          const td = document.createElement("td");
          td.textContent = fmt(c);
          tr.appendChild(td);
        }
        return tr;
      });
      table.replaceChildren(head, ...rowsEl);
      info.textContent = `${vis.length} of ${t.total} rows` + (pages > 1 ? ` · page ${page + 1}/${pages}` : "");
      prev.disabled = page === 0; next.disabled = page >= pages - 1;
    }
    table.addEventListener("click", (e) => {
      const th = e.target.closest("th");
      if (th) {
        const c = +th.dataset.col;
        desc = sortCol === c ? !desc : false;
        sortCol = c;
        rows.sort((a, b) => (desc ? -1 : 1) * cmp(a[c], b[c]));
        page = 0; draw();
        return;
      }
      const tr = e.target.closest("tr.olr-link");
      if (tr && onKey) onKey(tr.dataset.key);
    });
    filter.addEventListener("input", () => { query = filter.value.trim().toLowerCase(); page = 0; draw(); });
    prev.addEventListener("click", () => { page--; draw(); });
    next.addEventListener("click", () => { page++; draw(); });
    draw();
  }

  // ---------------------------------------------------------------- diff
  function linkDiff(box, A, B, d) {
    let busy = false, sync = true;
    const toggle = document.createElement("label");
    toggle.className = "olr-sync";
    const box_ = document.createElement("input");
    box_.type = "checkbox"; box_.checked = true;
    toggle.append(box_, document.createTextNode(" sync pan and zoom"));
    box_.addEventListener("change", (e) => { sync = e.target.checked; });
    box.parentNode.insertBefore(toggle, box);

    function follow(src, dst, map, key) {
      if (busy) return;
      // A search or a click that selects also centres the source: the other side follows the
      // selection, not that move.
      src.quietUntil = performance.now() + 600;
      // (own keys: a node named "constructor" with no counterpart read Object's function)
      const peers = (key && ownKey(map, key)) || [];
      busy = true;
      try {
        if (!peers.length) { dst.outline([]); return; }
        // Go to the view that draws the most counterparts as themselves (the current one
        // unless another draws more: boxes of an overview hide them).
        const own = (vk) => peers.filter((p) => ownKey((ownKey(dst.payload.views, vk) || {}).items, p) !== undefined).length;
        const w = ownKey(dst.payload.where, peers[0]);
        let best = dst.current;
        for (const vk of ["fused:" + key, w ? w[0] : null]) {
          if (vk !== null && ownKey(dst.payload.views, vk) && own(vk) > own(best)) best = vk;
        }
        if (best !== dst.current) dst.show(best);
        dst.focus(peers[0], true);
        dst.outline(peers);
      } finally { busy = false; }
    }
    A.onSelect = (k) => follow(A, B, d.a2b, k);
    B.onSelect = (k) => follow(B, A, d.b2a, k);

    // Pan and zoom: the other side moves by the same screen transform.
    function pan(src, dst, v) {
      const prev = src.lastView;
      if (busy || !sync || src.justLoaded || !prev || !prev.k || !v || !v.k) return;
      const dv = dst.lastView;
      if (!dv || !dv.k) return;
      const s = v.k / prev.k, tx = v.x - s * prev.x, ty = v.y - s * prev.y;
      const nv = Object.assign({}, dv, { k: dv.k * s, x: s * dv.x + tx, y: s * dv.y + ty });
      busy = true;
      try { dst.lastView = nv; dst.model.update("view", nv); } finally { busy = false; }
    }
    A.onPan = (v) => pan(A, B, v);
    B.onPan = (v) => pan(B, A, v);

    box.addEventListener("click", (e) => {
      const b = e.target.closest && e.target.closest(".olr-peer");
      if (!b) return;
      const dst = b.dataset.olrSide === "a" ? A : B;
      dst.focus(b.dataset.olrNode, true);
    });
  }

  // ---------------------------------------------------------------- start
  async function start() {
    const data = await inflate(document.getElementById("olr-data").textContent.trim());
    const hosts = {};
    document.querySelectorAll(".olr-canvas[data-canvas]").forEach((el) => {
      const name = el.dataset.canvas;
      let payload = null;
      if (name.includes(":")) {
        const [diff, side] = name.split(":");
        payload = ((data.diffs || {})[diff] || {})[side];
      } else payload = (data.canvases || {})[name];
      if (payload) hosts[name] = Host(el, payload, { height: +(el.dataset.height || 600) });
    });
    for (const [name, d] of Object.entries(data.diffs || {})) {
      const box = document.querySelector(`.olr-diff[data-diff="${name}"]`);
      if (box && hosts[name + ":a"] && hosts[name + ":b"]) linkDiff(box, hosts[name + ":a"], hosts[name + ":b"], d);
    }
    const main = hosts.main;
    document.querySelectorAll(".olr-table[data-table]").forEach((el) => {
      const t = (data.tables || {})[el.dataset.table];
      if (!t) return;
      const onKey = main ? (key) => {
        if (main.focus(key, true)) main.el.scrollIntoView({ behavior: "smooth", block: "center" });
      } : null;
      mountTable(el, t, onKey);
    });
    window.onnxLabReport = { hosts, data };
    document.body.dataset.ready = "1";
  }

  start().catch((e) => {
    const div = document.createElement("div");
    div.className = "olr-note olr-failed";
    div.textContent = "The report could not start: " + (e && e.message ? e.message : e);
    document.body.insertBefore(div, document.body.firstChild);
    document.body.dataset.ready = "error";
  });
})();
