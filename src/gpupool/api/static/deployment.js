// A deployment's page: its replicas and traffic refreshed while the tab is visible, and a
// form that sends a test request through the platform's proxy (/serve/NAME/..., or
// /serve/NAME@TEAM/... where several of the caller's teams have a deployment of NAME).
"use strict";

(() => {
  const root = document.getElementById("deployment");
  if (!root) return;
  const name = root.dataset.name;
  const team = root.dataset.team; // its name is unique in its team only
  const address = root.dataset.url.replace(/\/$/, ""); // /serve/NAME or /serve/NAME@TEAM

  function cell(text) {
    return gp.el("td", {}, text === null || text === undefined ? "-" : String(text));
  }

  function replicaRow(r) {
    const job = r.job_id ? gp.el("a", { href: `/jobs/${r.job_id}` }, String(r.job_id)) : "-";
    const state = gp.el("td", { class: "replica-state" }, r.state);
    return gp.el(
      "tr",
      { "data-replica": String(r.id) },
      cell(r.id),
      cell(r.version),
      gp.el("td", {}, job),
      cell(r.node),
      state,
      cell(r.restarts),
      cell(r.failures),
      cell(r.traffic.requests),
      cell(r.traffic.p50_ms),
      gp.el("td", { class: "replica-why" }, why(r)),
    );
  }

  function why(r) {
    if (r.waiting_reason) return `${r.waiting_reason}: ${r.waiting_message || ""}`;
    return r.message || "";
  }

  function latency(traffic) {
    if (traffic.p50_ms === null) return "-";
    return `p50 ${traffic.p50_ms} ms, p99 ${traffic.p99_ms} ms`;
  }

  async function refresh() {
    if (!document.hidden) {
      try {
        const d = await gp.api(
          "GET",
          `/deployments/${encodeURIComponent(name)}?team=${encodeURIComponent(team)}`,
        );
        gp.replaceChildren(document.getElementById("replica-rows"), ...d.replica_list.map(replicaRow));
        document.getElementById("ready").textContent = String(d.ready);
        document.getElementById("state").textContent = d.state;
        document.getElementById("message").textContent = d.message || "-";
        document.getElementById("requests").textContent =
          `${d.traffic.requests} (${d.traffic.errors} failed)`;
        document.getElementById("latency").textContent = latency(d.traffic);
      } catch (error) {
        // stopped or gone: the page stays as last seen
      }
    }
    setTimeout(refresh, gp.refreshMs());
  }

  async function send(event) {
    event.preventDefault();
    const method = document.getElementById("try-method").value;
    let path = document.getElementById("try-path").value.trim() || "/";
    if (!path.startsWith("/")) path = `/${path}`;
    const status = document.getElementById("try-status");
    const answer = document.getElementById("try-answer");
    const options = { method, credentials: "same-origin", cache: "no-store", headers: {} };
    if (method !== "GET") {
      options.body = document.getElementById("try-body").value;
      options.headers["Content-Type"] = "application/json";
    }
    status.textContent = "sending...";
    answer.textContent = "";
    const began = performance.now();
    try {
      const response = await fetch(`${address}${path}`, options);
      const text = await response.text();
      const ms = Math.round(performance.now() - began);
      status.textContent = `${response.status} ${response.statusText} in ${ms} ms`;
      answer.textContent = text;
    } catch (error) {
      status.textContent = "the request failed: the server did not answer";
    }
  }

  const form = document.getElementById("try-form");
  if (form) form.addEventListener("submit", send);
  setTimeout(refresh, gp.refreshMs());
})();
