// The scheduler settings page: an admin's change (only the knobs edited) and rollbacks, through
// the REST API, each guarded by the version the page shows (if_version), then the page again.
"use strict";

(() => {
  const root = document.getElementById("settings");
  if (!root) return;
  const version = Number(root.dataset.version);
  const status = document.getElementById("settings-status");
  const SECONDS = { "": 1, s: 1, m: 60, h: 3600, d: 86400 };
  const DURATION = /^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$/i;

  // "90", "90s", "30m", "2h", "1d" -> seconds; anything else says how to write it
  function seconds(text, name) {
    const match = DURATION.exec(text);
    if (!match) throw new Error(`${name}: '${text}' is not a duration; write it like 90s, 30m, 2h or 1d`);
    return Number(match[1]) * SECONDS[match[2].toLowerCase()];
  }

  function parse(name, text) {
    if (name === "las_thresholds") return text.split(",").filter((p) => p.trim()).map((p) => seconds(p, name));
    if (name === "packing" || name === "order") return text;
    if (name === "starvation_factor") {
      const factor = Number(text);
      if (text.trim() === "" || !Number.isFinite(factor)) throw new Error(`${name}: give a number such as 0 (off), 2 or 4`);
      return factor;
    }
    return seconds(text, name);
  }

  async function send(control, errorNode, method, path, body) {
    errorNode.hidden = true;
    control.disabled = true;
    try {
      const d = await gp.api(method, path, body);
      status.textContent = `Version ${d.version} is live.`;
      location.reload();
    } catch (failure) {
      gp.showError(errorNode, failure.message);
      errorNode.focus();
    } finally {
      control.disabled = false;
    }
  }

  async function change(event) {
    event.preventDefault();
    const form = event.currentTarget;
    const error = document.getElementById("change-error");
    const body = { reason: form.elements.reason.value.trim(), if_version: version };
    try {
      for (const field of form.querySelectorAll("[data-initial]")) {
        if (field.value.trim() !== field.dataset.initial) body[field.name] = parse(field.name, field.value.trim());
      }
      if (Object.keys(body).length === 2) throw new Error("Edit a knob first: nothing would change.");
      if (!body.reason) throw new Error("Say why: the reason is kept with the version.");
    } catch (failure) {
      gp.showError(error, failure.message);
      error.focus();
      return;
    }
    await send(form.querySelector("button[type=submit]"), error, "PUT", "/scheduler/config", body);
  }

  async function rollback(event) {
    const button = event.currentTarget;
    const error = document.getElementById("rollback-error");
    const reason = document.getElementById("rollback-reason").value.trim();
    if (!reason) {
      gp.showError(error, "Say why you roll back first (the field above the table).");
      error.focus();
      return;
    }
    const body = { version: Number(button.dataset.rollback), reason, if_version: version };
    await send(button, error, "POST", "/scheduler/config/rollback", body);
  }

  const form = document.getElementById("change-form");
  if (form) form.addEventListener("submit", change);
  for (const button of document.querySelectorAll("[data-rollback]")) button.addEventListener("click", rollback);
})();
