"use strict";
// Comparison: mean ± standard error per cell and the overlaid distributions
// of final device accuracies (FedAvg vs q-FFL vs TERM); live while runs run.
(() => {
  const { page, api, meanSe, element, updateRunFields, plot, poll, COLORS } = TermFL;
  // Run ids travel as repeated run= parameters: an id may hold a comma.
  const runIds = JSON.parse(page.dataset.runIds || "[]");
  const query = runIds.length ? runIds.map((id) => ["run", id]) : { scenario: page.dataset.scenario };
  const splitSelect = document.getElementById("compare-split");
  const tableStats = Array.from(document.querySelectorAll("#cells th[data-stat]")).map((th) => th.dataset.stat);
  let data = null;

  function draw() {
    const split = splitSelect.value;
    document.querySelector("#cells tbody").replaceChildren(...data.cells.map((cell) => element("tr", {}, [
      element("td", { text: cell.label, title: `config hash ${cell.config_hash}` }),
      element("td", { text: `${cell.n} (${cell.seeds.join(", ")})` }),
      ...tableStats.map((stat) => element("td", { className: "num", text: meanSe(cell.stats[split][stat]) })),
    ])));
    plot("chart-compare-histogram", data.cells.map((cell, i) => ({
      type: "histogram", name: cell.label, x: cell.accuracies[split], histnorm: "probability", opacity: 0.55,
      xbins: { start: 0, end: 1.05, size: 0.05 },
      marker: { color: COLORS[i % COLORS.length], line: { color: COLORS[i % COLORS.length], width: 1.5 } },
      hovertemplate: "accuracy %{x}<br>%{y:.2f} of devices",
    })), {
      barmode: "overlay", height: 420,
      xaxis: { title: { text: `final ${split} accuracy of a device` }, range: [0, 1.05] },
      yaxis: { title: { text: "fraction of devices" } },
    });
    for (const run of data.runs) {
      const row = document.querySelector(`#compare-runs tr[data-run-id="${CSS.escape(run.run_id)}"]`);
      if (row) updateRunFields(row, run);
    }
  }

  splitSelect.addEventListener("change", draw);
  poll(async () => {
    data = await api.compare(query);
    draw();
    return data.runs.some((run) => run.status === "running");
  });
})();
