// Job page: live output through Server-Sent Events (/logs/stream), drawn by terminal.js, one
// attempt at a time (the newest, following each new attempt, unless one is picked); the job
// itself polled every 2 s until it ends (status, events, placement, attempts); Cancel. A log
// whose lines start with "[rank N] " (or "[task N] ": a job over several nodes) gets a picker
// of one rank's lines: the stream then sends only those, its offsets still the whole log's.
"use strict";

(() => {
  const { el } = gp;
  const LOG_LIMIT = 2000000; // characters kept in the page; the CLI reads everything
  const TRIMMED = "[earlier output is not shown here: read all of it with 'gpupool logs']";
  const LATEST = "latest";
  const HEAD = 48; // characters of a line's start that hold its prefixes ("[task 1] [rank 12] ")
  // a task's prefix, then a rank's (as the server's ranklogs.select_lines reads them)
  const PREFIXES = /^(?:\[(task \d+)\] )?(?:\[(rank \d+)\] )?/;

  function fact(term, value) {
    return el("div", {}, el("dt", {}, term), el("dd", {}, value));
  }

  // '1.25 GPU-hours'; under 0.01 (36 s on one GPU), 'N GPU-seconds' so a start shows
  function gpuHours(seconds) {
    if (seconds > 0 && seconds < 36) return `${Math.round(seconds)} GPU-seconds`;
    return `${(seconds / 3600).toFixed(2)} GPU-hours`;
  }

  function drawStatus(job) {
    const line = document.getElementById("status-line");
    gp.replaceChildren(
      line,
      gp.badge(job.status, job.cancel_requested),
      job.position ? el("span", { class: "position" }, `#${job.position} in the team's queue`) : null,
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
      fact("Attained", gpuHours(job.attained_gpu_seconds)),
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

  // the terminal view, kept scrolled to the bottom while the reader is there
  function makeLog(pre) {
    const view = gpTerminal.create(pre, { limit: LOG_LIMIT, trimmed: TRIMMED });
    const follow = (draw) => (text) => {
      const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
      draw(text);
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    };
    return { write: follow(view.write), note: follow(view.note), clear: view.clear };
  }

  // the attempt picker: "Latest (live)" then each attempt, newest first
  function drawAttemptChoice(select, numbers) {
    const have = new Set([...select.options].map((o) => o.value));
    const wanted = [LATEST, ...[...numbers].sort((a, b) => b - a).map(String)];
    if (wanted.length === have.size && wanted.every((v) => have.has(v))) return;
    const chosen = select.value || LATEST;
    gp.replaceChildren(
      select,
      wanted.map((v) => el("option", { value: v }, v === LATEST ? "Latest (live)" : `Attempt ${v}`)),
    );
    select.value = wanted.includes(chosen) ? chosen : LATEST;
    select.closest(".log-attempt").hidden = numbers.length < 2 && chosen === LATEST;
  }

  // the labels ("rank 0", "task 1") found at the start of the log's lines, chunk after chunk
  function makeLabelScanner(onNew) {
    const seen = new Map(); // label -> [kind, number]
    let head = ""; // the start of the line being read
    function check() {
      for (const label of PREFIXES.exec(head).slice(1)) {
        if (label && !seen.has(label)) {
          const [kind, n] = label.split(" ");
          seen.set(label, [kind, Number(n)]);
          onNew(seen);
        }
      }
    }
    return {
      scan(text) {
        text.split("\n").forEach((piece, i) => {
          if (i > 0) head = "";
          if (head.length < HEAD) {
            head += piece.slice(0, HEAD - head.length);
            check();
          }
        });
      },
      reset() {
        head = "";
      },
    };
  }

  // the lines picker: all, then each rank, then each task, in number order
  function drawLineChoice(select, seen) {
    const chosen = select.value;
    const labels = [...seen.entries()].sort(([, a], [, b]) => (a[0] === b[0] ? a[1] - b[1] : a[0] === "rank" ? -1 : 1));
    gp.replaceChildren(select, [
      el("option", { value: "" }, "all ranks"),
      ...labels.map(([label]) => el("option", { value: label }, label)),
    ]);
    select.value = chosen;
    select.closest(".log-attempt").hidden = false;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("job");
    const id = Number(root.dataset.jobId);
    const cancel = document.getElementById("cancel");
    const holds = { hold: document.getElementById("hold"), release: document.getElementById("release") };
    const actionError = document.getElementById("action-error");
    const log = makeLog(document.getElementById("log"));
    const attemptChoice = document.getElementById("log-attempt");
    const lineChoice = document.getElementById("log-lines");
    const labels = makeLabelScanner((seen) => drawLineChoice(lineChoice, seen));
    let ended = root.dataset.final === "true";

    // a pending job can be held (it stays queued but never starts) or, held, released
    function drawHold(job) {
      if (!holds.hold) return;
      const held = job.status === "pending" && job.reason === "Held";
      holds.hold.hidden = job.status !== "pending" || held;
      holds.release.hidden = !held;
    }

    function drawJob(job) {
      drawStatus(job);
      drawFacts(job);
      drawEvents(job.events);
      drawPlacement(job);
      drawAttempts(job.attempts_detail);
      drawAttemptChoice(attemptChoice, job.attempts_detail.map((a) => a.number));
      const final = gp.isFinal(job.status);
      drawHold(job);
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

    // live output: `attempt` and `offset` say how far we have read, so a reconnect resumes
    // without repeats; following the latest, the stream moves on to each new attempt itself
    let chosen = LATEST;
    let attempt = null;
    let offset = 0;
    let finished = false;
    let failures = 0;
    let source = null;
    let lines = ""; // "" (every line), or one label: "rank 1", "task 0"
    let written = false; // any text shown since the last (re)start

    function streamUrl() {
      const query = new URLSearchParams({ offset: String(offset) });
      const from = attempt !== null ? attempt : chosen !== LATEST ? Number(chosen) : null;
      if (from !== null) query.set("attempt", String(from));
      if (chosen !== LATEST) query.set("follow", "false");
      if (lines) query.set(...lines.split(" ")); // rank=1 or task=0
      return `/api/v1/jobs/${id}/logs/stream?${query}`;
    }

    function onAttempt(event) {
      const next = JSON.parse(event.data);
      if (next.attempt === attempt) return; // a reconnect announces the same attempt again
      attempt = next.attempt;
      offset = 0;
      labels.reset(); // a new log starts at the start of a line
      if (next.note) log.note(`--- ${next.note} ---`);
      const numbers = [...attemptChoice.options].map((o) => Number(o.value)).filter(Boolean);
      if (!numbers.includes(attempt)) drawAttemptChoice(attemptChoice, [...numbers, attempt]);
    }

    function onLog(event) {
      const chunk = JSON.parse(event.data);
      if (chunk.attempt !== attempt || chunk.offset !== offset) return;
      if (!lines) labels.scan(chunk.text);
      if (chunk.text) log.write(chunk.text);
      written = written || Boolean(chunk.text);
      offset = chunk.next_offset;
    }

    function onEnd() {
      finished = true;
      source.close();
      document.getElementById("log").classList.add("ended");
      if (lines && !written) logState(`No lines of ${lines} here.`, "idle");
      else if (chosen === LATEST) logState("End of output: the job has ended.", "idle");
      else logState(`End of attempt ${chosen}'s output.`, "idle");
    }

    function connect() {
      source = new EventSource(streamUrl());
      const mine = source;
      source.addEventListener("open", () => {
        failures = 0;
        logState(ended || chosen !== LATEST ? "Reading the output…" : "Streaming live output");
      });
      source.addEventListener("attempt", onAttempt);
      source.addEventListener("log", onLog);
      source.addEventListener("status", (event) => {
        const status = JSON.parse(event.data);
        if (!ended) {
          if (gp.isFinal(status.status)) ended = true;
          poll.now();
        }
        if (chosen !== LATEST) return;
        if (status.status === "pending") logState("Waiting for the job to start…", "idle");
        else if (!gp.isFinal(status.status)) logState("Streaming live output");
      });
      source.addEventListener("end", onEnd);
      source.addEventListener("error", () => {
        mine.close();
        if (finished || mine !== source) return;
        failures += 1;
        logState("The output stream was interrupted: reconnecting…", "error");
        if (!ended) poll.now(); // also sends a signed-out user to the sign-in page
        setTimeout(() => mine === source && connect(), Math.min(10000, 500 * 2 ** Math.min(failures, 5)));
      });
    }

    // read again from the start: another attempt, or other lines of it
    function restart() {
      source.close();
      attempt = null; // the stream says which attempt's log it sends
      offset = 0;
      finished = false;
      written = false;
      labels.reset();
      log.clear();
      document.getElementById("log").classList.remove("ended");
      connect();
    }

    attemptChoice.addEventListener("change", () => {
      chosen = attemptChoice.value;
      restart();
    });
    lineChoice.addEventListener("change", () => {
      lines = lineChoice.value;
      restart();
    });
    connect();

    for (const [action, button] of Object.entries(holds)) {
      if (!button) continue;
      button.addEventListener("click", async () => {
        actionError.hidden = true;
        button.disabled = true;
        try {
          const job = await gp.api("POST", `/jobs/${id}/${action}`);
          drawStatus(job);
          drawHold(job);
          poll.now();
        } catch (error) {
          gp.showError(actionError, error.message);
          actionError.focus();
        } finally {
          button.disabled = false;
        }
      });
    }

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
