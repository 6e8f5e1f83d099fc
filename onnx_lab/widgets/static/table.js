// onnx_lab paged table: one widget model for a whole table (rows, checkboxes, pager).
// The page's HTML is built in Python with the escaping helpers and enters through markup.js's
// setMarkup (parsed inert, cleaned); this module only shows it,
// reports clicks (custom messages) and mirrors the `checked` traitlet onto the checkboxes.
function render({ model, el }) {
  el.classList.add("olt-root");
  const body = document.createElement("div");
  body.className = "olt-body";
  const bar = document.createElement("div");
  bar.className = "olt-bar";
  const prev = document.createElement("button");
  prev.className = "olt-prev jupyter-button";
  prev.textContent = "◀";
  prev.title = "previous page";
  const pos = document.createElement("span");
  pos.className = "olt-pos";
  const next = document.createElement("button");
  next.className = "olt-next jupyter-button";
  next.textContent = "▶";
  next.title = "next page";
  const clear = document.createElement("button");
  clear.className = "olt-clear jupyter-button";
  clear.textContent = "clear selection";
  bar.append(prev, pos, next, clear);
  el.append(body, bar);

  const boxes = () => body.querySelectorAll("input.olt-check");
  const sync = () => {
    const on = model.get("checked") || [];
    boxes().forEach((b) => { b.checked = !!on[Number(b.dataset.i)]; });
  };
  const draw = () => {
    setMarkup(body, model.get("table_html") || "");
    body.querySelectorAll("td, .olt-cell").forEach((c) => {
      if (!c.title && c.scrollWidth > c.clientWidth + 1) c.title = c.textContent;
    });
    pos.textContent = model.get("pos") || "";
    const page = model.get("page"), pages = model.get("pages");
    prev.disabled = page <= 0;
    next.disabled = page >= pages - 1;
    bar.style.display = pages > 1 || model.get("selectable") ? "" : "none";
    clear.style.display = model.get("selectable") ? "" : "none";
    prev.style.display = next.style.display = pages > 1 ? "" : "none";
    sync();
  };
  body.addEventListener("change", (ev) => {
    const b = ev.target;
    if (!(b instanceof HTMLInputElement) || !b.classList.contains("olt-check")) return;
    model.send({ toggle: Number(b.dataset.i), value: b.checked });
  });
  prev.addEventListener("click", () => model.send({ go: model.get("page") - 1 }));
  next.addEventListener("click", () => model.send({ go: model.get("page") + 1 }));
  clear.addEventListener("click", () => model.send({ clear: true }));
  model.on("change:table_html", draw);
  model.on("change:pos", draw);
  model.on("change:page", draw);
  model.on("change:checked", sync);
  draw();
}

export default { render };
