// A deployment's page: its replicas and traffic refreshed while the tab is visible, a form
// that sends a test request through the platform's proxy (/serve/NAME/..., or
// /serve/NAME@TEAM/... where several of the caller's teams have a deployment of NAME), and
// buttons that scale, update and stop it through the REST API.
"use strict";

(() => {
  const root = document.getElementById("deployment");
  if (!root) return;
  const name = root.dataset.name;
  const team = root.dataset.team; // its name is unique in its team only
  const address = root.dataset.url.replace(/\/$/, ""); // /serve/NAME or /serve/NAME@TEAM
  const resource = `/deployments/${encodeURIComponent(name)}`;
  const which = `?team=${encodeURIComponent(team)}`;

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
        const d = await gp.api("GET", `${resource}${which}`);
        gp.replaceChildren(document.getElementById("replica-rows"), ...d.replica_list.map(replicaRow));
        document.getElementById("ready").textContent = String(d.ready);
        document.getElementById("asked").textContent = String(d.replicas);
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

  // one management call: its button busy while it runs, what became of it said below
  async function manage(button, path, body, said) {
    const error = document.getElementById("manage-error");
    const status = document.getElementById("manage-status");
    error.hidden = true;
    button.disabled = true;
    try {
      const d = await gp.api("POST", `${resource}/${path}${which}`, body);
      document.getElementById("state").textContent = d.state;
      document.getElementById("asked").textContent = String(d.replicas);
      status.textContent = said(d);
      return d;
    } catch (failure) {
      gp.showError(error, failure.message);
      error.focus();
      return null;
    } finally {
      button.disabled = false;
    }
  }

  function plural(count, word) {
    return `${count} ${word}${count === 1 ? "" : "s"}`;
  }

  function scale(event) {
    event.preventDefault();
    const replicas = Number(document.getElementById("scale-replicas").value);
    manage(event.submitter || event.target.querySelector("button"), "scale", { replicas }, (d) =>
      `Scaled to ${plural(d.replicas, "replica")}.`,
    );
  }

  function update(event) {
    event.preventDefault();
    const text = document.getElementById("update-version").value.trim();
    const body = text ? { version: Number(text) } : {};
    manage(event.submitter || event.target.querySelector("button"), "update", body, (d) =>
      `Rolling to ${d.model}:${d.version}, replica by replica.`,
    );
  }

  async function stop(event) {
    if (!window.confirm(`Stop deployment ${name}? Its replicas are stopped and /serve/${name}/ answers no more.`)) return;
    const d = await manage(event.target, "stop", undefined, () => `Deployment ${name} is stopped.`);
    if (d) {
      for (const control of document.querySelectorAll("#manage button, #manage input")) control.disabled = true;
    }
  }

  const form = document.getElementById("try-form");
  if (form) form.addEventListener("submit", send);
  const scaleForm = document.getElementById("scale-form");
  if (scaleForm) scaleForm.addEventListener("submit", scale);
  const updateForm = document.getElementById("update-form");
  if (updateForm) updateForm.addEventListener("submit", update);
  const stopButton = document.getElementById("stop-deployment");
  if (stopButton) stopButton.addEventListener("click", stop);
  setTimeout(refresh, gp.refreshMs());
})();
