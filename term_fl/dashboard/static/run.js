"use strict";
// One run: fairness curves per round, the devices at a chosen round, the
// tilted weights; redrawn every few seconds while the run is running.
(() => {
  const { page, api, fmt, element, updateRunFields, plot, poll, SPLITS, COLORS, STATISTICS } = TermFL;
  const runId = page.dataset.runId;
  const slider = document.getElementById("round");
  const roundValue = document.getElementById("round-value");
  const splitSelect = document.getElementById("device-split");
  const tableStats = Array.from(document.querySelectorAll("#last-round th[data-stat]")).map((th) => th.dataset.stat);
  let deviceRounds = []; // rounds with evaluations of the chosen split; the slider indexes them
  let request = 0; // drops answers to superseded device requests

  // One chart per group of statistics (the template made a div for each), one curve per statistic and split.
  const charts = Array.from(document.querySelectorAll(".chart.statistics")).map((div) => {
    const members = STATISTICS.filter((s) => s.group === div.dataset.group);
    return {
      id: div.id,
      axis: members.length ? members[0].axis : "",
      risk: div.dataset.group === "risk",
      curves: members.map((s, i) => [s.key, s.label, COLORS[i % COLORS.length]]),
    };
  });

  function lines(series, curves) {
    const traces = [];
    for (const split of SPLITS) {
      const columns = series.splits[split.key] || {};
      for (const [key, label, color] of curves) {
        if (!columns[key]) continue;
        traces.push({
          type: "scatter", mode: "lines+markers", name: `${label} (${split.label})`,
          x: columns.round, y: columns[key], line: { color, dash: split.dash }, marker: { size: 4 },
        });
      }
    }
    return traces;
  }

  function drawRounds(series) {
    const round = { title: { text: "round" } };
    const alpha = ((series.splits.test || {}).alpha || []).find((a) => a != null);
    for (const chart of charts) {
      plot(chart.id, lines(series, chart.curves), { xaxis: round, yaxis: { title: { text: chart.axis } } },
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

  function drawWeights(weights, run) {
    const any = weights.weights.some((row) => row.some((w) => w != null));
    const traces = any
      ? [{
          type: "heatmap", x: weights.rounds, y: weights.devices, z: weights.weights, colorscale: "Viridis",
          hoverongaps: false, colorbar: { title: { text: "weight" } },
          hovertemplate: "%{y}, round %{x}<br>weight %{z:.4f}<extra></extra>",
        }]
      : [];
    plot("chart-weights", traces, {
      height: Math.min(900, 140 + 16 * weights.devices.length),
      xaxis: { title: { text: "round" } },
      yaxis: { type: "category", autorange: "reversed" },
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
      type: "bar", x: sorted.map((d) => d.name), y: sorted.map((d) => d.accuracy), marker: { color: COLORS[0] },
      customdata: sorted.map((d) => [d.examples, d.loss]),
      hovertemplate: "%{x}<br>accuracy %{y:.3f}<br>%{customdata[0]} examples, loss %{customdata[1]:.3f}<extra></extra>",
    }] : [], {
      margin: { l: 60, r: 20, t: 48, b: 96 },
      xaxis: { type: "category", tickangle: -60, automargin: true },
      yaxis: { title: { text: "accuracy" }, range: [0, 1.02] },
    }, { suffix: where });
  }

  slider.addEventListener("input", () => {
    roundValue.textContent = String(deviceRounds[Number(slider.value)] ?? "—");
    drawDevices(false);
  });
  splitSelect.addEventListener("change", () => drawDevices(following()));

  poll(async () => {
    const latest = following();
    const [run, series, weights] = await Promise.all([api.run(runId), api.rounds(runId), api.weights(runId)]);
    updateRunFields(page, run);
    drawRounds(series);
    drawWeights(weights, run);
    await drawDevices(latest);
    return run.status === "running";
  });
})();
