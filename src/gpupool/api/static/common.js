// gpupool web UI: helpers shared by every page. No framework, no third-party code.
// Data from the server only ever reaches the page as text (textContent), never as HTML.
"use strict";

const gp = (() => {
  const API = "/api/v1";
  const SAFE = new Set(["GET", "HEAD"]);

  class ApiError extends Error {
    constructor(status, error) {
      super(error.message || `the server answered ${status}`);
      this.status = status;
      this.code = error.code || `http_${status}`;
      this.details = error.details || {};
    }
  }

  function csrfToken() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }

  function toLogin() {
    const here = location.pathname + location.search;
    location.assign(`/login?next=${encodeURIComponent(here)}`);
  }

  // fetch the REST API as the signed-in user; unsafe methods carry the CSRF header.
  async function api(method, path, body, { redirectOn401 = true } = {}) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (!SAFE.has(method) && csrfToken()) headers["X-CSRF-Token"] = csrfToken();
    let response;
    try {
      response = await fetch(API + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: "same-origin",
        cache: "no-store",
      });
    } catch (error) {
      throw new ApiError(0, { code: "network", message: "cannot reach the gpupool server" });
    }
    if (response.status === 204) return null;
    let data = null;
    try {
      data = await response.json();
    } catch (error) {
      data = null;
    }
    if (!response.ok) {
      if (response.status === 401 && redirectOn401) toLogin();
      const error = (data && data.error) || {};
      throw new ApiError(response.status, error);
    }
    return data;
  }

  // el("a", {href: "/jobs/1", class: "x"}, "text", childNode): text children become text nodes.
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "style") Object.assign(node.style, value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function replaceChildren(node, ...children) {
    node.replaceChildren();
    return append(node, children);
  }

  // 85899345920 -> "80 GiB", like the server's format_bytes.
  function bytes(count) {
    if (count === null || count === undefined) return "-";
    let value = Number(count);
    for (const unit of ["B", "KiB", "MiB", "GiB", "TiB"]) {
      if (value < 1024 || unit === "TiB") {
        return Number.isInteger(value) ? `${value} ${unit}` : `${value.toFixed(1)} ${unit}`;
      }
      value /= 1024;
    }
    return `${count} B`;
  }

  // 1 -> "1", 0.5 -> "0.5", 0.333333 -> "0.333333" (like Python's :g)
  function number(value) {
    if (value === null || value === undefined) return "-";
    return String(Number(Number(value).toPrecision(6)));
  }

  function percent(fraction) {
    return Math.round(Number(fraction) * 100);
  }

  function pad(n) {
    return String(n).padStart(2, "0");
  }

  // local time, "2025-01-31 14:05:09"
  function when(epoch) {
    if (epoch === null || epoch === undefined) return "-";
    const d = new Date(epoch * 1000);
    const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
    return `${day} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function time(epoch) {
    if (epoch === null || epoch === undefined) return "-";
    const iso = new Date(epoch * 1000).toISOString();
    return el("time", { datetime: iso, "data-epoch": epoch, title: iso }, when(epoch));
  }

  // server-rendered times are UTC: show them in the browser's time zone
  function localizeTimes(root = document) {
    for (const node of root.querySelectorAll("time[data-epoch]")) {
      const epoch = Number(node.dataset.epoch);
      node.title = node.getAttribute("datetime") || "";
      node.textContent = when(epoch);
    }
  }

  const FINAL = new Set(["succeeded", "failed", "cancelled", "lost"]);

  function isFinal(status) {
    return FINAL.has(status);
  }

  // a job's status; "stopping" while a cancel asked for has not ended it (its grace period)
  function badge(status, stopping = false) {
    if (stopping && !isFinal(status)) {
      return el(
        "span",
        { class: "badge status status-stopping", title: `${status}, cancel requested: it is being stopped` },
        el("span", { class: "status-icon", "aria-hidden": "true" }),
        "stopping",
      );
    }
    return el(
      "span",
      { class: `badge status status-${status}` },
      el("span", { class: "status-icon", "aria-hidden": "true" }),
      status,
    );
  }

  // a job's GPU request, like the server's "gpus" filter
  function gpus(resources) {
    const count = Number(resources.gpus || 0);
    const memory = resources.gpu_memory_bytes;
    if (!count && !memory) return "none";
    if (!count) return `${bytes(memory)} of one GPU`;
    return number(count) + (memory ? ` · ${bytes(memory)}` : "");
  }

  // the jobs table's GPUs: gpus(), or "2 nodes × 4 GPUs · torch" (the server's "request")
  function request(spec) {
    const nodes = Number(spec.nodes || 1);
    if (nodes === 1 && !spec.launcher) return gpus(spec.resources);
    const count = Number(spec.resources.gpus || 0);
    const memory = spec.resources.gpu_memory_bytes;
    let each = memory ? gpus(spec.resources) : "no GPU";
    if (count) each = `${number(count)} GPU${count > 1 ? "s" : ""}${memory ? ` · ${bytes(memory)}` : ""}`;
    const text = `${nodes} node${nodes === 1 ? "" : "s"} × ${each}`;
    return spec.launcher ? `${text} · ${spec.launcher}` : text;
  }

  function code(text) {
    return el("code", { class: "code" }, text);
  }

  // "in 25 min", "now", "3 h 05 min ago": how far a time is from now
  function fromNow(epoch) {
    const seconds = Math.round(Number(epoch) - Date.now() / 1000);
    if (Math.abs(seconds) < 30) return "now";
    const left = Math.abs(seconds);
    let text;
    if (left < 3600) text = `${Math.max(1, Math.round(left / 60))} min`;
    else if (left < 86400) {
      const minutes = Math.round(left / 60);
      const rest = minutes % 60;
      text = `${Math.floor(minutes / 60)} h` + (rest ? ` ${pad(rest)} min` : "");
    } else {
      const hours = Math.round(left / 3600);
      text = `${Math.floor(hours / 24)} d` + (hours % 24 ? ` ${hours % 24} h` : "");
    }
    return seconds > 0 ? `in ${text}` : `${text} ago`;
  }

  // an estimated start: "about <time> (in 25 min)", or "unknown (why)"
  function eta(at, unknown) {
    if (at === null || at === undefined) {
      return el(
        "span",
        { class: "eta unknown" },
        "unknown ",
        el("span", { class: "muted" }, `(${unknown || "no estimate yet"})`),
      );
    }
    return el(
      "span",
      { class: "eta" },
      el("span", { class: "eta-label" }, "about"),
      " ",
      time(at),
      " ",
      el("span", { class: "muted" }, `(${fromNow(at)})`),
    );
  }

  // what else stands in a waiting job's way, as a list
  function blockers(items) {
    if (!items || !items.length) return el("span", { class: "muted" }, "nothing else");
    return el(
      "ul",
      { class: "blockers" },
      items.map((item) => el("li", {}, item)),
    );
  }

  // the "Live" indicator at the top of a page
  function live(text, state = "") {
    const node = document.getElementById("live");
    if (!node) return;
    node.textContent = text;
    node.classList.toggle("error", state === "error");
    node.classList.toggle("idle", state === "idle");
  }

  // Run task every ms milliseconds (after the previous run ended), not while the tab is hidden.
  function every(ms, task) {
    let timer = null;
    let running = false;
    let again = false;
    let stopped = false;

    async function tick() {
      clearTimeout(timer);
      if (stopped) return;
      if (running) {
        again = true;
        return;
      }
      if (document.hidden) {
        timer = setTimeout(tick, ms);
        return;
      }
      running = true;
      try {
        await task();
        if (!stopped) live(`Live: updated ${when(Date.now() / 1000).slice(11)}`);
      } catch (error) {
        if (error.status !== 401 && !stopped) live(`Not updated: ${error.message}; retrying`, "error");
      } finally {
        running = false;
        if (!stopped) timer = setTimeout(tick, again ? 0 : ms);
        again = false;
      }
    }

    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && !stopped) tick();
    });
    timer = setTimeout(tick, ms);
    return {
      now: tick,
      stop() {
        stopped = true;
        clearTimeout(timer);
      },
    };
  }

  function refreshMs() {
    return Number(document.body.dataset.refreshMs) || 2000;
  }

  function showError(node, message) {
    node.textContent = message;
    node.hidden = false;
  }

  function signOutButton() {
    const button = document.getElementById("sign-out");
    if (!button) return;
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        await api("DELETE", "/session", undefined, { redirectOn401: false });
      } catch (error) {
        // an ended session is signed out already
      }
      location.assign("/login");
    });
  }

  // The banner of base.html, shown while /health says the pool's Ray cluster is
  // unreachable (health is public: the sign-in page shows it too). Looked at on load, then
  // every refresh period while the tab is visible; a failed look leaves the banner as it is.
  function watchCluster() {
    const banner = document.getElementById("cluster-banner");
    if (!banner) return;
    async function look() {
      if (!document.hidden) {
        try {
          const response = await fetch(`${API}/health`, { cache: "no-store" });
          const health = response.ok ? await response.json() : null;
          if (health) banner.hidden = health.cluster !== "unreachable";
        } catch (error) {
          // the server itself is away: the page's own "Not updated" line says so
        }
      }
      setTimeout(look, refreshMs());
    }
    look();
  }

  document.addEventListener("DOMContentLoaded", () => {
    localizeTimes();
    signOutButton();
    watchCluster();
  });

  return {
    ApiError,
    api,
    el,
    append,
    replaceChildren,
    bytes,
    number,
    percent,
    when,
    time,
    localizeTimes,
    isFinal,
    badge,
    gpus,
    request,
    code,
    fromNow,
    eta,
    blockers,
    live,
    every,
    refreshMs,
    showError,
    toLogin,
  };
})();
