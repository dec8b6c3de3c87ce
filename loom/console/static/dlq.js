// DLQ: the parked records (left in place) and a redrive of them.
"use strict";
(() => {
  const { h, api, fail, say, when, fold, executionLink } = Loom;
  const $ = (id) => document.getElementById(id);

  // When the message was parked: a failed record says it (failed_at); SQS's sent time is when the
  // message was last sent, which a local restart or a redelivery renews, so it is only a fallback.
  function parked(m) {
    const at = m.body && typeof m.body === "object" && typeof m.body.failed_at === "number" ? m.body.failed_at : null;
    return at !== null
      ? h("td", { class: "when parked", title: "when the engine gave up and parked it" }, when(at))
      : h("td", { class: "when parked", title: "no parking time in the message: when SQS last sent it" }, when(m.sent_at_epoch), h("div", { class: "muted" }, "(sent)"));
  }

  function emptyResults(text) {
    $("results").querySelector("tbody").replaceChildren(h("tr", {}, h("td", { colspan: 4, class: "muted" }, text)));
  }

  async function load() {
    const data = await api("GET", "/api/dlq?limit=100");
    $("dlq-count").textContent = `${data.messages.length} shown; about ${data.approximate_count} parked.`;
    const body = $("dlq").querySelector("tbody");
    body.replaceChildren(...data.messages.map((m) => h("tr", {},
      h("td", { class: "mono" }, m.message_id), h("td", {}, m.kind),
      h("td", { class: "id" }, m.execution_id ? executionLink(m.execution_id) : ""),
      h("td", {}, m.receive_count), parked(m), h("td", {}, fold("body", m.body)))));
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
      if (!data.results.length) emptyResults("The redrive found nothing parked: no message was moved.");
      say(`redrive: ${Object.entries(data.summary).map(([k, v]) => `${v} ${k}`).join(", ") || "nothing to do"}`);
      await load();
    } catch (err) { fail(err); }
  });
  $("reload").addEventListener("click", () => load().catch(fail));
  emptyResults("No redrive yet: Redrive moves the parked messages back, and each one's outcome shows here.");
  load().catch(fail);
})();
