// Workflows: each registered workflow's steps with their retry policies, sleeps, waits,
// fan-outs (parallel/map, drawn generically) and compensations, from GET /workflows.
"use strict";
(() => {
  const { h, api, fail, say, duration, badge, parseJson } = Loom;
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

  function retry(policy) {
    if (!policy) return null;
    if (policy.max_attempts === 1) return "no retry";
    const custom = policy.custom ? ", custom decide()" : "";
    return `up to ${policy.max_attempts} attempts, ${duration(policy.base)} ×${policy.rate} capped at ${duration(policy.max_delay)}, jitter ${policy.jitter}${custom}`;
  }

  // A fan-out's completion policy in words (engine/fanout_spec.py describe_policy).
  function completion(policy) {
    if (!policy) return null;
    if (policy.all) return "every item must succeed";
    const parts = [];
    if (policy.min_successful != null) parts.push(`done when ${policy.min_successful} succeed`);
    if (policy.tolerated_failures != null) parts.push(`tolerates ${policy.tolerated_failures} failure(s)`);
    if (policy.tolerated_failure_percentage != null) parts.push(`tolerates ${policy.tolerated_failure_percentage}% failures`);
    return parts.join(", ");
  }

  // `base`: the workflow's default retry policy, said once at its top: a step says only its own.
  function facts(step, base) {
    const out = [];
    if (step.kind === "sleep") out.push(`sleeps ${duration(step.seconds)}`);
    if (step.kind === "signal") out.push(`waits for signal “${step.signal}”`);
    if (step.kind === "callback") out.push("waits for a callback (token)");
    if (step.kind === "callback_handle") out.push("creates a callback handle (its token for later steps)");
    if (step.kind === "callback_wait") out.push(`waits for callbacks ${(step.callbacks || []).map((n) => `“${n}”`).join(", ")}`);
    if (step.kind === "poll") {
      const st = step.strategy || {};
      out.push(st.kind === "exponential"
        ? `checks after ${duration(st.initial)}, x${st.factor} up to ${duration(st.max)}`
        : `checks every ${duration(step.every)}`);
      if (step.max_checks) out.push(`at most ${step.max_checks} checks`);
      if (step.stateful) out.push("carries state");
    }
    if (step.kind === "child") out.push(`starts child workflow ${step.workflow}`);
    if (step.kind === "parallel") out.push(`${(step.branches || []).length} branches side by side`);
    if (step.kind === "map") out.push(`runs its branch once per item of ${step.items || "its items"}`);
    if (step.item_namer) out.push(`items named by ${step.item_namer}`);
    if (step.max_concurrency) out.push(`at most ${step.max_concurrency} at once`);
    const done = completion(step.completion);
    if (done) out.push(done);
    if (step.wait_timeout) out.push(`times out after ${duration(step.wait_timeout)}`);
    if (step.heartbeat_timeout) out.push(`heartbeat every ${duration(step.heartbeat_timeout)}`);
    if (step.timeout) out.push(`runs at most ${duration(step.timeout)}`);
    if (step.semantics === "at_most_once") out.push("at most once");
    const r = same(step.retry, base) ? null : retry(step.retry);
    if (r) out.push(`retry: ${r}`);
    if (step.compensate) out.push(`compensated by ${step.compensate}${step.compensate_retry ? " (" + retry(step.compensate_retry) + ")" : ""}`);
    if (step.catch) out.push(`caught by ${step.catch}`);
    if (step.serializer) out.push(`serialized by ${step.serializer}`);
    return out;
  }

  function stepItem(step, base) {
    const branches = step.branches || step.steps || null;  // parallel/map: their inner steps, when the API gives them
    return h("li", { "data-kind": step.kind },
      badge(step.kind), " ", h("strong", {}, step.name),
      h("div", { class: "muted" }, facts(step, base).join(" · ")),
      branches && branches.length ? h("ol", { class: "steps branches", start: 0, "aria-label": `${step.name}'s branches` }, branches.map((b) => stepItem(b, base))) : null);
  }

  // A scheduled workflow: its expression, catch-up policy and next fire time (UTC, from its cursor).
  function schedule(s) {
    if (!s) return null;
    const next = s.next_fire ? s.next_fire.replace("T", " ").replace(/:\d\d\.\d+Z$/, " UTC") : "none left";
    return h("p", { class: "schedule", "data-schedule": s.expression },
      badge("schedule"), " ", h("code", {}, s.expression), ` · catch-up: ${s.catch_up.replace("_", " ")} · next fire: `,
      h("time", { datetime: s.next_fire || "" }, next));
  }

  // Each deployed version (and any gone one that still has executions: they are BLOCKED).
  function versions(vs) {
    if (!vs || !vs.length) return null;
    return h("p", { class: "versions" }, "versions: ", ...vs.map((v, i) => h("span", {},
      i ? ", " : "", badge(v.registered ? `v${v.version ?? "?"}` : `v${v.version ?? "?"} not deployed`),
      ` ${v.open} not ended`)));
  }

  // Start an execution: POST /executions through the console (its session header, its origin).
  function startForm(w) {
    const input = h("textarea", { id: `start-input-${w.name}`, name: "input", "aria-describedby": `start-help-${w.name}` }, "{}");
    const given = h("input", { type: "text", id: `start-id-${w.name}`, name: "execution_id", size: 30, autocomplete: "off", spellcheck: "false" });
    const form = h("form", { class: "start", "data-workflow": w.name, "aria-label": `Start ${w.name}` },
      h("label", {}, "Input (JSON object)", input),
      h("label", {}, "Execution id (optional: the same id twice starts it once)", given),
      h("p", { class: "muted", id: `start-help-${w.name}` }, w.input_type ? `The input is a ${w.input_type}.` : "The input is the workflow's first context."),
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, `Start ${w.name}`)));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      let body;
      try {
        body = { workflow: w.name, input: parseJson(input.value, "the input") };
      } catch (err) { return fail(err.message); }
      if (given.value.trim()) body.execution_id = given.value.trim();
      try {
        const ex = await api("POST", "/api/executions", body);
        say(`started ${ex.id}`);
        location.assign(`/executions/${encodeURIComponent(ex.id)}`);
      } catch (err) { fail(err); }
    });
    return h("details", { class: "start-box" }, h("summary", {}, "Start an execution"), form);
  }

  function index(workflows) {
    return h("nav", { "aria-label": "Workflows", class: "panel wf-index", id: "wf-index" },
      h("ul", {}, workflows.map((w) => h("li", {},
        h("a", { href: `#wf-${w.name}` }, w.name), h("span", { class: "muted" }, ` ${plural(w.steps.length, "step", "steps")}`),
        w.schedule ? [" ", badge("schedule")] : null))));
  }

  function section(w) {
    return h("section", { class: "panel", id: `wf-${w.name}`, "aria-labelledby": `wf-h-${w.name}` },
      h("h2", { id: `wf-h-${w.name}` }, w.name),
      h("p", { class: "muted" }, `${plural(w.steps.length, "step", "steps")}; retry unless a step says otherwise: ${retry(w.retry) || "(not reported)"}`,
        " · ", h("a", { href: `/?workflow=${encodeURIComponent(w.name)}` }, "its executions")),
      w.input_type ? h("p", { class: "input-type" }, "input: ", h("code", {}, w.input_type)) : null,
      schedule(w.schedule),
      versions(w.versions),
      h("ol", { class: "steps", start: 0 }, w.steps.map((st) => stepItem(st, w.retry))),
      startForm(w));
  }

  async function load() {
    const data = await api("GET", "/api/workflows");
    document.getElementById("workflows").replaceChildren(index(data.workflows), ...data.workflows.map(section));
    if (location.hash) document.getElementById(location.hash.slice(1))?.scrollIntoView();
  }

  load().catch(fail);
})();
