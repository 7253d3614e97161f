// Job page: live output through Server-Sent Events (/logs/stream), the job itself polled
// every 2 s until it ends (status, events, placement, attempts), and the Cancel button.
"use strict";

(() => {
  const { el } = gp;
  const LOG_LIMIT = 2000000; // characters kept in the page; the CLI reads everything

  function fact(term, value) {
    return el("div", {}, el("dt", {}, term), el("dd", {}, value));
  }

  function drawStatus(job) {
    const line = document.getElementById("status-line");
    gp.replaceChildren(
      line,
      gp.badge(job.status),
      job.position ? el("span", { class: "position" }, `#${job.position} in the team's queue`) : null,
      job.cancel_requested && !gp.isFinal(job.status)
        ? el("span", { class: "badge warn" }, "cancel requested")
        : null,
    );
    gp.replaceChildren(
      document.getElementById("status-message"),
      job.reason ? gp.code(job.reason) : null,
      job.reason ? " " : null,
      job.message || "",
    );
  }

  function drawFacts(job) {
    gp.replaceChildren(
      document.getElementById("job-facts"),
      fact("User", job.user),
      fact("Team", job.team),
      fact("Priority", String(job.priority)),
      fact("Submitted", gp.time(job.submitted_at)),
      fact("Started", gp.time(job.started_at)),
      fact("Ended", gp.time(job.ended_at)),
      fact("Exit code", job.exit_code === null ? "-" : String(job.exit_code)),
      fact("Attempts", String(job.attempts)),
      fact("Preemptions", String(job.preemptions)),
      fact("Attained", `${(job.attained_gpu_seconds / 3600).toFixed(2)} GPU-hours`),
      fact("Checkpoint", gp.time(job.checkpoint_at)),
    );
  }

  function drawEvents(events) {
    const list = document.getElementById("events");
    if (list.children.length === events.length) return;
    gp.replaceChildren(
      list,
      events.map((event) =>
        el(
          "li",
          {},
          el("span", { class: "event-time" }, gp.time(event.at)),
          " ",
          gp.code(event.reason),
          " ",
          el("span", { class: "event-message" }, event.message),
        ),
      ),
    );
  }

  function drawPlacement(job) {
    const box = document.getElementById("placement");
    const placement = job.placement;
    if (!placement) {
      const yet = job.status === "pending" ? " yet" : "";
      gp.replaceChildren(box, el("p", { class: "muted" }, `Not placed${yet}.`));
      return;
    }
    const gpus = placement.gpus.length
      ? el(
          "ul",
          { class: "plain" },
          placement.gpus.map((gpu) =>
            el(
              "li",
              {},
              gp.code(gpu.uuid),
              ` · ${gp.number(gpu.share)} GPU`,
              gpu.memory_bytes ? ` · ${gp.bytes(gpu.memory_bytes)}` : "",
            ),
          ),
        )
      : "none";
    gp.replaceChildren(
      box,
      el(
        "dl",
        { class: "spec" },
        el("dt", {}, "Node"),
        el("dd", {}, placement.node),
        el("dt", {}, "GPUs"),
        el("dd", {}, gpus),
        el("dt", {}, "CPUs"),
        el("dd", {}, gp.number(placement.cpus)),
        el("dt", {}, "Memory"),
        el("dd", {}, placement.memory_bytes ? gp.bytes(placement.memory_bytes) : "not reserved"),
      ),
    );
  }

  function drawAttempts(attempts) {
    const box = document.getElementById("attempts");
    if (!attempts.length) {
      gp.replaceChildren(box, el("p", { class: "muted" }, "None yet."));
      return;
    }
    const head = ["#", "Node", "Status", "Exit", "Started"].map((t) => el("th", { scope: "col" }, t));
    const rows = attempts.map((a) =>
      el(
        "tr",
        {},
        el("td", {}, String(a.number)),
        el("td", {}, a.node),
        el("td", {}, a.status),
        el("td", {}, a.exit_code === null ? "-" : String(a.exit_code)),
        el("td", {}, gp.time(a.started_at)),
      ),
    );
    gp.replaceChildren(
      box,
      el("table", { class: "table compact" }, el("thead", {}, el("tr", {}, head)), el("tbody", {}, rows)),
    );
  }

  // -- why it waits ----------------------------------------------------------------------

  function drawWhy(why, team) {
    const card = document.getElementById("why");
    card.hidden = !why || why.status !== "pending";
    if (card.hidden) return;
    gp.replaceChildren(document.getElementById("why-reason"), gp.code(why.code), " ", why.message);
    gp.replaceChildren(
      document.getElementById("why-position"),
      why.position
        ? `#${why.position} in team ${team}'s queue (#1 starts next)`
        : "not placed in a queue yet",
    );
    gp.replaceChildren(document.getElementById("why-blockers"), gp.blockers(why.blockers));
    gp.replaceChildren(document.getElementById("why-eta"), gp.eta(why.eta, why.eta_unknown));
    const estimate = why.estimate || {};
    const lines = [
      estimate.duration_text ? `this job runs ${estimate.duration_text}` : null,
      ...(estimate.assumes || []),
    ].filter(Boolean);
    gp.replaceChildren(
      document.getElementById("why-assumes"),
      lines.map((line) => el("li", {}, line)),
    );
  }

  // -- the log ----------------------------------------------------------------------------

  function logState(text, state = "") {
    const node = document.getElementById("log-state");
    node.textContent = text;
    node.classList.toggle("error", state === "error");
    node.classList.toggle("idle", state === "idle");
  }

  function makeLog(pre) {
    let kept = 0;
    let trimmed = false;
    return (text) => {
      const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
      pre.append(document.createTextNode(text));
      kept += text.length;
      while (kept > LOG_LIMIT && pre.firstChild) {
        const first = pre.firstChild;
        kept -= first.textContent.length;
        first.remove();
        trimmed = true;
      }
      if (trimmed && !(pre.firstChild && pre.firstChild.className === "log-note")) {
        const note = "[earlier output is not shown here: read all of it with 'gpupool logs']\n";
        pre.prepend(el("span", { class: "log-note" }, note));
      }
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    };
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("job");
    const id = Number(root.dataset.jobId);
    const cancel = document.getElementById("cancel");
    const actionError = document.getElementById("action-error");
    const append = makeLog(document.getElementById("log"));
    let ended = root.dataset.final === "true";

    function drawJob(job) {
      drawStatus(job);
      drawFacts(job);
      drawEvents(job.events);
      drawPlacement(job);
      drawAttempts(job.attempts_detail);
      const final = gp.isFinal(job.status);
      if (cancel) {
        cancel.hidden = final;
        if (job.cancel_requested && !final) {
          cancel.disabled = true;
          cancel.textContent = "Cancelling…";
        }
      }
      return final;
    }

    const poll = gp.every(gp.refreshMs(), async () => {
      const job = await gp.api("GET", `/jobs/${id}`);
      const why = job.status === "pending" ? await gp.api("GET", `/jobs/${id}/why`) : null;
      drawWhy(why, job.team);
      if (drawJob(job)) {
        poll.stop();
        gp.live(`Ended: ${job.status}`, "idle");
      }
    });
    if (ended) {
      poll.stop();
      gp.live("Ended", "idle");
    }

    // live output: offset is how far we have read, so a reconnect resumes without repeats
    let offset = 0;
    let finished = false;
    let failures = 0;
    function connect() {
      const source = new EventSource(`/api/v1/jobs/${id}/logs/stream?offset=${offset}`);
      source.addEventListener("open", () => {
        failures = 0;
        logState(ended ? "Reading the output…" : "Streaming live output");
      });
      source.addEventListener("log", (event) => {
        const chunk = JSON.parse(event.data);
        if (chunk.offset !== offset) return;
        append(chunk.text);
        offset = chunk.next_offset;
      });
      source.addEventListener("status", (event) => {
        const status = JSON.parse(event.data);
        if (!ended) {
          if (gp.isFinal(status.status)) ended = true;
          poll.now();
        }
        if (status.status === "pending") logState("Waiting for the job to start…", "idle");
        else if (!gp.isFinal(status.status)) logState("Streaming live output");
      });
      source.addEventListener("end", () => {
        finished = true;
        source.close();
        document.getElementById("log").classList.add("ended");
        logState("End of output: the job has ended.", "idle");
      });
      source.addEventListener("error", () => {
        source.close();
        if (finished) return;
        failures += 1;
        logState("The output stream was interrupted: reconnecting…", "error");
        if (!ended) poll.now(); // also sends a signed-out user to the sign-in page
        setTimeout(connect, Math.min(10000, 500 * 2 ** Math.min(failures, 5)));
      });
    }
    connect();

    if (cancel) {
      cancel.addEventListener("click", async () => {
        if (!window.confirm(`Cancel job #${id}? A running job is stopped.`)) return;
        actionError.hidden = true;
        cancel.disabled = true;
        cancel.textContent = "Cancelling…";
        try {
          const job = await gp.api("POST", `/jobs/${id}/cancel`);
          drawStatus(job);
          if (gp.isFinal(job.status)) cancel.hidden = true;
          poll.now();
        } catch (error) {
          gp.showError(actionError, error.message);
          actionError.focus();
          cancel.disabled = false;
          cancel.textContent = "Cancel job";
        }
      });
    }
  });
})();
