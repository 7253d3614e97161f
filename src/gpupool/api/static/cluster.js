// Cluster page: polls /api/v1/pool and redraws what changed (same markup as cluster.html and
// _node.html: the pool's summary, its nodes by fabric group); an admin drains and undrains
// nodes from it.
"use strict";

(() => {
  const { el, bytes, number, percent } = gp;
  const drawn = new Map(); // node name -> JSON of what is drawn
  let layout = null; // the groups and their nodes, as drawn
  const box = () => document.getElementById("nodes");
  const isAdmin = () => box().dataset.admin === "1";
  const openMax = () => Number(box().dataset.openMax);
  // nvidia-smi topo -m's legend, as ui.LINK_LEGEND says it
  const LEGEND = [
    ["X", "the GPU itself"],
    ["NV#", "NVLink, # links"],
    ["PIX", "at most one PCIe bridge"],
    ["PXB", "several PCIe bridges, no host bridge"],
    ["PHB", "a PCIe host bridge (one CPU)"],
    ["NODE", "across PCIe host bridges in one NUMA node"],
    ["SYS", "across NUMA nodes (the CPUs' interconnect)"],
    ["-", "not reported"],
  ];

  function network(inventory) {
    const nics = (inventory.nics || []).filter((nic) => nic.name !== "lo");
    const up = nics.filter((nic) => nic.operstate === "up");
    const parts = up.map((nic) => {
      let text = nic.name + (nic.speed_mbps ? ` ${number(nic.speed_mbps / 1000)} Gb/s` : "");
      if (nic.rdma_device) text += ` (RDMA ${nic.rdma_device})`;
      return text;
    });
    if (nics.length > up.length) parts.push(`${nics.length - up.length} down`);
    return parts.length ? parts : ["none found"];
  }

  function rdma(inventory) {
    const parts = (inventory.rdma || []).map((device) => {
      const ports = (device.ports || []).map((port) =>
        [port.link_layer, port.rate_gbps ? `${number(port.rate_gbps)} Gb/s` : null, port.state]
          .filter(Boolean)
          .join(" "),
      );
      return device.name + (ports.length ? `: ${ports.join(", ")}` : "");
    });
    return parts.length ? parts : ["none found"];
  }

  function fact(term, value) {
    return el("div", {}, el("dt", {}, term), el("dd", {}, value));
  }

  // Another team's job comes without id, name, user or team (the API withholds them).
  function holderPart(holder) {
    return holder.other_team ? "part-other" : `part-${holder.job_id % 6}`;
  }

  function holderItem(holder) {
    const memory = holder.memory_bytes ? `, ${bytes(holder.memory_bytes)}` : "";
    if (holder.other_team) {
      return el(
        "li",
        { class: "other-team" },
        el("span", { class: "swatch part-other", "aria-hidden": "true" }),
        `another team's job · ${number(holder.share)} GPU${memory}`,
      );
    }
    const label = `#${holder.job_id}` + (holder.job_name ? ` ${holder.job_name}` : "");
    return el(
      "li",
      {},
      el("span", { class: `swatch ${holderPart(holder)}`, "aria-hidden": "true" }),
      el("a", { href: `/jobs/${Number(holder.job_id)}` }, label),
      ` · ${holder.user} (${holder.team}) · ${number(holder.share)} GPU${memory}`,
    );
  }

  function idle(node) {
    if (node.schedulable) return "Free";
    return node.state === "down" ? "Idle: the node is down" : "Idle: the node is drained";
  }

  function gpuCard(gpu, node) {
    const used = percent(gpu.used_share);
    const bar = el("div", {
      class: "bar",
      role: "progressbar",
      "aria-label": `Share of GPU ${gpu.index} in use`,
      "aria-valuemin": 0,
      "aria-valuemax": 100,
      "aria-valuenow": used,
      "aria-valuetext": `${used}% in use`,
    });
    gpu.holders.forEach((holder) => {
      const width = `${Math.round(holder.share * 10000) / 100}%`;
      bar.append(el("span", { class: `bar-part ${holderPart(holder)}`, style: { width } }));
    });
    const utilization =
      gpu.utilization_percent === null || gpu.utilization_percent === undefined
        ? "unknown"
        : `${Math.round(gpu.utilization_percent)}%`;
    return el(
      "li",
      { class: "gpu", "data-uuid": gpu.uuid },
      el(
        "div",
        { class: "gpu-head" },
        el("h4", {}, `GPU ${gpu.index}`),
        el("span", { class: "gpu-model" }, gpu.model),
      ),
      el("p", { class: "gpu-memory" }, `${bytes(gpu.memory_bytes)} memory`),
      bar,
      el(
        "p",
        { class: "gpu-usage" },
        el("strong", {}, `${used}%`),
        ` in use · ${gpu.used_memory_bytes ? `${bytes(gpu.used_memory_bytes)} reserved` : "no memory reserved"}`,
        ` · utilisation ${utilization}`,
      ),
      gpu.holders.length
        ? el("ul", { class: "holders", "aria-label": `Jobs on GPU ${gpu.index}` }, gpu.holders.map((holder) => holderItem(holder)))
        : el("p", { class: "gpu-free" }, idle(node)),
    );
  }

  function badge(kind, text) {
    return el("span", { class: `badge ${kind}` }, el("span", { class: "status-icon", "aria-hidden": "true" }), text);
  }

  // Drain (with an optional reason) or Undrain: sent by the submit handler below.
  function actions(node) {
    const verb = node.drain ? "Undrain" : "Drain";
    return el(
      "form",
      { class: "node-actions", "data-node": node.name, "data-action": verb.toLowerCase() },
      node.drain
        ? null
        : el("input", {
            type: "text",
            name: "reason",
            maxlength: 500,
            placeholder: "reason (optional)",
            "aria-label": `Reason to drain ${node.name}`,
          }),
      el("button", { type: "submit", class: "button", "aria-label": `${verb} ${node.name}` }, verb),
      el("p", { class: "field-error", role: "alert", hidden: true }),
    );
  }

  function when(epoch) {
    return epoch === null || epoch === undefined ? "-" : gp.time(epoch);
  }

  function nodeSection(node) {
    const id = `node-${node.name}`;
    const drain = node.drain ? `drained${node.drain_reason ? `: ${node.drain_reason}` : ""}` : "no";
    const since = node.down_at === null || node.down_at === undefined ? null : [" since ", when(node.down_at)];
    const inv = node.inventory;
    return el(
      "section",
      { class: "node card", "data-node": node.name, "aria-labelledby": id },
      el(
        "div",
        { class: "node-head" },
        el("h3", { id }, node.name),
        node.schedulable ? badge("ok", "schedulable") : badge("warn", "not schedulable"),
        node.state === "down" ? badge("down", "down") : null,
        node.drain ? badge("warn drained", "drained") : null,
        isAdmin() ? actions(node) : null,
      ),
      el(
        "dl",
        { class: "facts" },
        el("div", {}, el("dt", {}, "State"), el("dd", { class: "node-state" }, node.state, since)),
        el("div", {}, el("dt", {}, "Drain"), el("dd", { class: "node-drain" }, drain)),
        el("div", {}, el("dt", {}, "Joined"), el("dd", {}, when(node.joined_at))),
        fact("Fabric group", node.fabric_group || "-"),
        node.address ? fact("Address", node.address) : null,
        fact("CPUs", String(node.cpus)),
        fact("Memory", bytes(node.memory_bytes)),
        fact("GPUs", String(node.gpus.length)),
        fact(
          "Driver / CUDA",
          inv.driver_version || inv.cuda_version
            ? `${inv.driver_version || "-"} / ${inv.cuda_version || "-"}`
            : "not reported",
        ),
        fact("Network", network(inv).join(", ")),
        fact("RDMA", rdma(inv).join(", ")),
      ),
      usage(node),
      cpuHolders(node),
      topology(node),
      networkTables(node),
      el(
        "ul",
        { class: "gpus", "aria-label": `GPUs of ${node.name}` },
        node.gpus.map((gpu) => gpuCard(gpu, node)),
      ),
    );
  }

  function plural(count, word) {
    return `${count} ${word}${count === 1 ? "" : "s"}`;
  }

  // What the node's jobs hold of its GPUs, CPUs and memory (shares computed by the server).
  function usage(node) {
    const u = node.usage;
    const rows = [
      ["GPUs", u.gpu_share, `${number(u.gpus_held)} of ${u.gpus}`],
      ["CPUs", u.cpu_share, `${number(u.cpus_held)} of ${u.cpus}`],
      ["Memory", u.memory_share, `${bytes(u.memory_held_bytes)} of ${bytes(u.memory_bytes)}`],
    ];
    return el(
      "ul",
      { class: "usage", "aria-label": `What jobs hold of ${node.name}` },
      rows.map(([label, share, figure]) =>
        el(
          "li",
          { class: "use", "data-use": label.toLowerCase() },
          el("span", { class: "use-label" }, `${label} held`),
          el(
            "span",
            {
              class: "usage-bar",
              role: "progressbar",
              "aria-label": `${label} of ${node.name} held`,
              "aria-valuemin": 0,
              "aria-valuemax": 100,
              "aria-valuenow": percent(share),
            },
            el("span", { style: { width: `${Math.round(share * 10000) / 100}%` } }),
          ),
          el("span", { class: "use-figure" }, `${figure} (${percent(share)}%)`),
        ),
      ),
    );
  }

  // Who holds the node's CPUs (what a job waiting on InsufficientCpu waits for).
  function cpuHolders(node) {
    const found = node.cpu_holders || [];
    if (!found.length) return null;
    const parts = [];
    found.forEach((holder, i) => {
      if (i) parts.push("; ");
      if (holder.other_team) {
        parts.push("another team's job");
      } else {
        const label = `#${holder.job_id}` + (holder.job_name ? ` ${holder.job_name}` : "");
        parts.push(el("a", { href: `/jobs/${Number(holder.job_id)}` }, label));
        parts.push(` · ${holder.user} (${holder.team})`);
      }
      parts.push(` · ${number(holder.cpus)} CPU${holder.cpus === 1 ? "" : "s"}`);
    });
    return el("p", { class: "cpu-holders" }, "CPUs held by: ", ...parts);
  }

  function linkClass(cell) {
    if (!cell) return "link-none";
    if (cell === "X") return "link-self";
    return cell.startsWith("NV") ? "link-nv" : `link-${cell.toLowerCase()}`;
  }

  // The GPU x GPU (then x RDMA device) matrix, open by default up to openMax() GPUs.
  function topology(node) {
    const t = node.topology;
    if (t.gpus.length <= 1 && !t.nics.length) return null;
    let said = ": not reported";
    if (t.reported) said = `: ${t.gpus.length} GPUs` + (t.nics.length ? `, ${plural(t.nics.length, "RDMA device")}` : "");
    const open = t.reported && t.gpus.length <= openMax();
    const details = el("details", { class: "topology", "data-part": "topology", open }, el("summary", {}, `GPU topology${said}`));
    if (!t.reported) {
      details.append(
        el(
          "p",
          { class: "muted" },
          "The node's inventory names no GPU link. Where no NVIDIA driver reports them, declare them: GPUPOOL_DECLARED_LINKS=0-1:NV4,2-3:PIX",
        ),
      );
      return details;
    }
    const head = el(
      "tr",
      {},
      el("td"),
      t.gpus.map((index) => el("th", { scope: "col" }, `GPU${index}`)),
      t.nics.map((nic) => el("th", { scope: "col", class: "nic-col" }, nic)),
    );
    const rows = t.cells.map((row, i) =>
      el(
        "tr",
        {},
        el("th", { scope: "row" }, `GPU${t.gpus[i]}`),
        row.map((cell) => el("td", { class: linkClass(cell) }, cell || "-")),
      ),
    );
    const table = el(
      "table",
      { class: "matrix", "aria-label": `GPU topology of ${node.name}` },
      el("thead", {}, head),
      el("tbody", {}, rows),
    );
    const legend = el(
      "p",
      { class: "legend" },
      LEGEND.map(([word, meaning]) => el("span", {}, el("strong", {}, word), ` ${meaning}`)),
    );
    details.append(el("div", { class: "matrix-wrap" }, table), legend);
    return details;
  }

  function table(kind, label, heads, rows) {
    return el(
      "table",
      { class: `table compact ${kind}`, "aria-label": label },
      el("thead", {}, el("tr", {}, heads.map((head) => el("th", { scope: "col" }, head)))),
      el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((cell) => el("td", {}, cell))))),
    );
  }

  // Every NIC and RDMA port: state, speed or rate, link layer (collapsed by default).
  function networkTables(node) {
    const nics = (node.inventory.nics || []).filter((nic) => nic.name !== "lo");
    const devices = node.inventory.rdma || [];
    const dash = (value) => (value === null || value === undefined || value === "" ? "-" : String(value));
    const details = el(
      "details",
      { class: "network", "data-part": "network" },
      el("summary", {}, `NICs and RDMA devices: ${plural(nics.length, "NIC")}, ${plural(devices.length, "RDMA device")}`),
    );
    if (nics.length) {
      const rows = nics.map((nic) => [
        nic.name,
        dash(nic.operstate),
        nic.speed_mbps ? `${number(nic.speed_mbps / 1000)} Gb/s` : "-",
        dash(nic.mtu || null),
        dash(nic.rdma_device),
      ]);
      details.append(table("nics", `NICs of ${node.name}`, ["NIC", "State", "Speed", "MTU", "RDMA device"], rows));
    }
    if (devices.length) {
      const rows = devices.flatMap((device) =>
        (device.ports && device.ports.length ? device.ports : [null]).map((port) => [
          device.name,
          port ? String(port.port) : "-",
          dash(port && port.link_layer),
          port && port.rate_gbps ? `${number(port.rate_gbps)} Gb/s` : "-",
          dash(port && port.state),
          dash(port && port.phys_state),
          dash(device.numa_node),
        ]),
      );
      const heads = ["Device", "Port", "Link layer", "Rate", "State", "Physical state", "NUMA node"];
      details.append(table("rdma", `RDMA devices of ${node.name}`, heads, rows));
    }
    if (!nics.length && !devices.length) details.append(el("p", { class: "muted" }, "None found."));
    return details;
  }

  // A fabric group's heading and its nodes; the nodes of no group come last, as "No fabric group".
  function groupSection(group, i) {
    const id = `group-${i + 1}`;
    const count = `${plural(group.nodes.length, "node")} · ${plural(group.gpus, "GPU")}`;
    return el(
      "section",
      { class: "fabric-group", "data-group": group.name || "", "aria-labelledby": id },
      el(
        "h2",
        { class: "group-head", id },
        group.name ? `Fabric group ${group.name}` : "No fabric group",
        " ",
        el("span", { class: "group-count" }, count),
      ),
      group.nodes.map(nodeSection),
    );
  }

  function drawSummary(summary) {
    const strong = (value) => el("strong", {}, value);
    gp.replaceChildren(
      document.getElementById("summary"),
      strong(String(summary.gpus)),
      ` GPU${summary.gpus === 1 ? "" : "s"} · `,
      strong(number(summary.in_use)),
      " in use · ",
      strong(number(summary.free)),
      " free",
      summary.unavailable ? [" · ", strong(number(summary.unavailable)), " idle on drained or down nodes"] : null,
    );
    gp.replaceChildren(
      document.getElementById("node-summary"),
      strong(String(summary.nodes)),
      ` node${summary.nodes === 1 ? "" : "s"}: `,
      strong(String(summary.up)),
      " up · ",
      strong(String(summary.drained)),
      " drained · ",
      strong(String(summary.down)),
      " down",
    );
    const models = document.getElementById("model-summary");
    models.hidden = !summary.by_model.length;
    gp.replaceChildren(
      models,
      summary.by_model.map((m) => el("li", {}, strong(m.model), `: ${number(m.free)} of ${m.gpus} free`)),
    );
  }

  // Which details (topology, network) of each node are open, to keep them so on a redraw.
  function openParts(section) {
    const parts = {};
    for (const details of section.querySelectorAll("details[data-part]")) parts[details.dataset.part] = details.open;
    return parts;
  }

  function keepOpen(section, parts) {
    for (const details of section.querySelectorAll("details[data-part]")) {
      if (details.dataset.part in parts) details.open = parts[details.dataset.part];
    }
  }

  // Redraw only what changed (a node's facts, or one GPU card): focus, scroll and open
  // details stay put. A change of groups or of their nodes draws them all anew.
  function draw(pool) {
    drawSummary(pool.summary);
    const nodes = pool.groups.flatMap((group) => group.nodes);
    if (!nodes.length) {
      drawn.clear();
      layout = null;
      gp.replaceChildren(box(), el("p", { class: "empty" }, "No node has registered yet."));
      return;
    }
    const wanted = JSON.stringify(pool.groups.map((g) => [g.name, g.gpus, g.nodes.map((n) => n.name)]));
    if (layout === null) layout = shownLayout();
    if (wanted !== layout) {
      const open = new Map([...box().querySelectorAll("section.node")].map((s) => [s.dataset.node, openParts(s)]));
      drawn.clear();
      gp.replaceChildren(box(), pool.groups.map(groupSection));
      for (const section of box().querySelectorAll("section.node")) keepOpen(section, open.get(section.dataset.node) || {});
      for (const node of nodes) remember(node);
      layout = wanted;
      return;
    }
    const sections = [...box().querySelectorAll("section.node")];
    nodes.forEach((node, i) => {
      const { facts, cards } = keys(node);
      const previous = drawn.get(node.name);
      if (!previous || previous.facts !== facts || previous.cards.length !== cards.length) {
        redraw(sections[i], node);
      } else {
        const shown = sections[i].querySelectorAll("li.gpu");
        cards.forEach((card, j) => {
          if (previous.cards[j] !== card) shown[j].replaceWith(gpuCard(node.gpus[j], node));
        });
      }
      remember(node);
    });
  }

  // The layout the server rendered: read back from the page, in the shape of ``wanted``.
  function shownLayout() {
    const groups = [...box().querySelectorAll("section.fabric-group")];
    return JSON.stringify(
      groups.map((group) => {
        const names = [...group.querySelectorAll("section.node")].map((s) => s.dataset.node);
        const gpus = group.querySelectorAll("li.gpu").length;
        return [group.dataset.group || null, gpus, names];
      }),
    );
  }

  // A node's section drawn anew, with the drain reason an admin is typing kept as it was.
  function redraw(section, node) {
    const typing = section.querySelector(".node-actions input[name=reason]");
    const fresh = nodeSection(node);
    const input = fresh.querySelector(".node-actions input[name=reason]");
    if (typing && input) input.value = typing.value;
    const focused = typing && document.activeElement === typing;
    keepOpen(fresh, openParts(section));
    section.replaceWith(fresh);
    if (focused && input) input.focus();
    return fresh;
  }

  // Drain or undrain a node; the answer is the node as it is now, drawn at once.
  async function act(form) {
    const name = form.dataset.node;
    const action = form.dataset.action;
    const button = form.querySelector("button");
    const error = form.querySelector(".field-error");
    const reason = form.querySelector("input[name=reason]");
    const body = action === "drain" && reason && reason.value.trim() ? { reason: reason.value.trim() } : undefined;
    button.disabled = true;
    try {
      const node = await gp.api("POST", `/nodes/${encodeURIComponent(name)}/${action}`, body);
      redraw(form.closest("section.node"), node);
      remember(node);
    } catch (problem) {
      button.disabled = false;
      gp.showError(error, problem.message);
    }
  }

  function keys(node) {
    const { gpus, last_seen_at, ...rest } = node;
    return { facts: JSON.stringify(rest), cards: gpus.map((gpu) => JSON.stringify(gpu)) };
  }

  function remember(node) {
    drawn.set(node.name, keys(node));
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("nodes").addEventListener("submit", (event) => {
      const form = event.target.closest("form.node-actions");
      if (!form) return;
      event.preventDefault();
      act(form);
    });
    gp.every(gp.refreshMs(), async () => draw(await gp.api("GET", "/pool")));
  });
})();
