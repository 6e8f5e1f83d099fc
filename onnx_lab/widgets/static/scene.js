// onnx_lab: what keeps a large drawing smooth on the canvas (canvas.js). Not a module of its
// own: canvas.py and the report put this file before canvas.js.
//
// A graphviz SVG of thousands of nodes costs the browser a re-rasterization of everything in
// view at every zoom step (hundreds of ms a frame on a software-rendered page). sceneOf()
// reads the drawing once: every node, edge and cluster with its bounding box in the
// drawing's own px (parsed from graphviz's coordinates, no layout read), filed in a grid of
// cells, and its shapes and texts as Path2D / text runs grouped by style. From that:
// - paint(): the drawing on a <canvas> for a given view, cell by cell (off-screen cells
//   skipped), texts only when they are large enough to read: the layer shown while the view
//   moves and whenever too much is in view for the SVG;
// - visible(): which elements a view shows (the SVG holds only those: detach/attach);
// - at(): the element under a point (clicks while the canvas layer is up);
// - box(): an element's box (centring, keeping in view).

// The numbers of a polygon's `points`.
function numbers(s) {
  const out = [];
  const re = /-?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?/gi;
  let m;
  while ((m = re.exec(s || ""))) out.push(+m[0]);
  return out;
}

// The points of a path's `d` that bound it (end and control points, absolute): graphviz
// writes absolute M/C, other SVG may use any command.
const ARGS = { m: 2, l: 2, h: 1, v: 1, c: 6, s: 4, q: 4, t: 2, a: 7, z: 0 };
function pathPoints(d) {
  const out = [];
  const re = /([MmLlHhVvCcSsQqTtAaZz])|(-?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)/g;
  let cmd = "", args = [], x = 0, y = 0, sx = 0, sy = 0, m;
  const run = () => {
    const c = cmd.toLowerCase(), rel = cmd !== cmd.toUpperCase(), n = ARGS[c];
    if (c === "z") { x = sx; y = sy; return; }
    if (!n || args.length < n) return;
    const a = args.splice(0, n);
    if (c === "h") x = rel ? x + a[0] : a[0];
    else if (c === "v") y = rel ? y + a[0] : a[0];
    else if (c === "a") { x = rel ? x + a[5] : a[5]; y = rel ? y + a[6] : a[6]; }
    else {
      for (let i = 0; i + 1 < n; i += 2) out.push(rel ? x + a[i] : a[i], rel ? y + a[i + 1] : a[i + 1]);
      x = out[out.length - 2]; y = out[out.length - 1];
      if (c === "m") { sx = x; sy = y; cmd = rel ? "l" : "L"; }
      return;
    }
    out.push(x, y);
  };
  while ((m = re.exec(d || ""))) {
    if (m[1]) { cmd = m[1]; args = []; if (cmd === "z" || cmd === "Z") run(); }
    else { args.push(+m[2]); while (cmd && ARGS[cmd.toLowerCase()] && args.length >= ARGS[cmd.toLowerCase()]) run(); }
  }
  return out;
}

