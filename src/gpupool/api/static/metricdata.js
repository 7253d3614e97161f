// Reading a job's metrics from the API: every page of points, then only what is new.
"use strict";

const gpMetrics = (() => {
  const GPU = /^gpu\.(\d+)\.(utilization|memory_used)$/;
  const GPU_TITLES = { utilization: "GPU utilisation (%)", memory_used: "GPU memory used (bytes)" };

  // A job's series as they come in: "attempt|name" -> {name, attempt, steps, times, values}.
  class JobSeries {
    constructor(jobId) {
      this.jobId = jobId;
      this.cursor = 0;
      this.complete = false;
      this.series = new Map();
    }

    // Read everything kept since the last read; true when something new came.
    async update() {
      let more = true;
      let grew = false;
      while (more) {
        const answer = await gp.api("GET", `/jobs/${Number(this.jobId)}/metrics?after=${this.cursor}`);
        for (const part of answer.series) {
          this.add(part);
          grew = true;
        }
        this.cursor = answer.cursor;
        this.complete = answer.complete;
        more = answer.more;
      }
      return grew;
    }

    add(part) {
      const key = `${part.attempt}|${part.name}`;
      const known = this.series.get(key) || { name: part.name, attempt: part.attempt, steps: [], times: [], values: [] };
      known.steps.push(...part.steps);
      known.times.push(...part.times);
      known.values.push(...part.values);
      this.series.set(key, known);
    }

    firstTime() {
      let first = Infinity;
      for (const one of this.series.values()) if (one.times.length) first = Math.min(first, one.times[0]);
      return first === Infinity ? 0 : first;
    }
  }

  // Which chart a series belongs to: its own name, or all the GPUs' utilisation (memory).
  function chartOf(name) {
    const gpu = GPU.exec(name);
    if (!gpu) return { key: name, title: name, gpu: null };
    return { key: `gpu.*.${gpu[2]}`, title: GPU_TITLES[gpu[2]], gpu: Number(gpu[1]) };
  }

  // Charts first by name, the GPUs' last.
  function chartOrder(a, b) {
    const [ga, gb] = [a.startsWith("gpu."), b.startsWith("gpu.")];
    if (ga !== gb) return ga ? 1 : -1;
    return a < b ? -1 : a > b ? 1 : 0;
  }

  return { JobSeries, chartOf, chartOrder };
})();
