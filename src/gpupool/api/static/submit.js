// Submit page: split the command line into argv, post the spec to /api/v1/jobs, go to the job.
"use strict";

class CommandError extends Error {}

// Split one command line into arguments the way a POSIX shell would, without running a shell:
// whitespace separates words; '…' keeps everything literally; "…" keeps everything except that
// \" \\ \$ \` are unescaped; a backslash outside quotes keeps the next character. What a shell
// would interpret and we cannot (operators, variables, command substitution, comments) is an
// error that says how to write it instead, never a silent surprise.
function splitCommand(line) {
  const args = [];
  let word = "";
  let inWord = false;
  let i = 0;
  const SH = "write sh -c '…' to run it through a shell";
  const expansion = (next) => /[A-Za-z_{(0-9@*#?$!-]/.test(next || "");
  while (i < line.length) {
    const c = line[i];
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) throw new CommandError("a single quote (') is not closed");
      word += line.slice(i + 1, end);
      inWord = true;
      i = end + 1;
    } else if (c === '"') {
      inWord = true;
      i += 1;
      let closed = false;
      while (i < line.length) {
        const d = line[i];
        if (d === '"') {
          closed = true;
          i += 1;
          break;
        }
        if (d === "\\" && i + 1 < line.length && '"\\$`'.includes(line[i + 1])) {
          word += line[i + 1];
          i += 2;
          continue;
        }
        if (d === "$" && expansion(line[i + 1])) {
          throw new CommandError(`"$" inside double quotes would be expanded by a shell, and no shell runs your command: write \\$ or use single quotes for a literal $, or ${SH}`);
        }
        if (d === "`") throw new CommandError(`a backquote (\`) is command substitution in a shell: ${SH}`);
        word += d;
        i += 1;
      }
      if (!closed) throw new CommandError('a double quote (") is not closed');
    } else if (c === "\\") {
      if (i + 1 >= line.length) throw new CommandError("the line ends with a backslash");
      word += line[i + 1];
      inWord = true;
      i += 2;
    } else if (/\s/.test(c)) {
      if (inWord) args.push(word);
      word = "";
      inWord = false;
      i += 1;
    } else if ("|&;<>()".includes(c)) {
      throw new CommandError(`"${c}" is a shell operator, and no shell runs your command: quote it ('${c}') to pass it as text, or ${SH}`);
    } else if (c === "$" && expansion(line[i + 1])) {
      throw new CommandError(`variables ($NAME) are not expanded: set values under Environment, quote it ('$') to pass it as text, or ${SH}`);
    } else if (c === "`") {
      throw new CommandError(`a backquote (\`) is command substitution in a shell: ${SH}`);
    } else if (c === "#" && !inWord) {
      throw new CommandError(`"#" starts a comment in a shell: quote it ('#') to pass it as text`);
    } else {
      word += c;
      inWord = true;
      i += 1;
    }
  }
  if (inWord) args.push(word);
  return args;
}

// "90", "90s", "30m", "2h", "1d" -> seconds, as the CLI reads them (domain/units.parse_duration)
function parseDuration(text) {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$/.exec(text.toLowerCase());
  if (!match) throw new CommandError(`"${text.trim()}" is not a duration: write it like 90s, 30m, 2h or 1d`);
  return Number(match[1]) * { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[match[2]];
}

// "A=1\nB=two=2" -> {A: "1", B: "two=2"}
function parseEnv(text) {
  const env = {};
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.trim();
    if (!line || line.startsWith("#")) return;
    const eq = line.indexOf("=");
    if (eq < 1) throw new CommandError(`line ${index + 1} of the environment: write NAME=value`);
    env[line.slice(0, eq).trim()] = line.slice(eq + 1);
  });
  return env;
}

