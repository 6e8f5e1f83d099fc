// onnx_lab: is this widget connected to a kernel? On render it pings the kernel; a live
// widget answers at once (and runs the work it deferred until it was on screen). A widget
// restored from the notebook's saved state after a kernel restart has no kernel behind it:
// no answer comes, and the note says that this is the last view saved and to re-run the cell.
function render({ model, el }) {
  el.classList.add("oll-live");
  el.style.cssText = "padding:4px 10px;margin:4px 0;border-radius:4px;background:#fff3e0;" +
    "color:#8a4b00;font-size:12px;font-family:var(--jp-ui-font-family, sans-serif)";
  el.style.display = "none";
  let alive = false;
  model.on("msg:custom", (m) => {
    if (m && m.pong) {
      alive = true;
      el.style.display = "none";
      el.dataset.live = "1";
    }
  });
  try { model.send({ ping: 1 }); } catch (e) { /* no kernel */ }
  setTimeout(() => {
    if (alive) return;
    el.dataset.live = "0";
    el.textContent = model.get("note") || "";
    el.style.display = "";
  }, model.get("wait_ms") || 4000);
}
export default { render };
