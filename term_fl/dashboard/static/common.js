"use strict";
// Shared by every page: where the data comes from (the JSON API, or the data
// inlined in a static report), formatting, DOM helpers that only ever set
// text (textContent, never HTML), Plotly wrappers and polling.
const TermFL = (() => {
  const page = document.getElementById("page");
  // Every statistic (key, label, group, direction, headline ...), as term_fl.maths.fairness.STATISTICS lists it.
  const STATISTICS = JSON.parse(document.getElementById("statistics").textContent);
  const inline = document.getElementById("report-data");
  const report = inline ? JSON.parse(inline.textContent) : null;
  // The data a page was rendered with (the comparison page inlines its answer): used once, then the API.
  const first = document.getElementById("initial-data");
  let initial = first ? JSON.parse(first.textContent) : null;
  function once(fetcher) {
    return (...args) => {
      if (initial == null) return fetcher(...args);
      const data = initial;
      initial = null;
      return Promise.resolve(data);
    };
  }
  const enc = encodeURIComponent;
  // The pages' control forms only hold selects and sliders: they are never sent (no inline handler: CSP).
  for (const form of document.querySelectorAll("form.controls")) {
    form.addEventListener("submit", (event) => event.preventDefault());
  }

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (!response.ok) {
      const detail = body && typeof body.detail === "string" ? body.detail : response.statusText;
      throw new Error(`${response.status}: ${detail}`);
    }
    return body;
  }

  function reportDevices(round, split) {
    const all = report.devices[split];
    const rounds = all.rounds;
    const r = round == null ? rounds[rounds.length - 1] : round;
    return { split, round: r ?? null, rounds, devices: r == null ? [] : all.by_round[String(r)] };
  }

  // The same questions, answered by the server or by the report's inlined data.
  const api = report
    ? {
        run: async () => report.run,
        rounds: async () => report.rounds,
        weights: async () => report.weights,
        devices: async (_id, round, split) => reportDevices(round, split),
        device: async (_id, partitionId) => report.device_histories[String(partitionId)],
        compare: async () => report.compare,
        compareCurves: async () => report.curves,
      }
    : {
        runs: (query) => getJSON("/api/runs?" + new URLSearchParams(query)),
        run: (id) => getJSON(`/api/runs/${enc(id)}`),
        rounds: (id) => getJSON(`/api/runs/${enc(id)}/rounds`),
        weights: (id) => getJSON(`/api/runs/${enc(id)}/weights`),
        devices: (id, round, split) =>
          getJSON(`/api/runs/${enc(id)}/devices?` + new URLSearchParams(round == null ? { split } : { round, split })),
        device: (id, partitionId) => getJSON(`/api/runs/${enc(id)}/devices/${enc(partitionId)}`),
        compare: once((query) => getJSON("/api/compare?" + new URLSearchParams(query))),
        compareCurves: (query) => getJSON("/api/compare/curves?" + new URLSearchParams(query)),
      };

  // A CSV cell a spreadsheet reads as data: text starting like a formula (=, +, -, @, tab, CR) gets a
  // leading ', numbers stay numbers (term_fl.common.csvcells.csv_cell, the same rule).
  function csvCell(value) {
    return typeof value === "string" && /^[=+\-@\t\r]/.test(value) ? "'" + value : value;
  }

  // Download links (a[data-csv]): the server's CSV address as rendered, or in a static
  // report the CSV text inlined in the report's data (report.csv[name]) as a file.
  function csvLinks(root = document) {
    for (const link of root.querySelectorAll("a[data-csv]")) {
      if (!report) continue;
      const text = (report.csv || {})[link.dataset.csv];
      if (text == null) {
        link.classList.add("hidden");
        continue;
      }
      link.href = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
    }
  }

  function fmt(value, digits = 3) {
    return value == null ? "—" : Number(value).toFixed(digits);
  }

  function meanSe(stat) {
    if (!stat || stat.mean == null) return "—";
    if (stat.se == null) return fmt(stat.mean);
    const se = stat.se !== 0 && Math.abs(stat.se) < 0.001 ? Number(stat.se).toPrecision(2) : fmt(stat.se);
    return `${fmt(stat.mean)} ± ${se}`;
  }

  // <tag class=...>text</tag>; children are appended, strings as text nodes.
  function element(tag, { id, className, text, title } = {}, children = []) {
    const node = document.createElement(tag);
    if (id) node.id = id;
    if (className) node.className = className;
    if (text != null) node.textContent = text;
    if (title != null) node.title = title;
    for (const child of children) node.append(child);
    return node;
  }

  function badge(status) {
    return element("span", { className: `badge ${status}`, text: status });
  }

  // Refresh the [data-field] cells of one run inside `root` (a table row or the run header):
  // status, rounds, finished, and any statistic of the last round's test split by its key.
  function updateRunFields(root, run) {
    const test = (run.final && run.final.test) || {};
    const values = {
      rounds: [`${run.rounds_completed}/${run.rounds_planned}`, run.rounds_completed],
      finished: [run.finished_at == null ? "—" : new Date(run.finished_at * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC", run.finished_at],
    };
    for (const { key } of STATISTICS) values[key] = [fmt(test[key]), test[key]];
    for (const cell of root.querySelectorAll("[data-field]")) {
      const field = cell.dataset.field;
      if (field === "status") {
        cell.replaceChildren(badge(run.status));
        cell.dataset.sort = run.status;
      } else if (field in values) {
        cell.textContent = values[field][0];
        if ("sort" in cell.dataset) cell.dataset.sort = values[field][1] ?? "";
      }
    }
    if (root.dataset.status !== undefined) root.dataset.status = run.status;
  }

  function notice(message) {
    let box = document.getElementById("notice");
    if (!box) {
      box = element("p", { className: "notice" });
      box.id = "notice";
      page.prepend(box);
    }
    box.textContent = message;
    box.classList.remove("hidden");
    return box;
  }

  const PLOT_CONFIG = { responsive: true, displaylogo: false };

  // Titles sit left, clear of Plotly's mode bar on the right.
  function chartTitle(text) {
    return { text, x: 0.01, xanchor: "left", font: { size: 15 } };
  }

  // Draw (or redraw in place) a chart; its title is the div's data-title plus `suffix`.
  // The div gets the height and Plotly fills it, so a resize of the window keeps both in step.
  function plot(id, traces, { height = 380, ...layout } = {}, { suffix = "", empty = "no data yet" } = {}) {
    const div = document.getElementById(id);
    div.style.height = `${height}px`;
    const full = {
      autosize: true,
      margin: { l: 60, r: 20, t: 48, b: 48 },
      legend: { orientation: "h", x: 0, y: -0.22, yanchor: "top" },
      ...layout,
      title: chartTitle(div.dataset.title + suffix),
    };
    if (traces.every((t) => (t.x || t.z || []).length === 0)) {
      Object.assign(full, {
        annotations: [{ text: empty, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }],
        xaxis: { visible: false },
        yaxis: { visible: false },
      });
    }
    return Plotly.react(div, traces, full, PLOT_CONFIG);
  }

  // Call `step` now and every data-poll-seconds while it resolves to true (never in a static report).
  function poll(step) {
    const seconds = Number(page.dataset.pollSeconds || 3);
    const again = async () => {
      let more = false;
      try {
        more = await step();
      } catch (error) {
        notice(`Could not refresh: ${error.message}`);
        more = true;
      }
      if (more && !report) setTimeout(again, seconds * 1000);
    };
    return again();
  }

  const SPLITS = [
    { key: "test", label: "test", dash: "solid" },
    { key: "val", label: "val", dash: "dot" },
  ];
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

  // Colours, markers and dashes of comparison cells: one hue, marker and dash per strategy (in the
  // order of `strategies`), lighter to darker along the strategy's cells (their parameter order).
  const HUES = ["#3b3b3b", "#d95f02", "#1f63b4", "#1b9e77", "#7570b3", "#a6761d", "#e7298a", "#66a61e"];
  const SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "star", "hexagon", "triangle-down"];
  const DASHES = ["solid", "dash", "solid", "dot", "dashdot", "longdash", "solid", "dash"];

  function mix(hex, white) {
    const rgb = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
    return "#" + rgb.map((c) => Math.round(c + (255 - c) * white).toString(16).padStart(2, "0")).join("");
  }

  function cellStyles(cells, strategies) {
    const order = strategies.map((s) => s.name);
    const styles = {};
    for (const cell of cells) {
      let i = order.indexOf(cell.strategy);
      if (i < 0) i = order.length + [...new Set(cells.map((c) => c.strategy))].indexOf(cell.strategy);
      const family = cells.filter((c) => c.strategy === cell.strategy);
      const j = family.indexOf(cell);
      const base = HUES[i % HUES.length];
      const white = family.length > 1 ? 0.6 * (1 - j / (family.length - 1)) : 0;
      styles[cell.key] = { base, color: mix(base, white), symbol: SYMBOLS[i % SYMBOLS.length], dash: DASHES[i % DASHES.length] };
    }
    return styles;
  }

  function rgba(hex, alpha) {
    const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
    return `rgba(${r},${g},${b},${alpha})`;
  }

  // A mean curve with a shaded band of ± one standard error (none where there is one seed).
  function band(series, style, name, group) {
    const lower = series.mean.map((m, i) => (m == null ? null : m - (series.se[i] ?? 0)));
    const upper = series.mean.map((m, i) => (m == null ? null : m + (series.se[i] ?? 0)));
    const common = { type: "scatter", mode: "lines", x: series.round, legendgroup: group, showlegend: false, hoverinfo: "skip" };
    return [
      { ...common, y: lower, line: { width: 0, color: style.color } },
      { ...common, y: upper, line: { width: 0, color: style.color }, fill: "tonexty", fillcolor: rgba(style.color, 0.18) },
      {
        type: "scatter", mode: "lines", name, x: series.round, y: series.mean, legendgroup: group,
        line: { color: style.color, dash: style.dash, width: 2 },
        customdata: series.se.map((se, i) => [se, series.n ? series.n[i] : null]),
        hovertemplate: `${name}: %{y:.3f} ± %{customdata[0]:.3f} (%{customdata[1]} seeds)<extra></extra>`,
      },
    ];
  }

  // An axis for values that are all the same (every accuracy 0, say): a narrow band around the value instead
  // of Plotly's ±1; spread values keep Plotly's own range.
  function flatRange(values) {
    const finite = values.filter((v) => v != null && isFinite(v));
    if (!finite.length) return {};
    const lo = Math.min(...finite), hi = Math.max(...finite);
    if (hi - lo > 1e-9) return {};
    const pad = Math.max(Math.abs(lo) * 0.05, 0.05);
    return { range: [lo - pad, hi + pad] };
  }

  return { page, report, api, fmt, meanSe, element, badge, updateRunFields, notice, plot, poll, csvLinks, csvCell,
           cellStyles, band, flatRange, SPLITS, COLORS, STATISTICS };
})();
