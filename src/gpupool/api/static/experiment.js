// An experiment's page: buttons that pause, resume and stop it and a form that registers the
// best trial's outputs as a model version, through the REST API; while the experiment has not
// ended, the page is drawn again (by the server, charts included) once its trials moved on.
"use strict";

(() => {
  const root = document.getElementById("experiment");
  if (!root) return;
  const resource = `/experiments/${Number(root.dataset.id)}`;
  const name = root.dataset.name;
  const team = root.dataset.team;
  const error = document.getElementById("manage-error");
  const status = document.getElementById("manage-status");
  const QUIET_MS = 5000; // drawn again at most this often, so the page stays readable
  const loadedAt = Date.now();
  let busy = false; // a button's call or a registration runs: the page stays as it is
  const seen = JSON.stringify(JSON.parse(root.dataset.seen)); // as the page was drawn

  // one call of a button or the form: the control busy while it runs, its outcome said below
  async function act(control, method, path, body, said) {
    error.hidden = true;
    control.disabled = true;
    busy = true;
    try {
      const d = await gp.api(method, path, body);
      status.textContent = said(d);
      return d;
    } catch (failure) {
      gp.showError(error, failure.message);
      error.focus();
      return null;
    } finally {
      control.disabled = false;
      busy = false;
    }
  }

  async function steer(event) {
    const button = event.currentTarget;
    const action = button.dataset.action;
    if (action === "stop" && !window.confirm(`Stop experiment ${name}? Its trials that have not ended are cancelled.`)) return;
    const d = await act(button, "POST", `${resource}/${action}`, undefined, (e) => `Experiment ${name} is ${e.status}.`);
    if (d) location.reload();
  }

  async function register(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const model = document.getElementById("model-name").value.trim();
    const body = { job_id: Number(form.dataset.job), team };
    const path = `/models/${encodeURIComponent(model)}/versions`;
    const d = await act(form.querySelector("button"), "POST", path, body, (v) => `Registered ${v.name}:${v.version}. `);
    if (d) {
      const href = `/models/${encodeURIComponent(d.team)}/${encodeURIComponent(d.name)}?version=${d.version}`;
      status.append(gp.el("a", { href, id: "registered" }, `Open ${d.name}:${d.version}`));
    }
  }

  // what, once changed, is worth drawing the page again for: the list experiment_pages.py's
  // fingerprint() gave the page (data-seen), built here from the REST API's answer
  function signature(d) {
    let time = 0;
    let value = 0;
    for (const t of d.trial_list) {
      time += t.time === null ? 0 : t.time;
      value += t.value === null ? 0 : t.value;
    }
    const counts = Object.keys(d.trials).sort().map((state) => d.trials[state]);
    const best = d.best ? [d.best.trial, d.best.value] : [null, null];
    return JSON.stringify([d.status, ...best, counts, time, value]);
  }

  function typing() {
    const active = document.activeElement;
    return active && (active.tagName === "INPUT" || active.tagName === "TEXTAREA");
  }

  async function look() {
    const d = await gp.api("GET", resource);
    const current = signature(d) === seen;
    root.dataset.current = String(current); // the page shows what the server holds
    if (!current && !busy && !typing() && Date.now() - loadedAt >= QUIET_MS) location.reload();
  }

  for (const button of document.querySelectorAll("#manage [data-action]")) button.addEventListener("click", steer);
  const form = document.getElementById("register-form");
  if (form) form.addEventListener("submit", register);
  if (root.dataset.final !== "true") {
    const poll = gp.every(gp.refreshMs(), look);
    poll.now();
  }
})();
