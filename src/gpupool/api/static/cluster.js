// Cluster page: polls /api/v1/nodes and redraws what changed (same markup as _node.html);
// an admin drains and undrains nodes from it.
"use strict";

(() => {
  const { el, bytes, number, percent } = gp;
  const drawn = new Map(); // node name -> JSON of what is drawn
  const isAdmin = () => document.getElementById("nodes").dataset.admin === "1";

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

  function gpuCard(gpu) {
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
        el("h3", {}, `GPU ${gpu.index}`),
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
        : el("p", { class: "gpu-free" }, "Free"),
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
        el("h2", { id }, node.name),
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
      el("ul", { class: "gpus", "aria-label": `GPUs of ${node.name}` }, node.gpus.map(gpuCard)),
    );
  }

  // Redraw only what changed (a node's facts, or one GPU card): focus and scroll stay put.
  function draw(nodes) {
    const box = document.getElementById("nodes");
    const gpus = nodes.flatMap((node) => node.gpus);
    const used = gpus.reduce((sum, gpu) => sum + gpu.used_share, 0);
    gp.replaceChildren(
      document.getElementById("summary"),
      el("strong", {}, String(gpus.length)),
      ` GPU${gpus.length === 1 ? "" : "s"} · `,
      el("strong", {}, number(used)),
      " in use · ",
      el("strong", {}, number(Math.round((gpus.length - used) * 100) / 100)),
      " free",
    );
    if (!nodes.length) {
      drawn.clear();
      gp.replaceChildren(box, el("p", { class: "empty" }, "No node has registered yet."));
      return;
    }
    const sections = [...box.querySelectorAll("section.node")];
    const names = nodes.map((node) => node.name).join("\n");
    if (sections.map((section) => section.dataset.node).join("\n") !== names) {
      drawn.clear();
      gp.replaceChildren(box, nodes.map(nodeSection));
      for (const node of nodes) remember(node);
      return;
    }
    nodes.forEach((node, i) => {
      const { facts, cards } = keys(node);
      const previous = drawn.get(node.name);
      if (!previous || previous.facts !== facts || previous.cards.length !== cards.length) {
        redraw(sections[i], node);
      } else {
        const shown = sections[i].querySelectorAll("li.gpu");
        cards.forEach((card, j) => {
          if (previous.cards[j] !== card) shown[j].replaceWith(gpuCard(node.gpus[j]));
        });
      }
      remember(node);
    });
  }

  // A node's section drawn anew, with the drain reason an admin is typing kept as it was.
  function redraw(section, node) {
    const typing = section.querySelector(".node-actions input[name=reason]");
    const fresh = nodeSection(node);
    const input = fresh.querySelector(".node-actions input[name=reason]");
    if (typing && input) input.value = typing.value;
    const focused = typing && document.activeElement === typing;
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
    gp.every(gp.refreshMs(), async () => draw(await gp.api("GET", "/nodes")));
  });
})();
