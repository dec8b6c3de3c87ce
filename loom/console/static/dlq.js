// DLQ: the parked records (left in place) and a redrive of them.
"use strict";
(() => {
  const { h, api, fail, say, when, fold, executionLink } = Loom;
  const $ = (id) => document.getElementById(id);

  async function load() {
    const data = await api("GET", "/api/dlq?limit=100");
    $("dlq-count").textContent = `${data.messages.length} shown; about ${data.approximate_count} parked.`;
    const body = $("dlq").querySelector("tbody");
    body.replaceChildren(...data.messages.map((m) => h("tr", {},
      h("td", { class: "mono" }, m.message_id), h("td", {}, m.kind),
      h("td", { class: "id" }, m.execution_id ? executionLink(m.execution_id) : ""),
      h("td", {}, m.receive_count), h("td", {}, when(m.sent_at_epoch)), h("td", {}, fold("body", m.body)))));
    if (!data.messages.length) body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "The dead-letter queue is empty.")));
  }

  $("redrive-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const limit = Number($("redrive-limit").value);
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) return fail("redrive at most a whole number from 1 to 100");
    try {
      const data = await api("POST", `/api/dlq/redrive?limit=${limit}`);
      $("results").querySelector("tbody").replaceChildren(...data.results.map((r) => h("tr", {},
        h("td", { class: "mono" }, r.message_id), h("td", { class: "id" }, r.execution_id ? executionLink(r.execution_id) : ""),
        h("td", {}, r.action), h("td", {}, r.reason || ""))));
      say(`redrive: ${Object.entries(data.summary).map(([k, v]) => `${v} ${k}`).join(", ") || "nothing to do"}`);
      await load();
    } catch (err) { fail(err); }
  });
  $("reload").addEventListener("click", () => load().catch(fail));
  load().catch(fail);
})();
