"use strict";
// Comparison of cells (same settings, several seeds): the table of final statistics with
// paired differences against every baseline (marked where significant), the fairness trade-off, each statistic
// against the tuned parameter, per-round curves with standard-error bands and the
// ECDF of the final device accuracies. Live while runs run; stops when none does.
// The per-round curves come from their own answer, fetched after the rest is drawn.
(() => {
  const { page, report, api, fmt, meanSe, element, updateRunFields, plot, poll, csvLinks, csvCell, cellStyles, band,
          flatRange } = TermFL;
  // Run ids travel as repeated run= parameters: an id may hold a comma.
  const runIds = JSON.parse(page.dataset.runIds || "[]");
  const query = runIds.length ? runIds.map((id) => ["run", id]) : { scenario: page.dataset.scenario };
  const splitSelect = document.getElementById("compare-split");
  const riskSelect = document.getElementById("risk-stat");
  let data = null;
  let styles = null;
  let curves = null; // cell key -> {split: {statistic: {round, mean, se, n}}}

  const statOf = (key) => data.statistics.find((s) => s.key === key) || { key, label: key, direction: 0 };
  const better = (stat) => (stat.direction > 0 ? "higher is better" : stat.direction < 0 ? "lower is better" : "");
  const arrow = (stat) => (stat.direction > 0 ? "↑" : stat.direction < 0 ? "↓" : "");
  const ARROWS = "↑ higher is better, ↓ lower is better";
  const axisTitle = (stat, split) => `${stat.label} (${split}${better(stat) ? ", " + better(stat) : ""})`;

  // The cells: each headline statistic's mean ± SE over seeds; the validation choice marked.
  function drawTable(split) {
    const columns = data.table_columns.map(statOf);
    const marks = data.significance.marks;
    const head = element("tr", {}, [
      element("th", { text: "cell" }),
      element("th", { text: "seeds", title: "distinct seeds counted (a repeated seed counts once)" }),
      element("th", { text: "rounds" }),
      ...columns.map((s) => element("th", { text: `${s.label} ${arrow(s)}`, title: [s.description, better(s)].filter(Boolean).join("; ") })),
    ]);
    document.querySelector("#cells thead").replaceChildren(head);
    document.querySelector("#cells tbody").replaceChildren(...data.cells.map((cell) => {
      const seeds = String(cell.n) + (Object.keys(cell.repeats).length ? " (+repeats)" : "");
      const repeatNote = Object.entries(cell.repeats)
        .map(([seed, ids]) => `seed ${seed} also ran as ${ids.join(", ")} (a repeat: counted once)`).join("\n");
      const label = element("td", { className: "name" }, [
        element("span", { className: "swatch", title: cell.strategy }),
        cell.label,
        ...(cell.chosen ? [element("span", { className: "chosen", text: ` ${marks.chosen}`, title: cell.chosen })] : []),
      ]);
      label.firstChild.style.background = styles[cell.key].color;
      return element("tr", {}, [
        label,
        element("td", { className: "num", text: seeds, title: [`seeds ${cell.seeds.join(", ")}`, repeatNote].filter(Boolean).join("\n") }),
        element("td", { className: "num", text: cell.rounds }),
        ...columns.map((s) => element("td", { className: "num", text: meanSe(cell.stats[split][s.key]) })),
      ]);
    }));
    const chosenNote = data.cells.some((c) => c.chosen) ? [data.significance.chosen] : [];
    document.getElementById("cells-legend").textContent = [ARROWS, ...chosenNote].join(". ");
    document.getElementById("ring-note").classList.toggle("hidden", !chosenNote.length);
  }

  // One row per cell and baseline: the paired difference of each primary statistic, marked where significant,
  // and the round from which the cell's lift statistic stays ahead. The legend says what a mark means.
  function drawDifferences(split) {
    const diffs = data.difference_columns.map(statOf);
    const lift = statOf(data.lift_stat);
    const byKey = Object.fromEntries(data.cells.map((c) => [c.key, c]));
    const rows = data.cells.flatMap((cell) => Object.entries(cell.baselines).map(([baseline, key]) => ({ cell, baseline, ref: byKey[key] })));
    document.getElementById("paired").classList.toggle("hidden", !rows.length);
    const head = element("tr", {}, [
      element("th", { text: "cell" }),
      element("th", { text: "minus", title: "the baseline cell: same settings, same seeds" }),
      element("th", { text: "pairs", title: "seeds both cells ran" }),
      ...diffs.map((s) => element("th", { text: `Δ ${s.label} ${arrow(s)}`, title: `${s.label}: cell minus baseline, mean ± SE over the paired seeds; ${better(s)}` })),
      element("th", { text: "ahead from round", title: `the round from which the cell's mean ${lift.label} stays ${lift.direction > 0 ? "above" : "below"} the baseline's ("never": not in the last round both evaluated)` }),
    ]);
    document.querySelector("#differences thead").replaceChildren(head);
    document.querySelector("#differences tbody").replaceChildren(...rows.map(({ cell, baseline, ref }) => {
      const differences = cell.differences[baseline][split] || {};
      const pairs = Math.max(0, ...Object.values(differences).map((d) => d.n));
      const ahead = ((cell.ahead[baseline] || {})[split]) || { round: null, rounds_compared: 0 };
      return element("tr", {}, [
        element("td", { className: "name", text: cell.label }),
        element("td", { className: "name", text: ref.label }),
        element("td", { className: "num", text: String(pairs) }),
        ...diffs.map((s) => difference(differences[s.key])),
        element("td", { className: "num", text: ahead.round != null ? String(ahead.round) : ahead.rounds_compared ? "never" : "—" }),
      ]);
    }));
    const favours = `${ARROWS}: a positive Δ of an ↑ statistic, or a negative Δ of a ↓ one, favours the cell`;
    const notes = [favours, ...data.significance.notes].map((text) => element("li", { text }));
    document.getElementById("differences-legend").replaceChildren(...notes);
  }

  function difference(d) {
    if (!d || d.mean == null) return element("td", { className: "num", text: "—" });
    const text = (d.mean > 0 ? "+" : "") + meanSe(d) + (d.significant ? ` ${data.significance.marks.significant}` : "");
    const p = (v) => (v == null ? "—" : Number(v).toPrecision(2));
    const ci = d.ci95[0] == null ? "—" : `[${fmt(d.ci95[0])}, ${fmt(d.ci95[1])}]`;
    const title = [`seeds ${d.seeds.join(", ")}`, `t-test p = ${p(d.p_value)}, Holm p = ${p(d.p_holm)}`,
      `95% interval ${ci}`, `sign-flip p = ${p(d.p_signflip)} (exact; never marks)`].join("\n");
    return element("td", { className: "num" + (d.significant ? " significant" : ""), text, title });
  }

  // Device mean against worst 10% (and against std): one point per cell, error bars in both directions.
  function drawTradeoff(split) {
    const x = statOf(data.tradeoff.x);
    data.tradeoff.y.forEach((key, i) => {
      const y = statOf(key);
      const div = document.getElementById(`chart-tradeoff-${i}`);
      div.dataset.title = `${x.label} vs ${y.label} (${split})`;
      const traces = [];
      // One trace per cell, named in the legend (labels on the points collide where cells coincide).
      for (const strategy of data.strategies) {
        const cells = data.cells.filter((c) => c.strategy === strategy.name && c.stats[split][x.key].mean != null);
        for (const c of cells) {
          traces.push({
            type: "scatter", mode: "markers", name: c.label, legendgroup: strategy.name,
            x: [c.stats[split][x.key].mean], y: [c.stats[split][y.key].mean],
            error_x: { type: "data", array: [c.stats[split][x.key].se ?? 0], thickness: 1 },
            error_y: { type: "data", array: [c.stats[split][y.key].se ?? 0], thickness: 1 },
            marker: { size: 10, color: styles[c.key].color, symbol: styles[c.key].symbol, line: { width: 1, color: "#fff" } },
            hovertemplate: `${c.label} (${c.n} seeds)<br>${x.label} %{x:.3f}<br>${y.label} %{y:.3f}<extra></extra>`,
          });
        }
      }
      const chosen = data.cells.filter((c) => c.chosen && c.stats[split][x.key].mean != null);
      if (chosen.length) {
        traces.push({
          type: "scatter", mode: "markers", name: "chosen on validation",
          x: chosen.map((c) => c.stats[split][x.key].mean), y: chosen.map((c) => c.stats[split][y.key].mean),
          marker: { size: 22, symbol: "circle-open", color: "#111", line: { width: 2 } },
          hovertext: chosen.map((c) => `${c.label}: ${c.chosen}`), hoverinfo: "text",
        });
      }
      plot(div.id, traces, {
        height: 460, legend: { orientation: "h", x: 0, y: -0.3, yanchor: "top" }, // below the x axis's title
        xaxis: { title: { text: axisTitle(x, split) }, zeroline: false, ...flatRange(traces.flatMap((t) => t.x)) },
        yaxis: { title: { text: axisTitle(y, split) }, zeroline: false, ...flatRange(traces.flatMap((t) => t.y)) },
      }, { empty: "no finished cell yet" });
    });
  }

  // For each strategy with a tuned parameter swept over several values: each statistic against it,
  // each baseline cell of its settings (FedAvg ...) as a horizontal line with its standard-error band.
  function drawSweeps(split) {
    const box = document.getElementById("sweeps");
    const wanted = data.sweeps.map((s) => `sweep-${s.id}`);
    if (Array.from(box.children).map((c) => c.id).join() !== wanted.join()) {
      box.replaceChildren(...data.sweeps.map((sweep) => element("section", { id: `sweep-${sweep.id}` }, [
        element("h3", { text: `${sweep.label}: each statistic against ${sweep.param}` }),
        element("div", { className: "charts three" }, data.tradeoff.sweep_stats.map((key) =>
          element("div", { className: "chart", id: `chart-sweep-${sweep.id}-${key}` }))),
      ])));
    }
    for (const sweep of data.sweeps) {
      const cells = sweep.cells.map((key) => data.cells.find((c) => c.key === key));
      const refs = sweep.references.map((key) => data.cells.find((c) => c.key === key));
      const xs = cells.map((c) => c.params[sweep.param]);
      const positive = xs.every((v) => v > 0);
      const logX = positive && Math.max(...xs) / Math.min(...xs) >= 20;
      for (const key of data.tradeoff.sweep_stats) {
        const stat = statOf(key);
        const div = document.getElementById(`chart-sweep-${sweep.id}-${key}`);
        div.dataset.title = `${stat.label} (${split})`;
        const color = styles[cells[0].key].base;
        const traces = [{
          type: "scatter", mode: "lines+markers", name: sweep.label, x: xs,
          y: cells.map((c) => c.stats[split][key].mean),
          error_y: { type: "data", array: cells.map((c) => c.stats[split][key].se ?? 0), thickness: 1 },
          line: { color }, marker: { color, symbol: styles[cells[0].key].symbol, size: 8 },
          hovertemplate: `${sweep.param} = %{x}<br>${stat.label} %{y:.3f}<extra></extra>`,
        }];
        const chosen = cells.filter((c) => c.chosen);
        if (chosen.length) {
          traces.push({
            type: "scatter", mode: "markers", name: "chosen on validation", x: chosen.map((c) => c.params[sweep.param]),
            y: chosen.map((c) => c.stats[split][key].mean), hoverinfo: "skip",
            marker: { size: 20, symbol: "circle-open", color: "#111", line: { width: 2 } },
          });
        }
        refs.forEach((ref, i) => {
          const refStat = ref.stats[split][key];
          if (refStat.mean == null) return;
          const se = refStat.se ?? 0;
          const span = [Math.min(...xs), Math.max(...xs)];
          const group = `reference-${i}`;
          const common = { type: "scatter", mode: "lines", x: span, legendgroup: group, hoverinfo: "skip", showlegend: false };
          traces.unshift(
            { ...common, y: span.map(() => refStat.mean - se), line: { width: 0 } },
            { ...common, y: span.map(() => refStat.mean + se), line: { width: 0 }, fill: "tonexty", fillcolor: "rgba(80,80,80,0.15)" },
            { ...common, y: span.map(() => refStat.mean), name: `${ref.label} (± SE)`, showlegend: true,
              line: { color: "#444", dash: ["dash", "dot", "dashdot"][i % 3], width: 1.5 }, hoverinfo: "name+y" },
          );
        });
        plot(div.id, traces, {
          height: 340, showlegend: true,
          xaxis: { title: { text: sweep.param }, type: logX ? "log" : "linear", tickvals: xs, ticktext: xs.map(String) },
          yaxis: { title: { text: axisTitle(stat, split) } },
        });
      }
    }
  }

  function drawCurves(split) {
    const box = document.getElementById("curves");
    if (box.children.length !== data.curves.length) {
      box.replaceChildren(...data.curves.map((c) => element("div", { className: "chart", id: `chart-curve-${c.key}` })));
    }
    if (curves == null) return; // not fetched yet: the empty charts wait for them
    for (const panel of data.curves) {
      const key = panel.choices ? riskSelect.value || panel.choices[0] : panel.key;
      const stat = statOf(key);
      const div = document.getElementById(`chart-curve-${panel.key}`);
      div.dataset.title = `${stat.label} per round (${split})` + (panel.note ? ` — ${panel.note}` : "");
      const traces = [];
      for (const cell of data.cells) {
        const series = (((curves[cell.key] || {})[split] || {})[key]) || { round: [], mean: [], se: [] };
        traces.push(...band(series, styles[cell.key], cell.label, cell.key));
      }
      const means = data.cells.flatMap((cell) => ((((curves[cell.key] || {})[split] || {})[key]) || { mean: [] }).mean);
      plot(div.id, traces, {
        height: 400, hovermode: "x unified",
        xaxis: { title: { text: "round" } }, yaxis: { title: { text: axisTitle(stat, split) }, ...flatRange(means) },
      });
    }
  }

  function drawEcdf(split) {
    const traces = data.cells.map((cell) => {
      const e = (cell.ecdf[split]) || { x: [], y: [] };
      const s = styles[cell.key];
      return {
        type: "scatter", mode: "lines", name: `${cell.label} (${e.x.length} devices)`,
        x: e.x.length ? [e.x[0], ...e.x] : [], y: e.x.length ? [0, ...e.y] : [],
        line: { shape: "hv", color: s.color, dash: s.dash, width: 2 },
        hovertemplate: `${cell.label}<br>%{y:.0%} of devices at or below %{x:.3f}<extra></extra>`,
      };
    });
    plot("chart-ecdf", traces, {
      height: 440,
      xaxis: { title: { text: `final ${split} accuracy of a device` } },
      yaxis: { title: { text: "fraction of devices at or below" }, range: [0, 1.02] },
    }, { suffix: ` — ${split}` });
  }

  function draw() {
    const split = splitSelect.value;
    styles = cellStyles(data.cells, data.strategies);
    if (!riskSelect.options.length) {
      const risk = data.curves.find((c) => c.choices);
      if (risk) riskSelect.replaceChildren(...risk.choices.map((key) => {
        const option = element("option", { text: statOf(key).label });
        option.value = key;
        return option;
      }));
    }
    drawTable(split);
    drawDifferences(split);
    drawTradeoff(split);
    drawSweeps(split);
    drawCurves(split);
    drawEcdf(split);
    for (const run of data.runs) {
      const row = document.querySelector(`#compare-runs tr[data-run-id="${CSS.escape(run.run_id)}"]`);
      if (row) updateRunFields(row, run);
    }
  }

  // The curves table as CSV, for a static report (which inlines the curves once, not their CSV as well):
  // the columns and rows of /api/compare.csv?table=curves, of the rounds the report holds.
  function curvesCsv(answer) {
    const field = (v) => {
      const text = v == null ? "" : String(csvCell(v));
      return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
    };
    const rows = [["cell", "split", "statistic", "round", "mean", "se", "n_seeds"]];
    for (const cell of answer.cells) {
      for (const [split, byKey] of Object.entries(cell.curves)) {
        for (const [key, c] of Object.entries(byKey)) {
          c.round.forEach((r, i) => rows.push([cell.label, split, key, r, c.mean[i], c.se[i], c.n[i]]));
        }
      }
    }
    return rows.map((row) => row.map(field).join(",") + "\r\n").join("");
  }

  function setCurves(answer) {
    curves = Object.fromEntries(answer.cells.map((cell) => [cell.key, cell.curves]));
    const thinned = answer.cells.filter((cell) => cell.thinned);
    const status = document.getElementById("curves-status");
    status.textContent = thinned.length
      ? `Curves of more than ${answer.max_points} evaluated rounds show ${answer.max_points} of them, evenly spaced ` +
        `(the first and the last kept): ${thinned.map((c) => `${c.label} (${c.evaluated_rounds} rounds)`).join(", ")}.`
      : "";
    status.classList.toggle("hidden", !thinned.length);
    if (report && thinned.length) {
      const link = document.querySelector('a[data-csv="curves"]');
      link.textContent = `per-round curves (CSV, at most ${answer.max_points} rounds per cell)`;
    }
  }

  if (report) report.csv.curves = curvesCsv(report.curves);
  csvLinks();
  splitSelect.addEventListener("change", draw);
  riskSelect.addEventListener("change", () => drawCurves(splitSelect.value));
  poll(async () => {
    data = await api.compare(query);
    draw();
    setCurves(await api.compareCurves(query));
    drawCurves(splitSelect.value);
    return data.runs.some((run) => run.status === "running");
  });
})();
