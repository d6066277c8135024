"use strict";
// Runs list: client-side filter and sort of the server-rendered table, run
// selection for a comparison, and live progress while runs are running.
(() => {
  const { api, element, updateRunFields, notice, poll } = TermFL;
  const table = document.getElementById("runs-table");
  if (!table) return; // empty store
  const tbody = table.tBodies[0];
  const rows = () => Array.from(tbody.rows);
  const text = document.getElementById("filter-text");
  const selects = Array.from(document.querySelectorAll("select[data-filter]"));
  const count = document.getElementById("row-count");
  const compareSelected = document.getElementById("compare-selected");
  const compareScenario = document.getElementById("compare-scenario");

  function applyFilters() {
    const needle = text.value.trim().toLowerCase();
    let shown = 0;
    for (const row of rows()) {
      const matches =
        (!needle || (row.textContent + " " + row.dataset.runId).toLowerCase().includes(needle)) &&
        selects.every((s) => !s.value || row.dataset[s.dataset.filter] === s.value);
      row.classList.toggle("hidden", !matches);
      shown += matches;
    }
    count.textContent = `${shown} of ${rows().length} runs`;
    const scenario = document.getElementById("filter-scenario").value;
    compareScenario.classList.toggle("hidden", !scenario);
    compareScenario.href = "/compare?" + new URLSearchParams({ scenario });
  }

  function sortBy(th) {
    const column = th.cellIndex;
    const descending = !th.classList.contains("sorted-desc");
    const numeric = th.dataset.type === "number";
    for (const other of table.tHead.rows[0].cells) other.classList.remove("sorted-asc", "sorted-desc");
    th.classList.add(descending ? "sorted-desc" : "sorted-asc");
    const key = (row) => row.cells[column].dataset.sort ?? row.cells[column].textContent;
    const sorted = rows().sort((a, b) => {
      const x = key(a), y = key(b);
      if (x === "" || y === "") return (x === "") - (y === ""); // missing values last
      const order = numeric ? Number(x) - Number(y) : x.localeCompare(y, undefined, { numeric: true });
      return descending ? -order : order;
    });
    tbody.append(...sorted);
  }

  function selectedIds() {
    return Array.from(tbody.querySelectorAll("input.select-run:checked")).map((box) => box.value);
  }

  text.addEventListener("input", applyFilters);
  for (const s of selects) s.addEventListener("change", applyFilters);
  for (const th of table.tHead.rows[0].cells) {
    if (!th.classList.contains("nosort")) th.addEventListener("click", () => sortBy(th));
  }
  tbody.addEventListener("change", () => {
    compareSelected.disabled = selectedIds().length === 0;
  });
  document.getElementById("select-all").addEventListener("change", (event) => {
    for (const row of rows()) {
      if (!row.classList.contains("hidden")) row.querySelector("input.select-run").checked = event.target.checked;
    }
    compareSelected.disabled = selectedIds().length === 0;
  });
  compareSelected.addEventListener("click", () => {
    window.location.href = "/compare?" + new URLSearchParams(selectedIds().map((id) => ["run", id]));
  });
  applyFilters();

  const anyRunning = () => rows().some((row) => row.dataset.status === "running");
  if (anyRunning()) {
    poll(async () => {
      const known = new Set(rows().map((row) => row.dataset.runId));
      const runs = await api.runs();
      let added = 0;
      for (const run of runs) {
        const row = tbody.querySelector(`tr[data-run-id="${CSS.escape(run.run_id)}"]`);
        if (row) updateRunFields(row, run);
        added += !known.has(run.run_id);
      }
      if (added) {
        const reload = element("a", { text: "Reload" });
        reload.href = window.location.pathname;
        notice(`${added} new run${added > 1 ? "s" : ""} recorded since this page loaded. `).append(reload);
      }
      applyFilters();
      return anyRunning();
    });
  }
})();
