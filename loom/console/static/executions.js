// Executions: filters, counts by status, a page of rows, paging by next_cursor, live refresh.
"use strict";
(() => {
  const { h, api, fail, say, when, duration, errorLine, badge, copyButton, executionLink, every } = Loom;
  const STATUSES = ["RUNNING", "SLEEPING", "WAITING", "BLOCKED", "COMPLETED", "FAILED", "CANCELLED", "COMPENSATING", "COMPENSATED", "COMPENSATION_FAILED"];
  const COUNT_WINDOW = 500;
  const params = new URLSearchParams(location.search);
  const state = { cursors: [null], page: 0, next: null, steps: {} };
  const $ = (id) => document.getElementById(id);

  for (const s of STATUSES) $("f-status").append(h("option", { value: s }, s.toLowerCase().replaceAll("_", " ")));
  $("f-status").value = params.get("status") || "";

  function filters() {
    return { status: $("f-status").value, workflow: $("f-workflow").value, limit: $("f-limit").value };
  }

  function query(extra) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(extra)) if (v) q.set(k, v);
    return q.toString();
  }

  function stepName(ex) {
    const names = state.steps[ex.workflow];
    const name = names && names[ex.current_step];
    return name ? `${ex.current_step} ${name}` : String(ex.current_step);
  }

  function row(ex, nowEpoch) {
    const err = errorLine(ex.error);
    return h("tr", { "data-id": ex.id },
      h("td", { class: "id" }, executionLink(ex.id), " ", copyButton(ex.id, `execution id ${ex.id}`)),
      h("td", {}, ex.workflow),
      h("td", {}, badge(ex.status)),
      h("td", {}, stepName(ex)),
      h("td", { title: when(ex.created_at_epoch) }, duration(Math.max(0, nowEpoch - ex.created_at_epoch))),
      h("td", { class: err ? "error-text" : "" }, err));
  }

  async function loadCounts() {
    const f = filters();
    const page = await api("GET", `/api/executions?${query({ workflow: f.workflow, limit: COUNT_WINDOW })}`);
    const counts = {};
    for (const ex of page.executions) counts[ex.status] = (counts[ex.status] || 0) + 1;
    const list = $("counts");
    list.replaceChildren(...STATUSES.filter((s) => counts[s]).map((s) => h("li", {}, badge(s), ` ${counts[s]}`)));
    if (!list.children.length) list.append(h("li", { class: "muted" }, "no executions"));
    $("counts-note").textContent = page.next_cursor
      ? `Among the newest ${COUNT_WINDOW} executions${f.workflow ? " of " + f.workflow : ""}.`
      : `All ${page.executions.length} executions${f.workflow ? " of " + f.workflow : ""}.`;
  }

  async function loadPage() {
    const f = filters();
    const cursor = state.cursors[state.page];
    const page = await api("GET", `/api/executions?${query({ ...f, cursor })}`);
    // The functions' clock may run ahead locally (time travel): age is measured on the newest update seen.
    const nowEpoch = Math.max(Date.now() / 1000, ...page.executions.map((e) => e.updated_at_epoch || 0));
    const body = $("executions").querySelector("tbody");
    body.replaceChildren(...page.executions.map((ex) => row(ex, nowEpoch)));
    if (!page.executions.length) body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No execution matches.")));
    state.next = page.next_cursor;
    $("next").disabled = !page.next_cursor;
    $("prev").disabled = state.page === 0;
    $("page-note").textContent = `Page ${state.page + 1}, newest first, refreshed ${new Date().toLocaleTimeString()}`;
  }

  async function refresh() {
    try {
      await Promise.all([loadPage(), loadCounts()]);
    } catch (err) { fail(err); }
  }

  async function loadWorkflows() {
    try {
      const data = await api("GET", "/api/workflows");
      for (const w of data.workflows) {
        state.steps[w.name] = w.steps.map((s) => s.name);
        $("f-workflow").append(h("option", { value: w.name }, w.name));
      }
      $("f-workflow").value = params.get("workflow") || "";
    } catch (err) { fail(err); }
  }

  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    state.cursors = [null];
    state.page = 0;
    const q = query({ status: $("f-status").value, workflow: $("f-workflow").value });
    history.replaceState(null, "", q ? `/?${q}` : "/");
    say("");
    refresh();
  });
  $("next").addEventListener("click", () => {
    if (!state.next) return;
    state.cursors[state.page + 1] = state.next;
    state.page += 1;
    refresh();
  });
  $("prev").addEventListener("click", () => {
    if (state.page === 0) return;
    state.page -= 1;
    refresh();
  });

  loadWorkflows().then(refresh);
  every(3000, () => $("f-live").checked, refresh);
})();
