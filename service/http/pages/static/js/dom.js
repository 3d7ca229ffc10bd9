// Building the DOM without markup strings: every piece of text goes in as a text node
// (textContent), never parsed as HTML, so a name such as "<script>" stays text.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") el.textContent = String(value);
    else if (key === "class") el.setAttribute("class", value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h("button", {type: "button", onclick: f}, "Roll"). */
export function h(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, the same way. */
export function s(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function $(selector, root = document) {
  return root.querySelector(selector);
}

export function $$(selector, root = document) {
  return Array.from(root.querySelectorAll(selector));
}

/** Replace an element's children, keeping the element (and its place in the page). */
export function fill(el, ...children) {
  el.replaceChildren();
  return build(el, {}, children);
}

export function show(el, shown) {
  el.hidden = !shown;
}

/** Percent with one decimal: 0.1234 -> "12.3 %". */
export function percent(p) {
  return `${(100 * p).toFixed(1)} %`;
}

/** A short English list: ["a", "b", "c"] -> "a, b and c". */
export function andList(items) {
  if (items.length <= 1) return items.join("");
  return `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}
