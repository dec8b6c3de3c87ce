// Local stack: the functions' clock (advance, then one sweeper run) and the chaos scenarios.
"use strict";
(() => {
  const { h, api, fail, say, duration, badge, executionLink, every } = Loom;
  const $ = (id) => document.getElementById(id);
  let running = false;  // a chaos run is under way: refresh its row until it ends

  // The sweep report's counts in words ({"due": 7, "woken": 5, ...}).
  function sweepLine(report) {
    const words = { woken: "woke", redriven: "re-drove", postponed: "postponed", skipped: "skipped", errors: "errors" };
    const parts = Object.entries(words).filter(([k]) => report[k]).map(([k, w]) => `${w} ${report[k]}`);
    return `${report.due ?? 0} due${parts.length ? ", " + parts.join(", ") : ""}`;
  }

  function showClock(c) {
    $("clock-now").textContent = c.now;
    $("clock-offset").textContent = c.offset;
  }

  async function advance(by) {
    try {
      const answer = await api("POST", "/local/clock/advance", { duration: by });
      showClock(answer);
      const sweep = answer.sweep;
      $("sweep-result").textContent = sweep
        ? `Advanced ${duration(answer.advanced_seconds)}; the sweeper ran: ${sweepLine(sweep)}`
        : `Advanced ${duration(answer.advanced_seconds)}; the sweeper could not run now (${answer.sweep_error}); its schedule wakes them`;
      say(`clock advanced by ${by}`);
    } catch (err) { fail(err); }
  }

  function runRow(run) {
    const recovery = run.recovery_seconds !== null && run.recovery_seconds !== undefined ? duration(run.recovery_seconds) : "";
    return h("tr", { "data-run": run.id },
      h("td", {}, run.scenario), h("td", {}, badge(run.status || "running"), run.reason ? h("div", { class: "muted" }, run.reason.split("\n")[0]) : null,
        (run.violations || []).length ? h("ul", { class: "error-text" }, run.violations.map((v) => h("li", {}, v))) : null),
      h("td", {}, run.injected), h("td", {}, run.observed), h("td", {}, recovery),
      h("td", {}, h("ul", {}, run.executions.map((id) => h("li", { class: "id" }, executionLink(id))))));
  }

  async function loadChaos() {
    const data = await api("GET", "/local/chaos");
    $("scenarios").querySelector("tbody").replaceChildren(...data.scenarios.map((s) => h("tr", {},
      h("td", {}, s.name), h("td", {}, s.fault, s.available ? null : h("div", { class: "muted" }, `not here: ${s.reason}`)),
      h("td", {}, h("button", { type: "button", class: "small", "data-scenario": s.name, disabled: !s.available, onclick: () => run(s.name) }, `Run ${s.name}`)))));
    $("runs").querySelector("tbody").replaceChildren(...data.runs.slice().reverse().map(runRow));
    return data.runs.some((r) => r.state === "running");
  }

  async function run(name) {
    try {
      await api("POST", `/local/chaos/${encodeURIComponent(name)}`);
      say(`chaos scenario ${name} started`);
      running = await loadChaos();
    } catch (err) { fail(err); }
  }

  $("advance-form").addEventListener("submit", (event) => { event.preventDefault(); advance($("advance-by").value.trim()); });
  for (const button of document.querySelectorAll("button.quick")) button.addEventListener("click", () => advance(button.dataset.d));

  api("GET", "/local/clock").then(showClock).catch(fail);
  loadChaos().then((r) => { running = r; }).catch(fail);
  every(2000, () => true, async () => {
    showClock(await api("GET", "/local/clock"));
    if (running) running = await loadChaos();
  });
})();
