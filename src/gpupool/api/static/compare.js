// Compare view: the metrics of several jobs overlaid, a chart per metric and a line per job.
"use strict";

(() => {
  const root = document.getElementById("compare");
  if (!root) return;
  const charts = document.getElementById("metric-charts");
  const state = document.getElementById("metrics-state");
  const jobs = [...root.querySelectorAll("[data-compared]")].map((node, index) => ({
    id: node.dataset.compared,
    label: node.dataset.label,
    color: index,
    data: new gpMetrics.JobSeries(node.dataset.compared),
  }));
  let axis = "step";

  // A job's points of one metric over all its attempts, in order.
  function joined(job, name) {
    const parts = [...job.data.series.values()].filter((one) => one.name === name).sort((a, b) => a.attempt - b.attempt);
    return {
      steps: parts.flatMap((one) => one.steps),
      times: parts.flatMap((one) => one.times),
      values: parts.flatMap((one) => one.values),
    };
  }

  function draw() {
    const names = new Set();
    for (const job of jobs) for (const one of job.data.series.values()) names.add(one.name);
    if (!names.size) {
      state.textContent = "None of these jobs reported metrics.";
      return;
    }
    const figures = [...names].sort(gpMetrics.chartOrder).map((name) => {
      const lines = jobs
        .map((job) => ({ label: job.label, color: job.color, series: joined(job, name) }))
        .filter((line) => line.series.values.length);
      // each job's time axis starts at its own first point: runs overlay from their starts
      const shifted = lines.map((line) => ({ ...line, series: { ...line.series, times: line.series.times.map((t) => t - line.series.times[0]) } }));
      return gpCharts.figure(name, name, shifted, axis, 0);
    });
    gp.replaceChildren(charts, ...figures);
    const live = jobs.some((job) => !job.data.complete);
    state.textContent = live ? "Live" : `${figures.length} chart${figures.length === 1 ? "" : "s"}`;
  }

  async function poll() {
    try {
      const grew = await Promise.all(jobs.map((job) => (job.data.complete ? false : job.data.update())));
      if (grew.some(Boolean) || jobs.every((job) => job.data.complete)) draw();
    } catch (error) {
      state.textContent = `Not updated: ${error.message}; retrying`;
    }
    if (jobs.some((job) => !job.data.complete)) setTimeout(poll, gp.refreshMs());
  }

  for (const choice of root.querySelectorAll('input[name="metric-axis"]')) {
    choice.addEventListener("change", () => {
      axis = choice.value;
      draw();
    });
  }
  if (jobs.length) poll();
})();
