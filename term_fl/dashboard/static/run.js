"use strict";
// One run: fairness curves per round, the devices at a chosen round, the tilted weights,
// and one device over the rounds (click its bar or its heatmap row). Redrawn every few
// seconds while the run is running; polling stops once it is finished, failed, interrupted or lost.
(() => {
  const { page, api, fmt, element, updateRunFields, plot, poll, csvLinks, flatRange, SPLITS, COLORS, STATISTICS } = TermFL;
  const runId = page.dataset.runId;
  const slider = document.getElementById("round");
  const roundValue = document.getElementById("round-value");
  const splitSelect = document.getElementById("device-split");
  const sortSelect = document.getElementById("weights-sort");
  const tableStats = Array.from(document.querySelectorAll("#last-round th[data-stat]")).map((th) => th.dataset.stat);
  let deviceRounds = []; // rounds with evaluations of the chosen split; the slider indexes them
  let request = 0; // drops answers to superseded device requests
  let weights = null;
  let run = null;
  let openDevice = null; // partition id shown in the drill-down

  // One chart per group of statistics (the template made a div for each), one curve per statistic and split.
  const charts = Array.from(document.querySelectorAll(".chart.statistics")).map((div) => {
    const members = STATISTICS.filter((s) => s.group === div.dataset.group);
    const direction = members.length ? members[0].direction : 0; // a group's statistics share it
    const better = direction > 0 ? "higher is better" : direction < 0 ? "lower is better" : "";
    return {
      id: div.id,
      axis: [members.length ? members[0].axis : "", better].filter(Boolean).join(", "),
      risk: div.dataset.group === "risk",
      curves: members.map((s, i) => [s.key, s.label, COLORS[i % COLORS.length]]),
    };
  });

  // One curve per statistic on the test split; the validation split's curves start hidden (a click on their
  // legend entry shows them), so that a chart shows as many curves as its group has statistics.
  function lines(series, curves) {
    const traces = [];
    for (const [i, split] of SPLITS.entries()) {
      const columns = series.splits[split.key] || {};
      for (const [key, label, color] of curves) {
        if (!columns[key]) continue;
        traces.push({
          type: "scatter", mode: "lines+markers", name: `${label} (${split.label})`, connectgaps: true,
          x: columns.round, y: columns[key], line: { color, dash: split.dash }, marker: { size: 4 },
          visible: i === 0 ? true : "legendonly",
        });
      }
    }
    return traces;
  }

  function drawRounds(series) {
    const round = { title: { text: "round" } };
    const alpha = ((series.splits.test || {}).alpha || []).find((a) => a != null);
    for (const chart of charts) {
      const traces = lines(series, chart.curves);
      const shown = traces.filter((t) => t.visible === true).flatMap((t) => t.y);
      plot(chart.id, traces, { xaxis: round, yaxis: { title: { text: chart.axis }, ...flatRange(shown) } },
        { suffix: chart.risk && alpha != null ? ` at α = ${alpha}` : "" });
    }
    const rows = [];
    for (const split of SPLITS) {
      const columns = series.splits[split.key] || {};
      const last = (columns.round || []).length - 1;
      if (last < 0) continue;
      rows.push(element("tr", {}, [
        element("td", { text: split.label }),
        element("td", { text: String(columns.round[last]) }),
        ...tableStats.map((stat) => element("td", { className: "num", text: fmt((columns[stat] || [])[last]) })),
      ]));
    }
    document.querySelector("#last-round tbody").replaceChildren(...rows);
  }

  // Row order of the heatmap: by device id, by final test loss (highest first) or by training samples.
  function weightOrder() {
    const index = weights.partition_ids.map((_, i) => i);
    const key = sortSelect.value;
    if (key === "loss") index.sort((a, b) => (weights.loss[b] ?? -Infinity) - (weights.loss[a] ?? -Infinity));
    if (key === "size") index.sort((a, b) => (weights.examples[b] ?? -1) - (weights.examples[a] ?? -1));
    return index;
  }

  function drawWeights() {
    const any = weights.weights.some((row) => row.some((w) => w != null));
    const order = weightOrder();
    const traces = any
      ? [{
          type: "heatmap", x: weights.rounds, y: order.map((i) => weights.devices[i]), z: order.map((i) => weights.weights[i]),
          colorscale: "Viridis", hoverongaps: false, colorbar: { title: { text: "weight" } },
          customdata: order.map((i) => weights.rounds.map(() => [weights.examples[i], weights.loss[i], weights.partition_ids[i]])),
          hovertemplate: "%{y}, round %{x}<br>weight %{z:.4f}<br>%{customdata[0]} training samples, final test loss %{customdata[1]:.3f}<extra></extra>",
        }]
      : [];
    plot("chart-weights", traces, {
      height: Math.min(900, 140 + 16 * weights.devices.length),
      xaxis: { title: { text: "round" } },
      yaxis: { type: "category", autorange: "reversed", automargin: true, categoryorder: "array", categoryarray: order.map((i) => weights.devices[i]) },
    }, { empty: `no tilted weights recorded for this ${run.strategy} run` });
  }

  const following = () => deviceRounds.length === 0 || Number(slider.value) === deviceRounds.length - 1;

  async function drawDevices(latest) {
    const mine = ++request;
    const split = splitSelect.value;
    const wanted = latest ? null : deviceRounds[Number(slider.value)];
    let data;
    try {
      data = await api.devices(runId, wanted, split);
    } catch (error) {
      if (wanted == null) throw error;
      data = await api.devices(runId, null, split); // that round has no evaluation of this split
    }
    if (mine !== request) return;
    deviceRounds = data.rounds;
    slider.max = String(Math.max(0, deviceRounds.length - 1));
    slider.value = String(Math.max(0, deviceRounds.indexOf(data.round)));
    roundValue.textContent = data.round == null ? "—" : String(data.round);
    const where = data.round == null ? "" : ` — round ${data.round}, ${split}`;
    const accuracies = data.devices.map((d) => d.accuracy).filter((a) => a != null);
    plot("chart-histogram", accuracies.length ? [{
      type: "histogram", x: accuracies, xbins: { start: 0, end: 1.05, size: 0.05 }, marker: { color: COLORS[0] },
      hovertemplate: "accuracy %{x}<br>%{y} devices<extra></extra>",
    }] : [], {
      bargap: 0.05, margin: { l: 60, r: 20, t: 48, b: 64 },
      xaxis: { title: { text: "accuracy" }, range: [0, 1.05] }, yaxis: { title: { text: "devices" } },
    }, { suffix: where });
    const sorted = [...data.devices].sort((a, b) => (a.accuracy ?? -1) - (b.accuracy ?? -1));
    plot("chart-devices", sorted.length ? [{
      type: "bar", x: sorted.map((d) => d.name), y: sorted.map((d) => d.accuracy),
      marker: { color: sorted.map((d) => (d.partition_id === openDevice ? COLORS[1] : COLORS[0])) },
      customdata: sorted.map((d) => [d.examples, d.loss, d.partition_id]),
      hovertemplate: "%{x}<br>accuracy %{y:.3f}<br>%{customdata[0]} examples, loss %{customdata[1]:.3f}<br>click: follow it over the rounds<extra></extra>",
    }] : [], {
      margin: { l: 60, r: 20, t: 48, b: 96 },
      xaxis: { type: "category", tickangle: -60, automargin: true },
      yaxis: { title: { text: "accuracy" }, range: [0, 1.02] },
    }, { suffix: where });
  }

  // One device over the rounds: accuracy and loss per split, F_k and the tilted weight when sampled.
  async function drawDevice(partitionId, { scroll = false } = {}) {
    openDevice = partitionId;
    const d = await api.device(runId, partitionId);
    if (openDevice !== partitionId) return;
    const box = document.getElementById("drilldown");
    box.classList.remove("hidden");
    box.dataset.partitionId = String(partitionId);
    document.getElementById("drilldown-title").textContent = `${d.name} over the rounds`;
    const t = d.train;
    const sampled = t.sampled.filter(Boolean).length;
    const evalRounds = (d.eval.test || { round: [] }).round.length;
    const sizes = SPLITS.map((s) => {
      const e = d.eval[s.key];
      return e && e.examples.length ? `${e.examples[e.examples.length - 1]} ${s.label}` : null;
    }).filter(Boolean);
    const trainSize = t.num_examples.filter((n) => n != null);
    document.getElementById("drilldown-summary").textContent =
      `samples: ${trainSize.length ? trainSize[trainSize.length - 1] : "?"} train, ${sizes.join(", ")}; ` +
      `sampled in ${sampled} of ${run.rounds_completed} rounds, evaluated in ${evalRounds}.`;
    const round = { title: { text: "round" } };
    const evalTraces = (key) => SPLITS.filter((s) => d.eval[s.key]).map((s, i) => ({
      type: "scatter", mode: "lines+markers", name: s.label, x: d.eval[s.key].round, y: d.eval[s.key][key],
      line: { color: COLORS[i], dash: s.dash }, marker: { size: 4 },
    }));
    plot("chart-device-accuracy", evalTraces("accuracy"), { height: 320, xaxis: round, yaxis: { title: { text: "accuracy" }, range: [0, 1.02] } }, { suffix: ` — ${d.name}` });
    plot("chart-device-loss", [
      ...evalTraces("loss"),
      { type: "scatter", mode: "markers", name: "F_k (train loss of the incoming model, when sampled)", x: t.round, y: t.train_loss,
        marker: { color: COLORS[3], size: 6, symbol: "diamond" } },
    ], { height: 320, xaxis: round, yaxis: { title: { text: "loss" } } }, { suffix: ` — ${d.name}` });
    plot("chart-device-weight", [{
      type: "bar", name: "tilted weight", x: t.round, y: t.tilted_weight, marker: { color: COLORS[4] },
      hovertemplate: "round %{x}<br>weight %{y:.4f}<extra></extra>",
    }], { height: 320, xaxis: { ...round, range: [0.5, Math.max(run.rounds_completed, 1) + 0.5] }, yaxis: { title: { text: "weight" } } },
    { suffix: ` — ${d.name}`, empty: "no tilted weight recorded for this device" });
    plot("chart-device-samples", [
      { type: "scatter", mode: "markers", name: "training samples (reported when sampled)", x: t.round, y: t.num_examples, marker: { color: COLORS[5] } },
      ...SPLITS.filter((s) => d.eval[s.key]).map((s, i) => ({
        type: "scatter", mode: "lines", name: `${s.label} samples`, x: d.eval[s.key].round, y: d.eval[s.key].examples,
        line: { color: COLORS[6 + i], dash: s.dash },
      })),
    ], { height: 320, xaxis: round, yaxis: { title: { text: "samples" }, rangemode: "tozero" } }, { suffix: ` — ${d.name}` });
    if (scroll) {
      box.scrollIntoView({ block: "start" });
      drawDevices(following()); // highlight its bar
    }
  }

  function showStatus(detail) {
    const error = document.getElementById("run-error");
    error.textContent = detail.error || "";
    error.classList.toggle("hidden", !detail.error);
    const note = document.getElementById("status-note");
    note.textContent = detail.status_note || "";
    note.classList.toggle("hidden", !detail.status_note);
  }

  slider.addEventListener("input", () => {
    roundValue.textContent = String(deviceRounds[Number(slider.value)] ?? "—");
    drawDevices(false);
  });
  splitSelect.addEventListener("change", () => drawDevices(following()));
  sortSelect.addEventListener("change", () => weights && drawWeights());
  document.getElementById("drilldown-close").addEventListener("click", () => {
    openDevice = null;
    document.getElementById("drilldown").classList.add("hidden");
  });
  const bindClicks = () => {
    const bars = document.getElementById("chart-devices");
    if (bars.on && !bars.dataset.clickBound) {
      bars.dataset.clickBound = "1";
      bars.on("plotly_click", (event) => drawDevice(event.points[0].customdata[2], { scroll: true }));
    }
    const heat = document.getElementById("chart-weights");
    if (heat.on && !heat.dataset.clickBound) {
      heat.dataset.clickBound = "1";
      heat.on("plotly_click", (event) => drawDevice(event.points[0].customdata[2], { scroll: true }));
    }
  };

  csvLinks();
  poll(async () => {
    const latest = following();
    const [detail, series, w] = await Promise.all([api.run(runId), api.rounds(runId), api.weights(runId)]);
    run = detail;
    weights = w;
    updateRunFields(page, run);
    showStatus(run);
    drawRounds(series);
    drawWeights();
    await drawDevices(latest);
    bindClicks();
    if (openDevice != null && run.status === "running") await drawDevice(openDevice);
    return run.status === "running";
  });
})();
