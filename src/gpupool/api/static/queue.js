// Queue page: polls /api/v1/jobs/queue every 5 s and redraws the teams' queues.
"use strict";

(() => {
  const { el } = gp;
  const EVERY_MS = 5000; // estimates are recomputed every few seconds; no use asking faster
  let drawn = "";

  function jobRow(job) {
    return el(
      "tr",
      { "data-id": job.id },
      el("td", { class: "position" }, job.position ? `#${job.position}` : "-"),
      el(
        "td",
        {},
        el("a", { href: `/jobs/${Number(job.id)}` }, `#${job.id}`),
        job.name ? [" ", el("span", { class: "muted" }, job.name)] : null,
      ),
      el("td", {}, job.user),
      el("td", {}, gp.gpus({ gpus: job.gpus, gpu_memory_bytes: job.gpu_memory_bytes })),
      el("td", { class: "reason" }, gp.code(job.code), " ", job.message),
      el("td", {}, gp.blockers(job.blockers)),
      el("td", {}, gp.eta(job.eta, job.eta_unknown)),
    );
  }

  function teamSection(team, index) {
    const head = ["Position", "Job", "User", "GPUs", "Why it waits", "Also in the way", "Estimated start"];
    const id = `queue-${index + 1}`;
    return el(
      "section",
      { class: "card team-queue", "aria-labelledby": id, "data-team": team.team },
      el("h2", { id }, `Team ${team.team} `, el("span", { class: "muted count" }, `${team.jobs.length} waiting`)),
      el(
        "div",
        { class: "table-wrap flat" },
        el(
          "table",
          { class: "table queue-table" },
          el("caption", { class: "visually-hidden" }, `Waiting jobs of team ${team.team}, in queue order`),
          el("thead", {}, el("tr", {}, head.map((text) => el("th", { scope: "col" }, text)))),
          el("tbody", {}, team.jobs.map(jobRow)),
        ),
      ),
    );
  }

  function emptyState() {
    return el(
      "section",
      { class: "card empty-state" },
      el("h2", {}, "No job is waiting"),
      el(
        "p",
        {},
        "Every job submitted so far has started (or ended). A job appears here when it has to wait for GPUs.",
      ),
      el("p", {}, el("a", { href: "/jobs" }, "See all jobs"), " · ", el("a", { href: "/jobs/new" }, "Submit a job")),
    );
  }

  function draw(queue) {
    const key = JSON.stringify([queue.waiting, queue.teams]);
    if (key === drawn) return;
    drawn = key;
    const shown = queue.teams.reduce((sum, team) => sum + team.jobs.length, 0);
    const waiting = queue.waiting;
    const teams = queue.teams.length;
    gp.replaceChildren(
      document.getElementById("queue-summary"),
      el("strong", {}, String(waiting)),
      ` job${waiting === 1 ? "" : "s"} waiting in `,
      el("strong", {}, String(teams)),
      ` team${teams === 1 ? "" : "s"}`,
      shown < waiting ? ` (the first ${shown} in queue order are shown)` : "",
    );
    const box = document.getElementById("queue");
    gp.replaceChildren(box, teams ? queue.teams.map(teamSection) : emptyState());
  }

  document.addEventListener("DOMContentLoaded", () => {
    gp.every(EVERY_MS, async () => draw(await gp.api("GET", "/jobs/queue")));
  });
})();
