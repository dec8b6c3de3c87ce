// Execution: summary, actions, and a timeline of every step (history records, the current
// wait or sleep, pending steps, execution events, children, map items, chaos marks).
"use strict";
(() => {
  const { h, api, fail, say, when, whenShort, duration, TERMINAL, errorLine, badge, fold, copyButton, executionLink, parseJson, every } = Loom;
  const $ = (id) => document.getElementById(id);
  const id = decodeURIComponent(location.pathname.split("/")[2] || "");
  let latest = null;
  let specs = null;
  const opened = new Set();
  const morePages = new Map();  // step index -> {items, next}: the item pages the reader asked for

  $("ex-id").append(id, " ", copyButton(id, "execution id"));

  // ---------------------------------------------------------------- state of each row

  // What the execution is doing now, in one line: the API's `state` when it has one.
  function nowLine(ex) {
    if (ex.state && ex.state.reason) return { kind: ex.state.kind, text: ex.state.reason, until: ex.state.until_epoch };
    const w = ex.wait;
    if (ex.status === "SLEEPING") return { kind: "sleeping", text: `sleeping until ${when(ex.next_wake_at_epoch)}`, until: ex.next_wake_at_epoch };
    if (ex.status === "WAITING" && w) {
      const what = w.kind === "child" ? `child ${w.child_id || ""}` : `${w.kind} ${w.name || ""}`;
      const timeout = w.deadline_epoch ? ` (timeout ${when(w.deadline_epoch)})` : "";
      return { kind: "waiting", text: `waiting for ${what}${timeout}`, until: w.deadline_epoch };
    }
    // A running execution's next wake is its lease, not an end to draw: the bar runs to now.
    return { kind: ex.status.toLowerCase(), text: ex.status.toLowerCase().replaceAll("_", " "), until: null };
  }

  function stepState(step, ex, current) {
    const status = String(step.status || "").toUpperCase();
    if (step.phase === "compensation" && (status === "RUNNING" || status === "RETRYING")) return "compensating";
    if (current && !TERMINAL.has(ex.status) && (status === "RUNNING" || status === "RETRYING")) {
      const now = nowLine(ex);
      if (now.kind === "waiting" || now.kind === "sleeping") return now.kind;
      if (status === "RETRYING") return "retrying";
    }
    return status.toLowerCase();
  }

  // ---------------------------------------------------------------- rows

  function bar(kind, start, end, span) {
    if (start === null || start === undefined) {
      return h("td", { class: "bar" }, h("div", { class: "track", role: "img", "aria-label": `${kind}, not started` }));
    }
    const fill = h("div", { class: `fill ${kind}` });
    const left = Math.max(0, (start - span.start) / (span.end - span.start)) * 100;
    const right = Math.min(1, ((end ?? span.end) - span.start) / (span.end - span.start)) * 100;
    fill.style.left = `${left.toFixed(2)}%`;
    fill.style.width = `${Math.max(0.4, right - left).toFixed(2)}%`;
    return h("td", { class: "bar" }, h("div", { class: "track", role: "img", "aria-label": `${kind} ${duration(Math.max(0, (end ?? span.end) - start))}` }, fill));
  }

  // The engine's own outer frames (engine/, loom/) say how the step was called, not where it
  // failed: the traceback starts at the first frame of the user's code, and says what it left out.
  const ENGINE_FILE = /^(engine|loom|functions)\//;
  function userFrames(frames) {
    const all = frames || [];
    const first = all.findIndex((f) => !("cut_frames" in f) && !ENGINE_FILE.test(f.file || ""));
    return first <= 0 ? { frames: all, hidden: 0 } : { frames: all.slice(first), hidden: first };
  }

  function traceback(frames) {
    const mine = userFrames(frames);
    const lines = mine.frames.map((f) => ("cut_frames" in f ? `... ${f.cut_frames} frames cut ...` : `${f.file}:${f.line} in ${f.function}`));
    if (mine.hidden) lines.push(`(${mine.hidden} engine frame${mine.hidden === 1 ? "" : "s"} above these left out)`);
    return lines.join("\n");
  }

  function tracebackFold(err) {
    return err && err.traceback ? h("details", { class: "traceback" }, h("summary", {}, "traceback"), h("pre", {}, traceback(err.traceback))) : null;
  }

  // One attempt a line, its error and traceback under it: a list, not a table, so it wraps in
  // the details column however narrow it is.
  function attemptsTable(attempts) {
    return h("ol", { class: "attempts" }, attempts.map((a) => {
      const dur = a.duration_seconds ?? (a.finished_at_epoch && a.started_at_epoch ? a.finished_at_epoch - a.started_at_epoch : null);
      const retry = a.retry_delay !== null && a.retry_delay !== undefined ? ` · retry after ${duration(a.retry_delay)}` : "";
      return h("li", { "data-attempt": a.attempt },
        h("div", {}, `#${a.attempt} `, a.outcome ? badge(a.outcome) : badge("running"),
          h("span", { class: "muted", title: when(a.started_at_epoch) }, ` ${whenShort(a.started_at_epoch)}${dur !== null ? " · " + duration(dur) : ""}${retry}`)),
        a.error ? h("div", { class: "error-text" }, errorLine(a.error)) : null,
        tracebackFold(a.error));
    }));
  }

  const sameError = (a, b) => Boolean(a && b && a.type === b.type && a.message === b.message);

  function details(step) {
    const parts = [];
    if ((step.attempts || []).length) parts.push(h("details", {}, h("summary", {}, `${step.attempts.length} attempt${step.attempts.length === 1 ? "" : "s"}`), attemptsTable(step.attempts)));
    if (step.result !== null && step.result !== undefined) parts.push(Loom.fold("result", step.result));
    if (sameError(step.error, latest && latest.error)) parts.push(h("a", { class: "muted", href: "#summary" }, "the execution's error, above"));
    else if (step.error) parts.push(h("div", { class: "error-text" }, errorLine(step.error)));
    return h("td", { class: "details" }, parts);
  }

  // A compensation (or catch) row says what it undoes: "undo charge_card", not "charge_card#compensate".
  const PHASES = { compensation: { suffix: "#compensate", word: "undo" }, catch: { suffix: "#catch", word: "catch" } };
  function stepLabel(step) {
    const kind = step.kind && step.kind !== "step" ? ` [${step.kind}]` : "";
    const phase = PHASES[step.phase];
    if (!phase) return `${step.index} ${step.name}${kind}`;
    const name = String(step.name).endsWith(phase.suffix) ? step.name.slice(0, -phase.suffix.length) : step.name;
    return h("span", {}, h("span", { class: `phase ${step.phase}` }, `↩ ${phase.word}`), ` ${step.index} ${name}${kind}`);
  }

  function stepRow(step, stateKind, span, extra) {
    const phase = step.phase === "compensation" ? "undo" : PHASES[step.phase] ? `phase-${step.phase}` : "";
    const end = step.finished_at_epoch ?? null;
    const dur = step.duration_seconds ?? (step.finished_at_epoch && step.started_at_epoch ? step.finished_at_epoch - step.started_at_epoch : null);
    return h("tr", { class: [extra && extra.nested ? extra.nested : "", phase].filter(Boolean).join(" "), "data-step": step.index, "data-state": stateKind, "data-phase": step.phase || "forward" },
      h("td", {}, stepLabel(step)),
      h("td", {}, badge(stateKind), extra && extra.text ? h("div", { class: "muted" }, extra.text) : null),
      h("td", { class: "when" }, when(step.started_at_epoch)),
      h("td", {}, duration(dur)),
      bar(stateKind, step.started_at_epoch, end, span),
      details(step));
  }

  // Map items (and parallel branches) as nested rows; an item without its own times is drawn
  // from its step's start for its duration. Later pages come from ?step=N&items_from=K.
  function itemRows(step, span) {
    const extra = morePages.get(step.index);
    const items = (step.items || []).concat(extra ? extra.items.filter((i) => i.index >= (step.items || []).length) : []);
    const next = extra ? extra.next : step.items_next;
    const rows = items.map((item) => {
      // An item that never started (no times, no duration) draws no bar, as a step that never ran.
      const start = item.started_at_epoch ?? (item.duration_seconds != null ? step.started_at_epoch ?? null : null);
      const end = item.finished_at_epoch ?? (start !== null && item.duration_seconds != null ? start + item.duration_seconds : null);
      return stepRow(
        { index: `${step.index}.${item.index}`, name: item.name || `item ${item.index}`, status: item.status, attempts: item.attempts || [],
          started_at_epoch: start, finished_at_epoch: end, duration_seconds: item.duration_seconds, result: item.result, error: item.error },
        String(item.status || "pending").toLowerCase(), span, { nested: "nested" });
    });
    if (step.n != null && step.items) rows.unshift(progressRow(step));
    if (next != null) {
      const button = h("button", { type: "button" }, `more items (from ${next})`);
      button.addEventListener("click", () => moreItems(step.index, items, next).catch(fail));
      rows.push(h("tr", { class: "nested" }, h("td", {}, ""), h("td", { colspan: "5" }, button)));
    }
    return rows;
  }

  // A fan-out at a glance, before its pages of item rows: the join's counts and one bar of them.
  function progressRow(step) {
    const rest = Math.max(0, step.n - step.ok - step.failed);
    const restWord = TERMINAL.has((latest && latest.status) || "") ? "not run" : "running or to come";
    const parts = [["completed", step.ok, "succeeded"], ["failed", step.failed, "failed"], ["pending", rest, restWord]];
    const counts = `${step.ok} succeeded, ${step.failed} failed of ${step.n}${rest ? `; ${rest} ${restWord}` : ""}${step.decided ? `; join ${step.decided.toLowerCase()}` : ""}`;
    const bar = h("div", { class: "progress", role: "img", "aria-label": counts },
      parts.filter(([, n]) => n > 0).map(([kind, n, word]) =>
        h("span", { class: `seg ${kind}`, "data-count": n, title: `${n} ${word}` })));
    for (const seg of bar.children) seg.style.width = `${((Number(seg.dataset.count) / Math.max(1, step.n)) * 100).toFixed(2)}%`;
    return h("tr", { class: "nested progress-row", "data-state": "items" }, h("td", {}, "items"),
      h("td", { colspan: "5" }, h("div", { class: "muted" }, counts), bar));
  }

  async function moreItems(index, have, from) {
    const page = await api("GET", `/api/executions/${encodeURIComponent(id)}/history?step=${index}&items_from=${from}`);
    morePages.set(index, { items: have.concat(page.items), next: page.items_next });
    await load();
  }

  function plainRow(label, kind, text, start, end, span, nested, detail) {
    return h("tr", { class: nested || "", "data-state": kind },
      h("td", {}, label), h("td", {}, badge(kind), text ? h("div", { class: "muted" }, text) : null),
      h("td", { class: "when" }, when(start)), h("td", {}, start && end ? duration(end - start) : start ? `${duration(span.end - start)} so far` : ""),
      bar(kind, start, end, span), h("td", {}, detail || ""));
  }

  // ---------------------------------------------------------------- the timeline

  // The line under the current step: the API's reason, else what the attempts say (a retry's time).
  function currentExtra(step, kind, ex, now) {
    if (kind === "retrying" && !(ex.state && ex.state.reason)) {
      const last = (step.attempts || [])[step.attempts.length - 1];
      const at = last && last.finished_at_epoch != null && last.retry_delay != null ? last.finished_at_epoch + last.retry_delay : ex.next_wake_at_epoch;
      return { text: `retrying (attempt ${(last ? last.attempt : 0) + 1}) at ${when(at)}`, until: at };
    }
    return kind !== String(step.status || "").toLowerCase() || (ex.state && ex.state.reason) ? { text: now.text, until: now.until } : null;
  }

  // Steps of the workflow with no history record yet: still to come, or never run once it ended.
  function pendingSteps(ex, hist) {
    if (hist.pending && !TERMINAL.has(ex.status)) return hist.pending;
    const spec = (specs || []).find((w) => w.name === ex.workflow);
    if (!spec) return hist.pending || [];
    const seen = new Set(hist.steps.filter((s) => (s.phase || "forward") === "forward").map((s) => s.index));
    return spec.steps.filter((s) => s.index >= ex.current_step && !seen.has(s.index)).map((s) => ({ index: s.index, name: s.name, kind: s.kind }));
  }

  // From the start to the end, or to the functions' now (their clock, which time travel moves):
  // never to a wake or a deadline to come, which would squeeze every step that ran.
  function spanOf(ex, hist, runs) {
    const stamps = [ex.created_at_epoch, ex.updated_at_epoch];
    for (const s of hist.steps) stamps.push(s.started_at_epoch, s.finished_at_epoch);
    for (const r of runs) stamps.push(r.started_at, r.finished_at);
    const known = stamps.filter((x) => typeof x === "number");
    const start = Math.min(...known);
    let end = Math.max(...known);
    if (!TERMINAL.has(ex.status)) end = Math.max(end, hist.read_at_epoch ?? ex.read_at_epoch ?? Date.now() / 1000);
    return { start, end: end > start ? end : start + 1 };
  }

  function timeline(ex, hist, runs) {
    const span = spanOf(ex, hist, runs);
    $("timeline").dataset.spanSeconds = String(Math.round(span.end - span.start));
    const rows = [];
    const now = nowLine(ex);
    for (const ev of hist.events || []) {
      if (ev.kind !== "started") continue;
      rows.push(plainRow("execution", "event", "started", ev.at_epoch, ev.at_epoch, span));
    }
    const forward = hist.steps.filter((s) => (s.phase || "forward") === "forward");
    const lastForward = forward.length ? forward[forward.length - 1].index : -1;
    for (const step of hist.steps) {
      const current = step.index === ex.current_step && (step.phase || "forward") === "forward" && step.index === lastForward;
      const kind = stepState(step, ex, current);
      const extra = current && !TERMINAL.has(ex.status) ? currentExtra(step, kind, ex, now) : null;
      rows.push(stepRow(step, kind, span, extra), ...itemRows(step, span));
    }
    for (const p of pendingSteps(ex, hist)) {
      const isCurrent = p.index === ex.current_step && !TERMINAL.has(ex.status);
      const kind = isCurrent ? now.kind : TERMINAL.has(ex.status) ? "not_run" : "pending";
      rows.push(plainRow(`${p.index} ${p.name}${p.kind && p.kind !== "step" ? ` [${p.kind}]` : ""}`, kind, isCurrent ? now.text : "",
        isCurrent ? ex.updated_at_epoch : null, null, span));
    }
    for (const child of ex.children || []) {
      rows.push(h("tr", { class: "nested", "data-state": "child" }, h("td", {}, "child ", executionLink(child.id)), h("td", {}, badge(child.status)),
        h("td", {}), h("td", {}), h("td", {}, child.workflow), h("td", {})));
    }
    for (const ev of hist.events || []) {
      if (ev.kind === "started") continue;
      const text = ev.kind === "cancelled" && ev.compensate ? "cancelled with compensation" : ev.kind;
      rows.push(plainRow("execution", "event", text, ev.at_epoch, ev.at_epoch, span));
    }
    for (const run of runs) {
      const text = `${run.fault}; injected: ${run.injected || "…"}; observed: ${run.observed || "…"}` +
        (run.recovery_seconds !== null && run.recovery_seconds !== undefined ? `; recovered in ${duration(run.recovery_seconds)}` : "");
      rows.push(plainRow(`chaos: ${run.scenario}`, "chaos", text, run.started_at,
        run.recovery_seconds !== null && run.recovery_seconds !== undefined ? run.started_at + run.recovery_seconds : run.finished_at, span,
        "", run.status ? badge(run.status) : badge("running")));
    }
    $("timeline").querySelector("tbody").replaceChildren(...rows);
  }

  // ---------------------------------------------------------------- summary and actions

  function summary(ex) {
    const terminal = TERMINAL.has(ex.status);
    // A failure names its step (a saga's undo moved current_step back since): say that one.
    const failedAt = terminal && ex.error && ex.error.step != null && ex.error.step_name;
    const step = failedAt
      ? `${ex.error.step} ${ex.error.step_name}${ex.error.attempt ? ` (attempt ${ex.error.attempt})` : ""}`
      : `${ex.current_step}${ex.current_step_name ? " " + ex.current_step_name : ""} (attempt ${ex.attempt})`;
    // Once it ended, the state line would only repeat the status and the error: the facts say it.
    const facts = [
      ["Workflow", h("a", { href: `/workflows#wf-${ex.workflow}` }, ex.workflow)],
      ["Status", badge(ex.status)],
      terminal ? null : ["Now", nowLine(ex).text],
      [terminal ? "Ended at step" : "Current step", step],
      ["Created", when(ex.created_at_epoch)],
      [terminal ? "Ended" : "Updated", when(ex.updated_at_epoch)],
      terminal ? ["Took", duration(ex.updated_at_epoch - ex.created_at_epoch)] : null,
    ].filter(Boolean);
    if (ex.parent) facts.push(["Parent", executionLink(ex.parent)]);
    // This stack lacks its workflow: no step is pending and its callbacks are refused until it is registered.
    if (ex.unregistered) facts.push(["Not registered", h("span", { class: "error-text", "data-unregistered": ex.unregistered.code }, ex.unregistered.message)]);
    if (ex.error) facts.push(["Error", h("div", {}, h("span", { class: "error-text" }, errorLine(ex.error)), tracebackFold(ex.error))]);
    $("summary").replaceChildren(...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
    $("act-cancel").disabled = terminal;
    $("forms").hidden = terminal;  // nothing to deliver a callback or a signal to any more
    $("act-compensate").disabled = terminal;
    $("act-redrive").disabled = ex.status !== "FAILED";
    if (ex.wait && ex.wait.kind === "signal" && !$("sig-name").value) $("sig-name").value = ex.wait.name || "";
    // Open the form the execution waits on, once: after that the reader decides.
    const box = ex.wait && { callback: "callback-box", signal: "signal-box" }[ex.wait.kind];
    if (box && !opened.has(box)) { $(box).open = true; opened.add(box); }
  }

  async function load() {
    const local = (await Loom.info()).local;
    const [ex, hist, runs] = await Promise.all([
      api("GET", `/api/executions/${encodeURIComponent(id)}`),
      api("GET", `/api/executions/${encodeURIComponent(id)}/history`),
      local ? api("GET", `/local/chaos/runs?execution=${encodeURIComponent(id)}`).then((r) => r.runs) : Promise.resolve([]),
    ]);
    if (!specs) specs = (await api("GET", "/api/workflows")).workflows;
    latest = ex;
    summary(ex);
    timeline(ex, hist, runs);
    $("data").replaceChildren(fold("input", ex.input), fold("context (the input merged with every result)", ex.output));
  }

  async function act(what, fn) {
    try {
      const answer = await fn();
      say(`${what}: done${answer && answer.status ? " (" + answer.status.toLowerCase() + ")" : ""}`);
      await load();
    } catch (err) { fail(err); }
  }

  const path = (suffix) => `/api/executions/${encodeURIComponent(id)}${suffix}`;
  $("act-cancel").addEventListener("click", () => {
    if (confirm(`Cancel ${id}?`)) act("cancel", () => api("POST", path("/cancel")));
  });
  $("act-compensate").addEventListener("click", () => {
    if (confirm(`Cancel ${id} and undo its committed steps?`)) act("cancel with compensation", () => api("POST", path("/cancel"), { compensate: true }));
  });
  $("act-redrive").addEventListener("click", () => act("redrive", () => api("POST", path("/redrive"))));

  function callback(action) {
    const token = $("cb-token").value.trim();
    if (!token) return fail("paste the callback token first");
    let body;
    try {
      if (action === "succeed") body = { result: parseJson($("cb-result").value, "the result") };
      if (action === "fail") body = { error: { type: $("cb-etype").value || "Error", message: $("cb-emsg").value || "" } };
    } catch (err) { return fail(err.message); }
    act(`callback ${action}`, () => api("POST", `/api/callbacks/${encodeURIComponent(token)}/${action}`, body));
  }
  $("callback-form").addEventListener("submit", (event) => { event.preventDefault(); callback("succeed"); });
  $("cb-fail").addEventListener("click", () => callback("fail"));
  $("cb-heartbeat").addEventListener("click", () => callback("heartbeat"));
  $("signal-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const name = $("sig-name").value.trim();
    if (!name) return fail("name the signal to send");
    let payload;
    try { payload = parseJson($("sig-payload").value, "the payload"); } catch (err) { return fail(err.message); }
    act(`signal ${name}`, () => api("POST", path(`/signals/${encodeURIComponent(name)}`), { payload }));
  });

  load().catch(fail);
  every(2000, () => $("f-live").checked && latest && !TERMINAL.has(latest.status), () => load().catch(fail));
})();
