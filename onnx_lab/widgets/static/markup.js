// onnx_lab: the one door by which markup built in Python enters a page (the canvas, the
// tables, the report). Not a module of its own: canvas.py, _common.py's tables and the
// report put this file before the module that uses it.

// Markup from Python (the SVG, the details panel, the legend) is built with escaping
// helpers (onnx_lab/render/_html.py). As a second wall it is parsed in an inert document
// (no script runs, nothing loads there), cleaned of script-like elements, event handlers and
// links other than #anchors / data:image, and only then moved into the page. Model strings
// themselves are only ever set with textContent.
// (SVG's animate and set can set an href to a javascript: URL after the cleaning: a click
// on the link ran it; a form's button submits, navigating the page away)
const DROP = new Set(["script", "iframe", "object", "embed", "foreignobject", "base", "link",
                      "meta", "frame", "frameset", "style", "template", "animate", "set",
                      "animatemotion", "animatetransform", "discard", "form"]);
// A style that may load something: a url function, image-set('http://...') and the other image
// functions take a plain string; a CSS escape (\75 rl() spells any of them.
const STYLE_LOADS = /\\|@import|(?:url|image|image-set|cross-fade|element|src|expression)\s*\(/;
const URL_ATTRS = new Set(["href", "xlink:href", "src", "action", "formaction", "srcset"]);

function cleanTree(root) {
  for (const n of Array.from(root.querySelectorAll("*"))) {
    if (DROP.has(n.localName.toLowerCase())) { n.remove(); continue; }
    for (const a of Array.from(n.attributes)) {
      const name = a.name.toLowerCase(), v = a.value.trim().toLowerCase();
      if (name.startsWith("on")) n.removeAttribute(a.name);
      else if (URL_ATTRS.has(name) && !(v.startsWith("#") || v.startsWith("data:image/")))
        n.removeAttribute(a.name);
      else if (name === "style" && STYLE_LOADS.test(v)) n.removeAttribute(a.name);
    }
  }
  return root;
}

function setMarkup(target, markup) {
  const doc = new DOMParser().parseFromString(String(markup || ""), "text/html");
  cleanTree(doc.body);
  target.replaceChildren(...Array.from(doc.body.childNodes));
}

