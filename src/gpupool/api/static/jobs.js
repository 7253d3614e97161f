// Jobs page: polls /api/v1/jobs with the page's filter; redraws the rows that changed.
"use strict";

(() => {
  const { el } = gp;
  const STATUSES = {
    all: [],
    active: ["pending", "starting", "running"],
    ended: ["succeeded", "failed", "cancelled", "lost"],
  };
  const drawn = new Map(); // job id -> JSON of the drawn row

  function query(form) {
    const params = new URLSearchParams();
    for (const status of STATUSES[form.elements.show.value] || []) params.append("status", status);
    if (form.elements.mine.checked) {
      params.set("user", document.body.dataset.user);
    }
    return params;
  }

  // a redrawn row keeps its tick for the "Compare" action (the form sends ids=3&ids=4)
  function comparePick(id) {
    const ticked = document.querySelector(`input.compare-pick[value="${Number(id)}"]`);
    const attrs = { type: "checkbox", class: "compare-pick", name: "ids", value: Number(id) };
    const label = { form: "compare-form", "aria-label": `Compare job #${id}` };
    return el("input", { ...attrs, ...label, checked: Boolean(ticked && ticked.checked) });
  }

  function row(job) {
    const reason = el("td", { class: "reason" });
    if (job.position) reason.append(el("span", { class: "position" }, `#${job.position} in queue`), " ");
    if (job.reason) reason.append(gp.code(job.reason), " ");
    if (job.message) reason.append(job.message);
    return el(
      "tr",
      { "data-id": job.id },
      el("td", {}, comparePick(job.id), el("a", { href: `/jobs/${Number(job.id)}` }, `#${job.id}`)),
      el("td", {}, job.name || ""),
      el("td", {}, job.user),
      el("td", {}, job.team),
      el("td", {}, gp.badge(job.status, job.cancel_requested)),
      el("td", {}, gp.request(job.spec)),
      el("td", {}, job.placement ? job.placement.node : "-"),
      el("td", {}, gp.time(job.submitted_at)),
      reason,
    );
  }

  function draw(jobs) {
    const body = document.getElementById("job-rows");
    if (!jobs.length) {
      drawn.clear();
      const link = el("a", { href: "/jobs/new" }, "Submit one");
      const cell = el("td", { colspan: 9 }, "No jobs here yet. ", link, ".");
      gp.replaceChildren(body, el("tr", { class: "empty-row" }, cell));
      return;
    }
    const existing = new Map([...body.querySelectorAll("tr[data-id]")].map((tr) => [tr.dataset.id, tr]));
    const rows = jobs.map((job) => {
      const key = JSON.stringify(job);
      const id = String(job.id);
      const current = existing.get(id);
      if (current && drawn.get(id) === key) return current;
      drawn.set(id, key);
      const fresh = row(job);
      if (current) current.replaceWith(fresh);
      return fresh;
    });
    const inPlace = rows.length === body.children.length && rows.every((tr, i) => body.children[i] === tr);
    if (!inPlace) gp.replaceChildren(body, rows);
    for (const id of drawn.keys()) if (!jobs.some((job) => String(job.id) === id)) drawn.delete(id);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("filters");
    let generation = 0; // a filter change makes an answer in flight stale
    const poll = gp.every(gp.refreshMs(), async () => {
      const asked = generation;
      const jobs = await gp.api("GET", `/jobs?${query(form)}`);
      if (asked === generation) draw(jobs);
    });
    // the filters apply at once, without reloading the page
    document.getElementById("apply-filters").hidden = true;
    form.addEventListener("change", () => {
      const params = new URLSearchParams();
      if (form.elements.show.value !== "all") params.set("show", form.elements.show.value);
      if (form.elements.mine.checked) params.set("mine", "1");
      const search = params.toString();
      history.replaceState(null, "", search ? `/jobs?${search}` : "/jobs");
      generation += 1;
      poll.now();
    });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      poll.now();
    });
  });
})();
