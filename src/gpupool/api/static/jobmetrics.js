// Job page: the job's metrics, a chart per metric (a line per attempt; the GPUs' samples a
// line per GPU), against step or time, kept live while the job runs (polled with a cursor).
"use strict";

(() => {
  const card = document.getElementById("metrics");
  if (!card) return;
  const page = document.getElementById("job");
  const charts = document.getElementById("metric-charts");
  const state = document.getElementById("metrics-state");
  const data = new gpMetrics.JobSeries(page.dataset.jobId);
  let axis = "step";

  function entries() {
    const byChart = new Map();
    const attempts = new Set([...data.series.values()].map((one) => one.attempt));
    for (const one of data.series.values()) {
      const chart = gpMetrics.chartOf(one.name);
      const found = byChart.get(chart.key) || { title: chart.title, lines: [] };
      const attempt = attempts.size > 1 ? `attempt ${one.attempt}` : "";
      const label = chart.gpu === null ? attempt || one.name : [`GPU ${chart.gpu}`, attempt].filter(Boolean).join(", ");
      const color = chart.gpu === null ? one.attempt - 1 : chart.gpu;
      found.lines.push({ label, color, series: one });
      byChart.set(chart.key, found);
    }
    return byChart;
  }

  function draw() {
    const byChart = entries();
    if (!byChart.size) {
      state.textContent = data.complete
        ? "This job reported no metrics."
        : "No metrics yet: a job reports them with gpupool.metrics.log(step=..., loss=...).";
      return;
    }
    const origin = data.firstTime();
    const keys = [...byChart.keys()].sort(gpMetrics.chartOrder);
    const figures = keys.map((key) => gpCharts.figure(key, byChart.get(key).title, byChart.get(key).lines, axis, origin));
    gp.replaceChildren(charts, ...figures);
    state.textContent = data.complete ? `${keys.length} chart${keys.length === 1 ? "" : "s"}` : "Live";
  }

  async function poll() {
    try {
      if (await data.update()) draw();
      else if (data.complete) draw();
    } catch (error) {
      state.textContent = `Not updated: ${error.message}; retrying`;
    }
    if (!data.complete) setTimeout(poll, gp.refreshMs());
  }

  for (const choice of card.querySelectorAll('input[name="metric-axis"]')) {
    choice.addEventListener("change", () => {
      axis = choice.value;
      draw();
    });
  }
  poll();
})();
