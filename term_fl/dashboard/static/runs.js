"use strict";
// Runs list: one page of runs, filtered by the server (the form's fields); sorting of the
// page, selection for a comparison, and live progress while a shown run is running.
(() => {
  const { page, api, element, updateRunFields, notice, poll } = TermFL;
  const table = document.getElementById("runs-table");
  if (!table) return; // empty store
  const tbody = table.tBodies[0];
  const rows = () => Array.from(tbody.rows);
  const form = document.getElementById("filters");
  const compareSelected = document.getElementById("compare-selected");

  for (const select of form.querySelectorAll("select[data-filter]")) {
    select.addEventListener("change", () => form.requestSubmit());
  }
  form.addEventListener("formdata", (event) => { // no empty filters in the address
    for (const [key, value] of Array.from(event.formData.entries())) if (!value) event.formData.delete(key);
  });

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

  for (const th of table.tHead.rows[0].cells) {
    if (!th.classList.contains("nosort")) th.addEventListener("click", () => sortBy(th));
  }
  tbody.addEventListener("change", () => {
    compareSelected.disabled = selectedIds().length === 0;
  });
  document.getElementById("select-all").addEventListener("change", (event) => {
    for (const row of rows()) row.querySelector("input.select-run").checked = event.target.checked;
    compareSelected.disabled = selectedIds().length === 0;
  });
  compareSelected.addEventListener("click", () => {
    window.location.href = "/compare?" + new URLSearchParams(selectedIds().map((id) => ["run", id]));
  });

  // Refresh this page of runs (same filters, same offset) while one of them is running.
  const anyRunning = () => rows().some((row) => row.dataset.status === "running");
  if (anyRunning()) {
    const query = new URLSearchParams(page.dataset.query);
    query.set("offset", page.dataset.offset);
    query.set("limit", page.dataset.limit);
    poll(async () => {
      const known = new Set(rows().map((row) => row.dataset.runId));
      const runs = await api.runs(query);
      let added = 0;
      for (const run of runs) {
        const row = tbody.querySelector(`tr[data-run-id="${CSS.escape(run.run_id)}"]`);
        if (row) updateRunFields(row, run);
        added += !known.has(run.run_id);
      }
      if (added) {
        const reload = element("a", { text: "Reload" });
        reload.href = window.location.pathname + window.location.search;
        notice(`${added} new run${added > 1 ? "s" : ""} recorded since this page loaded. `).append(reload);
      }
      return anyRunning();
    });
  }
})();
