// Metric charts: a line chart per metric, drawn as inline SVG by this script (no library).
// Used by the job page (a line per attempt, or per GPU) and the compare view (a line per job).
// Text from the server only ever reaches the page as text nodes.
"use strict";

const gpCharts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const WIDTH = 640;
  const HEIGHT = 220;
  const LEFT = 60;
  const RIGHT = 14;
  const TOP = 12;
  const BOTTOM = 32;
  const MAX_DRAWN = 2000; // points of one line drawn; longer series are thinned evenly
  const COLORS = 8; // line-0 .. line-7 in metrics.css

  function svg(tag, attrs = {}, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
    for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return node;
  }

  // A series' points as [x, y]: against its steps ("step"; a series without steps is drawn
  // against time), or against seconds since ``origin`` ("time").
  function points(series, axis, origin) {
    const bySteps = axis === "step" && series.steps.some((step) => step !== null);
    const found = [];
    for (let i = 0; i < series.values.length; i += 1) {
      if (bySteps && series.steps[i] === null) continue;
      const x = bySteps ? series.steps[i] : series.times[i] - origin;
      found.push([x, series.values[i]]);
    }
    return { bySteps, points: found };
  }

  function thin(found) {
    if (found.length <= MAX_DRAWN) return found;
    const stride = Math.ceil(found.length / MAX_DRAWN);
    const kept = found.filter((_, i) => i % stride === 0);
    if (kept[kept.length - 1] !== found[found.length - 1]) kept.push(found[found.length - 1]);
    return kept;
  }

  // 0, 0.25, 0.5, ... : about ``count`` round values from low to high.
  function ticks(low, high, count = 5) {
    if (high === low) return [low];
    const rough = (high - low) / count;
    const power = 10 ** Math.floor(Math.log10(rough));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= rough) || rough;
    const values = [];
    for (let v = Math.ceil(low / step) * step; v <= high + step * 1e-9; v += step) values.push(v);
    return values;
  }

  function label(value) {
    const size = Math.abs(value);
    if (size !== 0 && (size >= 1e6 || size < 1e-3)) return value.toExponential(1);
    return String(Number(value.toPrecision(4)));
  }

  function elapsed(seconds) {
    const s = Math.round(seconds);
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}`;
    return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}`;
  }

  function bounds(lines) {
    let [x0, x1, y0, y1] = [Infinity, -Infinity, Infinity, -Infinity];
    for (const line of lines) {
      for (const [x, y] of line.points) {
        x0 = Math.min(x0, x);
        x1 = Math.max(x1, x);
        y0 = Math.min(y0, y);
        y1 = Math.max(y1, y);
      }
    }
    if (x1 === x0) [x0, x1] = [x0 - 1, x1 + 1];
    if (y1 === y0) [y0, y1] = [y0 - 1, y1 + 1];
    return { x0, x1, y0, y1 };
  }

  // One chart: ``lines`` are {label, color, points: [[x, y], ...]}; ``xTitle`` names the axis.
  function draw(title, lines, xTitle, timeAxis) {
    const drawn = lines.filter((line) => line.points.length);
    const { x0, x1, y0, y1 } = bounds(drawn);
    const right = WIDTH - RIGHT;
    const bottom = HEIGHT - BOTTOM;
    const x = (v) => LEFT + ((v - x0) / (x1 - x0)) * (right - LEFT);
    const y = (v) => bottom - ((v - y0) / (y1 - y0)) * (bottom - TOP);
    const grid = svg("g", { class: "grid" });
    const axes = svg("g", { class: "axis-label" });
    for (const v of ticks(y0, y1)) {
      grid.append(svg("line", { x1: LEFT, x2: right, y1: y(v), y2: y(v) }));
      axes.append(svg("text", { x: LEFT - 6, y: y(v) + 4, "text-anchor": "end" }, label(v)));
    }
    for (const v of ticks(x0, x1, 6)) {
      axes.append(svg("text", { x: x(v), y: bottom + 16, "text-anchor": "middle" }, timeAxis ? elapsed(v) : label(v)));
    }
    axes.append(svg("text", { x: right, y: HEIGHT - 2, "text-anchor": "end", class: "axis-title" }, xTitle));
    const plotted = drawn.map((line) => {
      const kept = thin(line.points);
      const coordinates = kept.map(([px, py]) => `${x(px).toFixed(1)},${y(py).toFixed(1)}`).join(" ");
      const attrs = { class: `line line-${line.color % COLORS}`, points: coordinates, "data-points": line.points.length };
      return svg("polyline", { ...attrs, "data-label": line.label });
    });
    const summary = `${title} against ${xTitle}: ${drawn.length} line${drawn.length === 1 ? "" : "s"}`;
    return svg("svg", { class: "metric-svg", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": summary }, grid, axes, ...plotted);
  }

  function legend(lines) {
    const list = gp.el("ul", { class: "metric-legend" });
    for (const line of lines) {
      const swatch = gp.el("span", { class: `swatch line-${line.color % COLORS}`, "aria-hidden": "true" });
      const last = line.points.length ? ` · last ${gp.number(line.points[line.points.length - 1][1])}` : "";
      list.append(gp.el("li", {}, swatch, line.label, gp.el("span", { class: "muted" }, last)));
    }
    return list;
  }

  // A <figure> for one metric. ``entries``: [{label, color, series}] where series has
  // steps/times/values; ``axis``: "step" or "time"; ``origin``: time 0 of the time axis.
  function figure(key, title, entries, axis, origin) {
    const lines = entries.map((entry) => ({ ...entry, ...points(entry.series, axis, origin) }));
    const bySteps = axis === "step" && lines.some((line) => line.bySteps);
    const xTitle = bySteps ? "step" : "time since start";
    return gp.el(
      "figure",
      { class: "metric-chart", "data-metric": key },
      gp.el("figcaption", {}, title),
      draw(title, lines, xTitle, !bySteps),
      legend(lines),
    );
  }

  return { figure, ticks, points };
})();