function sceneOf(svg, W, H, realOf = (k) => k) {  // realOf: an SVG id's key -> its key
  const top = svg.querySelector("g.graph") || svg;
  let mx = { a: 1, b: 0, c: 0, d: 1, e: 0, f: 0 };
  try {
    const t = top.transform && top.transform.baseVal.consolidate();
    if (t) mx = t.matrix;
  } catch (err) { /* no transform: identity */ }
  const vb = svg.viewBox && svg.viewBox.baseVal;
  const ox = vb && vb.width ? vb.x : 0, oy = vb && vb.width ? vb.y : 0;
  // local (graphviz) coordinates -> the drawing's px at k = 1
  const X = (x, y) => mx.a * x + mx.c * y + mx.e - ox;
  const Y = (x, y) => mx.b * x + mx.d * y + mx.f - oy;
  const scale = Math.hypot(mx.a, mx.b) || 1;

  const items = [], byKey = new Map();
  let maxW = 0, maxH = 0;
  for (const g of svg.querySelectorAll("g.node, g.edge, g.cluster")) {
    const kind = g.classList.contains("node") ? "node" : g.classList.contains("edge") ? "edge"
      : "cluster";
    const it = { g, kind, key: "", x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity,
                 shapes: [], texts: [], line: null,
                 lx0: Infinity, ly0: Infinity, lx1: -Infinity, ly1: -Infinity };
    const grow = (x, y) => {
      if (x < it.lx0) it.lx0 = x; if (x > it.lx1) it.lx1 = x;
      if (y < it.ly0) it.ly0 = y; if (y > it.ly1) it.ly1 = y;
      const px = X(x, y), py = Y(x, y);
      if (px < it.x0) it.x0 = px; if (px > it.x1) it.x1 = px;
      if (py < it.y0) it.y0 = py; if (py > it.y1) it.y1 = py;
    };
    for (const e of g.querySelectorAll("path, polygon, polyline, ellipse, text")) {
      const tag = e.localName;
      if (tag === "text") {
        const x = +e.getAttribute("x") || 0, y = +e.getAttribute("y") || 0;
        const size = parseFloat(e.getAttribute("font-size")) || 14;
        const str = e.textContent || "";
        it.texts.push({ x, y, size, str, anchor: e.getAttribute("text-anchor") || "start",
                        dx: X(x, y), dy: Y(x, y),
                        weight: e.getAttribute("font-weight") === "bold" ? "bold " : "",
                        family: e.getAttribute("font-family") || "sans-serif",
                        fill: e.getAttribute("fill") || "#000" });
        if (kind === "edge") {  // an edge label: roughly its extent
          const w = str.length * size * 0.6;
          grow(x - w, y - size); grow(x + w, y + size * 0.3);
        }
        continue;
      }
      const fill = e.getAttribute("fill") || "#000", stroke = e.getAttribute("stroke") || "none";
      let p;
      if (tag === "ellipse") {
        const cx = +e.getAttribute("cx"), cy = +e.getAttribute("cy");
        const rx = +e.getAttribute("rx"), ry = +e.getAttribute("ry");
        grow(cx - rx, cy - ry); grow(cx + rx, cy + ry);
        p = new Path2D();
        p.ellipse(cx, cy, rx, ry, 0, 0, 2 * Math.PI);
      } else {
        const raw = tag === "path" ? e.getAttribute("d") : e.getAttribute("points");
        const n = tag === "path" ? pathPoints(raw) : numbers(raw);
        for (let i = 0; i + 1 < n.length; i += 2) grow(n[i], n[i + 1]);
        if (kind === "edge" && tag === "path" && !it.line) {
          // far away an edge is the polyline through its curve's end points (graphviz
          // writes M then C triples), else through all its points
          const step = /^\s*M[^A-Za-z]*C[^A-Za-z]*$/.test(raw || "") ? 6 : 2;
          it.line = [];
          for (let i = 0; i + 1 < n.length; i += step) it.line.push(n[i], n[i + 1]);
          it.lineStroke = e.getAttribute("stroke") || "#000";
          it.lineD = new Float32Array(it.line.length);  // in the drawing's px
          for (let i = 0; i + 1 < it.line.length; i += 2) {
            it.lineD[i] = X(it.line[i], it.line[i + 1]);
            it.lineD[i + 1] = Y(it.line[i], it.line[i + 1]);
          }
        }
        if (tag === "path") p = new Path2D(raw || "");
        else {
          p = new Path2D();
          for (let i = 0; i + 1 < n.length; i += 2) (i ? p.lineTo(n[i], n[i + 1])
                                                         : p.moveTo(n[i], n[i + 1]));
          if (tag === "polygon") p.closePath();
        }
      }
      it.shapes.push({ p, fill: fill === "none" ? "" : fill,
                       stroke: stroke === "none" || stroke === "transparent" ? "" : stroke });
    }
    if (!(it.x1 >= it.x0)) continue;  // nothing drawn
    const id = g.getAttribute("id") || "";
    if (kind === "node" && id.startsWith("n:")) { it.key = realOf(id.slice(2)); byKey.set(it.key, it); }
    if (kind === "node") { maxW = Math.max(maxW, it.x1 - it.x0); maxH = Math.max(maxH, it.y1 - it.y0); }
    it.i = items.length;
    items.push(it);
  }

  // Cells: each element is filed in the cell of its centre; a cell's box is the union of
  // its elements' boxes, so a cell is drawn exactly when something of it is in view. An
  // element larger than a cell (a long edge, a cluster) is a cell of its own: filed with
  // the others it would make their cell drawn from far away.
  const cs = Math.max(256, Math.sqrt((W * H) / 1500));
  const cols = Math.max(1, Math.ceil(W / cs)), rows = Math.max(1, Math.ceil(H / cs));
  const cells = new Map();
  let own = 0;
  for (const it of items) {
    if (it.x1 - it.x0 > cs || it.y1 - it.y0 > cs) {
      cells.set("own" + own++, { x0: it.x0, y0: it.y0, x1: it.x1, y1: it.y1, items: [it],
                                 layers: null });
      continue;
    }
    const c = Math.min(cols - 1, Math.max(0, Math.floor((it.x0 + it.x1) / 2 / cs)));
    const r = Math.min(rows - 1, Math.max(0, Math.floor((it.y0 + it.y1) / 2 / cs)));
    const id = r * cols + c;
    let cell = cells.get(id);
    if (!cell) {
      cell = { x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity, items: [],
               layers: null };
      cells.set(id, cell);
    }
    cell.items.push(it);
    cell.x0 = Math.min(cell.x0, it.x0); cell.y0 = Math.min(cell.y0, it.y0);
    cell.x1 = Math.max(cell.x1, it.x1); cell.y1 = Math.max(cell.y1, it.y1);
  }
  const cellList = Array.from(cells.values());

  // A cell's shapes merged into one Path2D per (layer, style): a handful of fill/stroke
  // calls per cell instead of one per element. Layers in graphviz's paint order: clusters,
  // edges, nodes (their fills, then their outlines), then texts.
  function layersOf(cell) {
    if (cell.layers) return cell.layers;
    const groups = new Map();
    // (clusters' dashes are left out: the 2-D context dashes a whole outline, off screen too)
    const add = (order, kind, style, p) => {
      const k = order + "|" + kind + "|" + style;
      let gr = groups.get(k);
      if (!gr) { gr = { order, kind, style, p: new Path2D() }; groups.set(k, gr); }
      gr.p.addPath(p);
    };
    const texts = [];
    for (const it of cell.items) {
      const o = it.kind === "cluster" ? 0 : it.kind === "edge" ? 2 : 4;
      for (const s of it.shapes) {
        if (s.fill) add(o, "fill", s.fill, s.p);
        if (s.stroke) add(o + 1, "stroke", s.stroke, s.p);
      }
      for (const t of it.texts) texts.push(t);
    }
    const font = (t) => t.weight + t.size + t.family;
    texts.sort((a, b) => (font(a) < font(b) ? -1 : font(a) > font(b) ? 1 : 0));
    const fine = Array.from(groups.values()).sort((a, b) => a.order - b.order);
    // Far away (nodes a few px tall): boxes and straight lines, a fraction of the work.
    groups.clear();
    for (const it of cell.items) {
      if (it.kind === "edge") {
        if (!it.line || it.line.length < 4) continue;
        const p = new Path2D();
        p.moveTo(it.line[0], it.line[1]);
        for (let i = 2; i + 1 < it.line.length; i += 2) p.lineTo(it.line[i], it.line[i + 1]);
        add(2, "stroke", it.lineStroke, p);
        continue;
      }
      const p = new Path2D();
      p.rect(it.lx0, it.ly0, it.lx1 - it.lx0, it.ly1 - it.ly0);
      const s = it.shapes[0];
      if (it.kind === "cluster") { add(0, "stroke", "#c3cad2", p); continue; }
      if (s && s.fill) add(4, "fill", s.fill, p);
      if (s && s.stroke) add(5, "stroke", s.stroke, p);
    }
    const coarse = Array.from(groups.values()).sort((a, b) => a.order - b.order);
    cell.layers = { groups: fine, coarse, texts };
    return cell.layers;
  }

  // The cells a view (in the drawing's px: x0, y0, x1, y1) touches.
  function cellsIn(r) {
    return cellList.filter((c) => c.x1 >= r.x0 && c.x0 <= r.x1 && c.y1 >= r.y0 && c.y0 <= r.y1);
  }

  // The elements a view shows: those whose box meets the rect.
  function visible(r) {
    const out = [];
    for (const c of cellsIn(r)) {
      for (const it of c.items) {
        if (it.x1 >= r.x0 && it.x0 <= r.x1 && it.y1 >= r.y0 && it.y0 <= r.y1) out.push(it);
      }
    }
    return out;
  }

  // The topmost node whose box holds point (x, y), in the drawing's px.
  function at(x, y) {
    let best = null;
    const r = { x0: x - maxW, y0: y - maxH, x1: x + maxW, y1: y + maxH };
    for (const c of cellsIn(r)) {
      for (const it of c.items) {
        if (it.kind !== "node" || x < it.x0 || x > it.x1 || y < it.y0 || y > it.y1) continue;
        if (!best || it.i > best.i) best = it;
      }
    }
    return best;
  }

  function box(key) {
    const it = byKey.get(key);
    if (!it) return null;
    return { x: (it.x0 + it.x1) / 2, y: (it.y0 + it.y1) / 2, w: it.x1 - it.x0,
             h: it.y1 - it.y0, top: it.y0, left: it.x0 };
  }

  // Draw the view v = {x, y, k} (screen = drawing px * k + (x, y)) on a 2-D context of a
  // canvas w x h css px. opts: {text: draw labels, coarse: boxes and straight lines,
  // marks: [[keys, colour, width px]]}.
  function paint(ctx, v, w, h, opts = {}) {
    const dpr = ctx.canvas.width / Math.max(1, w);
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, ctx.canvas.width, ctx.canvas.height);
    const k = v.k * dpr;
    const view = { x0: -v.x / v.k, y0: -v.y / v.k, x1: (w - v.x) / v.k, y1: (h - v.y) / v.k };
    // drawing px -> device px, composed with graphviz's own transform (local coordinates)
    ctx.setTransform(k * mx.a, k * mx.b, k * mx.c, k * mx.d,
                     k * (mx.e - ox) + v.x * dpr, k * (mx.f - oy) + v.y * dpr);
    const px = 1 / (k * scale);  // one device pixel in local units
    const shown = cellsIn(view);
    ctx.lineJoin = "round";
    for (let order = 0; order <= 5; order++) {
      for (const c of shown) {
        const ls = layersOf(c);
        for (const gr of opts.coarse ? ls.coarse : ls.groups) {
          if (gr.order !== order) continue;
          if (gr.kind === "fill") { ctx.fillStyle = gr.style; ctx.fill(gr.p); }
          else {
            ctx.strokeStyle = gr.style;
            ctx.lineWidth = Math.max(1, px);
            ctx.stroke(gr.p);
          }
        }
      }
    }
    if (opts.text) {
      // Labels at whole device px sizes, without a scaling transform: the glyphs rasterized
      // for one frame serve the next (a new scale each frame would render every glyph anew).
      ctx.setTransform(1, 0, 0, 1, 0, 0);
      const lx0 = view.x0, lx1 = view.x1, tx0 = v.x * dpr, ty0 = v.y * dpr;
      for (const c of shown) {
        let font = "";
        for (const t of layersOf(c).texts) {
          const size = Math.round(t.size * k * scale);
          if (size < 4) continue;
          if (t.dy < view.y0 - t.size || t.dy > view.y1 + t.size || t.dx < lx0 - 400
              || t.dx > lx1 + 400) continue;
          const f = t.weight + size + "px " + t.family;
          if (f !== font) { font = f; ctx.font = f; }
          ctx.fillStyle = t.fill;
          ctx.textAlign = t.anchor === "middle" ? "center" : t.anchor === "end" ? "right" : "left";
          ctx.fillText(t.str, t.dx * k + tx0, t.dy * k + ty0);
        }
      }
      ctx.setTransform(k * mx.a, k * mx.b, k * mx.c, k * mx.d,
                       k * (mx.e - ox) + v.x * dpr, k * (mx.f - oy) + v.y * dpr);
    }
    for (const [keys, colour, width] of opts.marks || []) {
      ctx.strokeStyle = colour;
      for (const key of keys) {
        const it = byKey.get(key);
        if (!it) continue;
        ctx.lineWidth = Math.max(width, 3 * px);
        for (const s of it.shapes) ctx.stroke(s.p);
      }
    }
  }

  // ---- far away and moving: every element as pixels written directly (boxes and 1 px lines,
  // no antialiasing), a few ms for thousands of elements where the 2-D context's
  // antialiased paths take tens.
  const probe = document.createElement("canvas").getContext("2d");
  const colours = new Map();
  function rgba(c) {  // a CSS colour as ImageData's 0xAABBGGRR (little-endian)
    let u = colours.get(c);
    if (u !== undefined) return u;
    probe.fillStyle = "#000";
    probe.fillStyle = c || "#000";
    const s = String(probe.fillStyle);
    let r = 0, g = 0, b = 0;
    if (s[0] === "#") { r = parseInt(s.slice(1, 3), 16); g = parseInt(s.slice(3, 5), 16); b = parseInt(s.slice(5, 7), 16); }
    else { const m = s.match(/[\d.]+/g) || []; [r, g, b] = [+m[0] || 0, +m[1] || 0, +m[2] || 0]; }
    u = ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
    colours.set(c, u);
    return u;
  }
  let img = null, buf = null;
  function dots(ctx, v, w, h, opts = {}) {
    const cw = ctx.canvas.width, ch = ctx.canvas.height, dpr = cw / Math.max(1, w);
    if (!img || img.width !== cw || img.height !== ch) {
      img = ctx.createImageData(cw, ch);
      buf = new Uint32Array(img.data.buffer);
    }
    buf.fill(0xffffffff);
    const k = v.k * dpr, tx = v.x * dpr, ty = v.y * dpr;
    const view = { x0: -v.x / v.k, y0: -v.y / v.k, x1: (w - v.x) / v.k, y1: (h - v.y) / v.k };
    const rect = (x0, y0, x1, y1, c, fill) => {
      x0 = Math.max(0, Math.round(x0)); y0 = Math.max(0, Math.round(y0));
      x1 = Math.min(cw - 1, Math.max(x0, Math.round(x1) - 1));
      y1 = Math.min(ch - 1, Math.max(y0, Math.round(y1) - 1));
      if (x0 > x1 || y0 > y1) return;
      for (let y = y0; y <= y1; y++) {
        const row = y * cw;
        if (fill || y === y0 || y === y1) buf.fill(c, row + x0, row + x1 + 1);
        else { buf[row + x0] = c; buf[row + x1] = c; }
      }
    };
    const line = (x0, y0, x1, y1, c) => {
      // clipped to the canvas first (Liang-Barsky): a long edge costs its visible part only
      let t0 = 0, t1 = 1;
      const ddx = x1 - x0, ddy = y1 - y0;
      const clip = (p, q) => {
        if (p === 0) return q >= 0;
        const r = q / p;
        if (p < 0) { if (r > t1) return false; if (r > t0) t0 = r; }
        else { if (r < t0) return false; if (r < t1) t1 = r; }
        return true;
      };
      if (!(clip(-ddx, x0) && clip(ddx, cw - 1 - x0) && clip(-ddy, y0) && clip(ddy, ch - 1 - y0))) return;
      x1 = Math.round(x0 + t1 * ddx); y1 = Math.round(y0 + t1 * ddy);
      x0 = Math.round(x0 + t0 * ddx); y0 = Math.round(y0 + t0 * ddy);
      const dx = Math.abs(x1 - x0), dy = -Math.abs(y1 - y0);
      const sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
      let err = dx + dy, n = dx - dy + 1;
      while (n-- > 0) {
        if (x0 >= 0 && y0 >= 0 && x0 < cw && y0 < ch) buf[y0 * cw + x0] = c;
        const e2 = 2 * err;
        if (e2 >= dy) { err += dy; x0 += sx; }
        if (e2 <= dx) { err += dx; y0 += sy; }
      }
    };
    const shown = cellsIn(view);
    for (let pass = 0; pass < 3; pass++) {  // clusters, edges, nodes
      const kind = pass === 0 ? "cluster" : pass === 1 ? "edge" : "node";
      for (const cell of shown) {
        for (const it of cell.items) {
          if (it.kind !== kind || it.x1 < view.x0 || it.x0 > view.x1 || it.y1 < view.y0
              || it.y0 > view.y1) continue;
          if (kind === "edge") {
            const d = it.lineD;
            if (!d) continue;
            const c = it.dotColour || (it.dotColour = rgba(it.lineStroke));
            for (let i = 2; i + 1 < d.length; i += 2) {
              line(d[i - 2] * k + tx, d[i - 1] * k + ty, d[i] * k + tx, d[i + 1] * k + ty, c);
            }
            continue;
          }
          const x0 = it.x0 * k + tx, y0 = it.y0 * k + ty, x1 = it.x1 * k + tx, y1 = it.y1 * k + ty;
          const s = it.shapes[0] || {};
          if (kind === "cluster") { rect(x0, y0, x1, y1, rgba("#c3cad2"), false); continue; }
          const edge = rgba(s.stroke || s.fill || "#5b6b7f");
          if (x1 - x0 >= 3 && y1 - y0 >= 3) {
            rect(x0, y0, x1, y1, rgba(s.fill || "#fff"), true);
            rect(x0, y0, x1, y1, edge, false);
          } else rect(x0, y0, x1 + 1, y1 + 1, edge, true);
        }
      }
    }
    for (const [keys, colour] of opts.marks || []) {
      const c = rgba(colour);
      for (const key of keys) {
        const it = byKey.get(key);
        if (!it) continue;
        const x0 = it.x0 * k + tx, y0 = it.y0 * k + ty, x1 = it.x1 * k + tx, y1 = it.y1 * k + ty;
        for (let d = 1; d <= 3; d++) rect(x0 - d, y0 - d, x1 + d, y1 + d, c, false);
      }
    }
    ctx.putImageData(img, 0, 0);
  }

  // Take element `it` out of the document (a comment keeps its place, so the paint order
  // stays graphviz's) or put it back: what is out costs no style, layout or paint at all.
  function detach(it) {
    if (!it.g.parentNode) return;
    if (!it.slot) it.slot = document.createComment("");
    it.g.replaceWith(it.slot);
  }
  function attach(it) { if (it.slot && it.slot.parentNode) it.slot.replaceWith(it.g); }

  // About how many elements a view holds (those of the cells it touches).
  function load(v, w, h) {
    const view = { x0: -v.x / v.k, y0: -v.y / v.k, x1: (w - v.x) / v.k, y1: (h - v.y) / v.k };
    let n = 0;
    for (const c of cellsIn(view)) n += c.items.length;
    return n;
  }

  return { items, byKey, box, at, visible, load, paint, dots, detach, attach, cells: cellList.length,
           nodes: byKey.size, size: items.length };
}