(() => {
  // API field (error.details.fields[].field) -> the form's input
  const FIELDS = {
    command: "command",
    name: "name",
    workdir: "workdir",
    code: "code",
    env: "env",
    environment: "environment",
    datasets: "datasets",
    team: "team",
    priority: "priority",
    preemptible: "preemptible",
    gpu_types: "gpu_type",
    max_runtime_seconds: "max_runtime",
    grace_period_seconds: "grace_period",
    depends_on: "after",
    "resources.gpus": "gpus",
    "resources.gpu_memory_bytes": "gpu_memory",
    "resources.cpus": "cpus",
    "resources.memory_bytes": "memory",
    resources: "gpus",
    nodes: "nodes",
    launcher: "launcher",
    launcher_mode: "launcher",
    procs_per_node: "procs_per_node",
    shm_bytes: "shm",
    hold: "hold",
  };

  function inputFor(field) {
    let name = field;
    while (name && !(name in FIELDS)) name = name.includes(".") ? name.slice(0, name.lastIndexOf(".")) : "";
    return name ? FIELDS[name] : null;
  }

  function fieldError(form, id, message) {
    const input = form.elements[id];
    const box = document.getElementById(`${id}-error`);
    if (input) input.setAttribute("aria-invalid", message ? "true" : "false");
    if (!box) return;
    box.textContent = message || "";
    box.hidden = !message;
  }

  function clearErrors(form, summary) {
    summary.hidden = true;
    for (const box of form.querySelectorAll(".field-error")) {
      fieldError(form, box.id.replace(/-error$/, ""), "");
    }
  }

  function preview(form) {
    const box = document.getElementById("command-preview");
    const line = form.elements.command.value;
    if (!line.trim()) {
      box.hidden = true;
      fieldError(form, "command", "");
      return;
    }
    try {
      const args = splitCommand(line);
      gp.replaceChildren(box, "Runs: ", args.map((arg) => gp.el("span", { class: "arg" }, arg)));
      box.hidden = false;
      fieldError(form, "command", "");
    } catch (error) {
      box.hidden = true;
      fieldError(form, "command", error.message);
    }
  }

  function numberOr(value, fallback) {
    const text = value.trim();
    return text === "" ? fallback : Number(text);
  }

  // the spec to post, or throws {field, message}
  function spec(form) {
    const v = (name) => form.elements[name].value;
    const problems = [];
    const body = { resources: {} };
    try {
      body.command = splitCommand(v("command"));
      if (!body.command.length) problems.push(["command", "give the program to run, e.g. python train.py"]);
    } catch (error) {
      problems.push(["command", error.message]);
    }
    try {
      body.env = parseEnv(v("env"));
    } catch (error) {
      problems.push(["env", error.message]);
    }
    if (v("name").trim()) body.name = v("name").trim();
    if (v("workdir").trim()) body.workdir = v("workdir").trim();
    if (v("code").trim()) body.code = v("code").trim();
    if (v("environment")) body.environment = v("environment");
    const datasets = form.elements.datasets;
    const picked = datasets ? Array.from(datasets.selectedOptions, (option) => option.value) : [];
    if (picked.length) body.datasets = picked;
    codeProblems(form, body, problems);
    if (v("team")) body.team = v("team");
    const after = v("after").split(/[\s,]+/).filter(Boolean); // 12, prep, afterany:12
    if (after.length) body.depends_on = after;
    body.priority = numberOr(v("priority"), 0);
    const gpus = numberOr(v("gpus"), 0);
    if (gpus !== 0) body.resources.gpus = gpus; // no GPU: leave it out
    body.resources.cpus = numberOr(v("cpus"), 1);
    if (v("gpu_memory").trim()) body.resources.gpu_memory_bytes = v("gpu_memory").trim();
    if (v("memory").trim()) body.resources.memory_bytes = v("memory").trim();
    if (v("shm").trim()) body.shm_bytes = v("shm").trim();
    for (const [name, label] of [["gpus", "GPUs"], ["cpus", "CPUs"], ["priority", "the priority"]]) {
      const value = name === "priority" ? body.priority : name === "gpus" ? gpus : body.resources[name];
      if (!Number.isFinite(value)) problems.push([name, `${label}: write a number`]);
    }
    if (Number.isFinite(body.priority) && !Number.isInteger(body.priority)) {
      problems.push(["priority", "the priority is a whole number from -1000 to 1000"]);
    }
    checkPriority(form, body.priority, problems);
    gang(form, body, problems);
    policy(form, body, problems);
    return { body, problems };
  }

  // a code snapshot is the job's working directory: not with a workdir, not over the limit
  function codeProblems(form, body, problems) {
    const input = form.elements.code_file;
    const file = input.files.length ? input.files[0] : null;
    if ((file || body.code) && body.workdir) {
      problems.push(["code", "a job runs in its code or in a working directory on the node, not both: empty Working directory, or leave the code out"]);
    }
    const limit = Number(input.dataset.maxBytes);
    if (file && file.size > limit) {
      problems.push(["code", `${file.name} is ${gp.bytes(file.size)}, more than the ${gp.bytes(limit)} this server takes: leave big files out of the archive, or put the code on a file system the nodes share and give its path as the working directory`]);
    }
  }

  // POST the chosen .tar.gz as it is: the server checks it and names it by its SHA-256
  async function sendCode(file) {
    const headers = { Accept: "application/json", "Content-Type": "application/gzip" };
    const meta = document.querySelector('meta[name="csrf-token"]');
    if (meta) headers["X-CSRF-Token"] = meta.content;
    let response;
    try {
      response = await fetch("/api/v1/code", { method: "POST", headers, body: file, credentials: "same-origin", cache: "no-store" });
    } catch (error) {
      throw Object.assign(new Error("cannot reach the gpupool server"), { code: "network", details: {} });
    }
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      const error = (data && data.error) || {};
      const message = error.message || `the server answered ${response.status}`;
      throw Object.assign(new Error(message), { code: error.code || `http_${response.status}`, details: error.details || {} });
    }
    return data;
  }

  // the range the role allows is on the input (min, max): say it before the server does
  function checkPriority(form, priority, problems) {
    const input = form.elements.priority;
    const low = Number(input.min);
    const high = Number(input.max);
    if (Number.isInteger(priority) && (priority < low || priority > high)) {
      problems.push(["priority", `your role (${input.dataset.role}) may use priorities from ${low} to ${high}`]);
    }
  }

  // nodes, launcher and processes per node into the spec ("torchrun" is the torch launcher in
  // its torchrun mode)
  function gang(form, body, problems) {
    const nodes = numberOr(form.elements.nodes.value, 1);
    if (!Number.isInteger(nodes) || nodes < 1) problems.push(["nodes", "nodes: a whole number, 1 or more"]);
    else if (nodes !== 1) body.nodes = nodes;
    const launcher = form.elements.launcher.value;
    if (launcher === "torchrun") Object.assign(body, { launcher: "torch", launcher_mode: "torchrun" });
    else if (launcher) body.launcher = launcher;
    const procs = form.elements.procs_per_node.value.trim();
    if (!procs) return;
    const count = Number(procs);
    if (!Number.isInteger(count) || count < 1) problems.push(["procs_per_node", "processes per node: a whole number, 1 or more"]);
    else if (!launcher) problems.push(["procs_per_node", "processes per node is for a job with a launcher: choose one, or leave it empty"]);
    else body.procs_per_node = count;
  }

  // preemptible, GPU types, max runtime and grace period into the spec
  function policy(form, body, problems) {
    const v = (name) => form.elements[name].value;
    body.preemptible = form.elements.preemptible.checked;
    if (form.elements.hold.checked) body.hold = true;
    const types = v("gpu_type").split(",").map((t) => t.trim()).filter(Boolean);
    if (types.length) body.gpu_types = types;
    for (const [id, key, label] of [
      ["max_runtime", "max_runtime_seconds", "the max runtime"],
      ["grace_period", "grace_period_seconds", "the grace period"],
    ]) {
      if (!v(id).trim()) continue;
      try {
        body[key] = parseDuration(v(id));
      } catch (error) {
        problems.push([id, `${label}: ${error.message}`]);
        continue;
      }
      if (key === "max_runtime_seconds" && body[key] <= 0) problems.push([id, "the max runtime must be more than 0"]);
    }
  }

  function report(form, summary, message, problems) {
    for (const [id, text] of problems) fieldError(form, id, text);
    gp.showError(summary, message);
    const first = problems.length ? form.elements[problems[0][0]] : null;
    (first || summary).focus();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("submit-form");
    const summary = document.getElementById("form-error");
    const button = document.getElementById("submit-job");
    form.elements.command.addEventListener("input", () => preview(form));
    preview(form);

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearErrors(form, summary);
      const { body, problems } = spec(form);
      if (problems.length) {
        const more = problems.length > 1 ? ` (and ${problems.length - 1} more)` : "";
        report(form, summary, `${problems[0][1]}${more}`, problems);
        return;
      }
      button.disabled = true;
      const file = form.elements.code_file.files[0];
      try {
        if (file) {
          button.textContent = "Sending the code…";
          body.code = (await sendCode(file)).ref;
          form.elements.code.value = body.code; // sent: a retry needs not send it again
          form.elements.code_file.value = "";
        }
        button.textContent = "Submitting…";
        const job = await gp.api("POST", "/jobs", body);
        location.assign(`/jobs/${Number(job.id)}`);
      } catch (error) {
        const fields = Array.isArray(error.details.fields) ? error.details.fields : [];
        const mapped = [];
        for (const item of fields) {
          const id = inputFor(item.field);
          if (id) mapped.push([id, item.message]);
        }
        if (!mapped.length && error.code === "unknown_team") mapped.push(["team", error.message]);
        if (!mapped.length && /^(code_|bad_code)/.test(error.code)) mapped.push(["code", error.message]);
        if (!mapped.length && error.code === "priority_not_allowed") mapped.push(["priority", error.message]);
        if (!mapped.length && error.code === "invalid_launcher") mapped.push(["launcher", error.message]);
        if (!mapped.length && error.code === "unsatisfiable" && body.gpu_types && /GPU type/.test(error.message)) {
          mapped.push(["gpu_type", error.message]);
        }
        report(form, summary, error.message, mapped);
        button.disabled = false;
        button.textContent = "Submit job";
      }
    });
  });
})();
