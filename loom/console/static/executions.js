// Executions: filters, counts by status, a page of rows, paging by next_cursor, live refresh.
"use strict";
(() => {
  const { h, api, ApiError, fail, say, when, whenShort, duration, TERMINAL, wallAge, clockMoves, errorLine, badge, copyButton, executionLink, every } = Loom;
  const STATUSES = ["RUNNING", "SLEEPING", "WAITING", "BLOCKED", "COMPLETED", "FAILED", "CANCELLED", "COMPENSATING", "COMPENSATED", "COMPENSATION_FAILED"];
  const COUNT_WINDOW = 500;
  const params = new URLSearchParams(location.search);
  const state = { cursors: [null], page: 0, next: null, steps: {}, find: params.get("id") || "" };
  const COLUMNS = 9;
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
    if (TERMINAL.has(ex.status)) return "";  // ended: there is no current step
    const names = state.steps[ex.workflow];
    const name = names && names[ex.current_step];
    return name ? `${ex.current_step} ${name}` : String(ex.current_step);
  }

  // This stack lacks its workflow (or its shape): the row says so, as its page does, with the fix on hover.
  function notRegistered(ex) {
    const missing = ex.unregistered;
    if (!missing) return null;
    const text = missing.code === "workflow_not_registered" ? "not registered" : "definition changed";
    return [" ", h("span", { class: "error-text", "data-unregistered": missing.code, title: missing.message }, text)];
  }

  // An ended execution's last update is its end; its duration runs from start to end.
  function row(ex, wallNow, moves) {
    const err = errorLine(ex.error);
    const ended = TERMINAL.has(ex.status) ? ex.updated_at_epoch : null;
    const age = wallAge(ex.created_at_epoch, wallNow, moves);
    return h("tr", { "data-id": ex.id },
      h("td", { class: "id" }, executionLink(ex.id), " ", copyButton(ex.id, `execution id ${ex.id}`)),
      h("td", {}, ex.workflow),
      h("td", {}, badge(ex.status), notRegistered(ex)),
      h("td", { class: "step" }, stepName(ex)),
      h("td", { class: "when started", title: when(ex.created_at_epoch) }, whenShort(ex.created_at_epoch)),
      h("td", { class: "when ended", title: when(ended) }, whenShort(ended, ex.created_at_epoch)),
      h("td", { class: "when took" }, ended !== null ? duration(Math.max(0, ended - ex.created_at_epoch)) : ""),
      h("td", { class: "when age", title: `started ${when(ex.created_at_epoch)}` }, duration(age)),
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

  function showRows(executions, moves, empty) {
    const wallNow = Date.now() / 1000;
    const body = $("executions").querySelector("tbody");
    body.replaceChildren(...executions.map((ex) => row(ex, wallNow, moves)));
    if (!executions.length) body.append(h("tr", {}, h("td", { colspan: COLUMNS, class: "muted" }, empty)));
  }

  async function loadPage() {
    const f = filters();
    const cursor = state.cursors[state.page];
    const [page, moves] = await Promise.all([api("GET", `/api/executions?${query({ ...f, cursor })}`), clockMoves()]);
    showRows(page.executions, moves, "No execution matches.");
    state.next = page.next_cursor;
    $("next").disabled = !page.next_cursor;
    $("prev").disabled = state.page === 0;
    $("page-note").textContent = `Page ${state.page + 1}, newest first, refreshed ${new Date().toLocaleTimeString()}`;
  }

  // One execution by its id: the list's row for it, or a line saying there is none.
  async function loadOne(wanted) {
    let found = [];
    try {
      found = [await api("GET", `/api/executions/${encodeURIComponent(wanted)}`)];
    } catch (err) {
      if (!(err instanceof ApiError) || (err.status !== 404 && err.status !== 400)) throw err;
    }
    showRows(found, await clockMoves(), `No execution has the id ${wanted}.`);
    $("next").disabled = true;
    $("prev").disabled = true;
    $("page-note").textContent = `The execution with id ${wanted}`;
  }

  async function refresh() {
    try {
      await Promise.all([state.find ? loadOne(state.find) : loadPage(), loadCounts()]);
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
    state.find = "";
    $("f-id").value = "";
    $("find-clear").hidden = true;
    state.cursors = [null];
    state.page = 0;
    const q = query({ status: $("f-status").value, workflow: $("f-workflow").value });
    history.replaceState(null, "", q ? `/?${q}` : "/");
    say("");
    refresh();
  });
  function find(wanted) {
    state.find = wanted;
    $("f-id").value = wanted;
    $("find-clear").hidden = !wanted;
    history.replaceState(null, "", wanted ? `/?${query({ id: wanted })}` : "/");
    say("");
    refresh();
  }
  $("find").addEventListener("submit", (event) => { event.preventDefault(); find($("f-id").value.trim()); });
  $("find-clear").addEventListener("click", () => find(""));
  $("f-id").value = state.find;
  $("find-clear").hidden = !state.find;

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
