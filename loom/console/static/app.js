// Shared helpers of the console pages: DOM building (text only, never HTML from data),
// API calls, formatting. No framework, no build step.
"use strict";

const Loom = (() => {
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // The session token comes in the URL's fragment (never sent to any server), moves to this
  // origin's sessionStorage (other ports and sites cannot read it) and leaves the address bar.
  const TOKEN_KEY = "loom-console-token";
  function adoptToken() {
    const given = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (!given) return false;
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(given[1]));
    history.replaceState(null, "", location.pathname + location.search);
    return true;
  }
  adoptToken();
  // The URL pasted into a tab already showing this page changes only the fragment: no new load.
  window.addEventListener("hashchange", () => { if (adoptToken()) location.reload(); });

  async function api(method, path, body) {
    // No cookie: the token goes in a header only this origin's script can add.
    const init = {
      method,
      credentials: "omit",
      headers: { accept: "application/json", "x-loom-console-token": sessionStorage.getItem(TOKEN_KEY) || "" },
    };
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let answer;
    try {
      answer = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, "unreachable", "the console does not answer: is `loom up` (or `loom console`) still running?");
    }
    const text = await answer.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (err) { data = null; }
    if (!answer.ok) {
      const e = (data && data.error) || {};
      const fallback = answer.status === 401 ? "no console session in this tab: open the URL (with #token=...) that `loom up` printed" : text.slice(0, 200);
      throw new ApiError(answer.status, e.code || "http_" + answer.status, e.message || fallback);
    }
    return data;
  }

  function say(message, bad) {
    const box = document.getElementById("status");
    box.textContent = message || "";
    box.className = bad ? "bad" : "";
  }

  function fail(err) {
    say(err instanceof ApiError ? `${err.message} (${err.code}, HTTP ${err.status})` : String(err), true);
  }

  const pad = (n) => String(n).padStart(2, "0");

  function when(epoch) {
    if (epoch === null || epoch === undefined) return "";
    const d = new Date(epoch * 1000);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  // A stamp in short: the time alone when it falls on `sameDayAs`'s date (or today's), else the date too.
  function whenShort(epoch, sameDayAs) {
    if (epoch === null || epoch === undefined) return "";
    const full = when(epoch);
    const ref = when(sameDayAs ?? Date.now() / 1000);
    return full.slice(0, 10) === ref.slice(0, 10) ? full.slice(11) : full;
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
    if (seconds < 1) return `${Math.round(seconds * 1000)}ms`;
    if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)}s`;
    const units = [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]];
    const out = [];
    let rest = Math.round(seconds);
    for (const [unit, size] of units) {
      if (rest >= size) { out.push(`${Math.floor(rest / size)}${unit}`); rest %= size; }
      if (out.length === 2) break;
    }
    return out.join(" ");
  }

  const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED", "COMPENSATED", "COMPENSATION_FAILED"]);

  // An execution's age on the reader's wall clock. Its stamps are on the functions' clock, which
  // local time travel moves ahead: each move ({at_epoch: wall clock, offset_seconds}) starts a
  // stretch of wall time with its own offset, and a stamp maps back through the stretch it fell in.
  function wallAge(createdEpoch, wallNow, moves) {
    if (createdEpoch === null || createdEpoch === undefined) return null;
    const stretches = [{ from: -Infinity, offset: 0 }, ...(moves || []).map((m) => ({ from: m.at_epoch, offset: m.offset_seconds }))];
    for (let i = stretches.length - 1; i >= 0; i--) {
      const wall = createdEpoch - stretches[i].offset;
      const to = i + 1 < stretches.length ? stretches[i + 1].from : Infinity;
      if (wall >= stretches[i].from && wall < to) return Math.max(0, wallNow - wall);
    }
    return Math.max(0, wallNow - createdEpoch);
  }

  // A local stack's clock moves (none when deployed), read at most every 10 s.
  let movesRead = { at: 0, moves: [] };
  async function clockMoves() {
    if (Date.now() - movesRead.at < 10000) return movesRead.moves;
    const me = await console_();
    const moves = me.local ? (await api("GET", "/local/clock")).moves || [] : [];
    movesRead = { at: Date.now(), moves };
    return moves;
  }

  function errorLine(err) {
    if (!err) return "";
    if (typeof err !== "object") return String(err);
    const where = err.where ? ` (${err.where})` : "";
    return `${err.type || err.code || "Error"}: ${err.message || ""}${where}`;
  }

  function badge(status) {
    const key = String(status || "").toLowerCase().replace(/[^a-z_]/g, "_");
    return h("span", { class: `badge s-${key}` }, String(status || "").toLowerCase().replaceAll("_", " "));
  }

  function fold(label, value, open) {
    return h("details", { open: open || false }, h("summary", {}, label), h("pre", {}, JSON.stringify(value, null, 2)));
  }

  function copyButton(text, label) {
    return h("button", {
      type: "button",
      class: "small",
      "aria-label": `Copy ${label || text}`,
      onclick: async (event) => {
        try {
          await navigator.clipboard.writeText(text);
          say(`copied ${text}`);
        } catch (err) {
          say("the browser refused the clipboard; select the text instead", true);
        }
        event.preventDefault();
      },
    }, "Copy");
  }

  function executionLink(id) {
    return h("a", { href: `/executions/${encodeURIComponent(id)}` }, id);
  }

  function parseJson(text, what) {
    try {
      const value = JSON.parse(text);
      if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("not an object");
      return value;
    } catch (err) {
      throw new Error(`${what} must be a JSON object, like {"approved": true}`);
    }
  }

  // Refresh every `ms` while `enabled()` says so; a slow answer never stacks up calls.
  function every(ms, enabled, fn) {
    let busy = false;
    setInterval(async () => {
      if (busy || !enabled() || document.hidden) return;
      busy = true;
      try { await fn(); } finally { busy = false; }
    }, ms);
  }

  let info = null;
  async function console_() {
    if (!info) info = await api("GET", "/console.json");
    return info;
  }

  async function init() {
    const page = document.body.dataset.page;
    for (const link of document.querySelectorAll("[data-nav]")) {
      if (link.dataset.nav === page || (page === "execution" && link.dataset.nav === "executions")) link.setAttribute("aria-current", "page");
    }
    try {
      const me = await console_();
      document.getElementById("target").textContent = `${me.mode} stack: ${me.target}`;
      if (me.local) document.querySelector("[data-nav=local]").hidden = false;
    } catch (err) { fail(err); }
  }

  return { h, api, ApiError, say, fail, when, whenShort, duration, TERMINAL, wallAge, clockMoves, errorLine, badge, fold, copyButton, executionLink, parseJson, every, info: console_, init };
})();

Loom.init();
