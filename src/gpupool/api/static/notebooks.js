// gpupool web UI: the notebooks' pages. Start a notebook (the list's form), stop or resume
// one (its page), and follow its state while it changes.
"use strict";

(() => {
  const error = document.getElementById("action-error");

  function fail(problem) {
    gp.showError(error, problem.message);
  }

  // the list: the start form sends the notebook's request, then opens its page
  const form = document.getElementById("start-form");
  if (form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const name = form.elements.name.value.trim();
      const gpus = Number(form.elements.gpus.value.trim() || "0");
      const body = { resources: gpus > 0 ? { gpus } : {} };
      if (name) body.name = name;
      if (form.elements.team) body.team = form.elements.team.value;
      try {
        const started = await gp.api("POST", "/notebooks", body);
        location.assign(`/notebooks/${started.id}`);
      } catch (problem) {
        fail(problem);
      }
    });
  }

  // a notebook's page: its buttons, and a reload when its state changes
  const page = document.getElementById("notebook");
  if (!page) return;
  const id = page.dataset.notebookId;
  for (const [button, action] of [["stop", "stop"], ["resume", "resume"]]) {
    const found = document.getElementById(button);
    if (!found) continue;
    found.addEventListener("click", async () => {
      found.disabled = true;
      try {
        await gp.api("POST", `/notebooks/${id}/${action}`);
        location.reload();
      } catch (problem) {
        found.disabled = false;
        fail(problem);
      }
    });
  }
  gp.every(gp.refreshMs(), async () => {
    const shown = await gp.api("GET", `/notebooks/${id}`);
    if (shown.state !== page.dataset.state) location.reload();
  });
})();
