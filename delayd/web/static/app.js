// delayd dashboard: the pages work without this file; it adds live refresh of the
// overview (held while an action is in progress), a confirmation before a delete, runs
// "retry failed" batch after batch with a running count, and the Failed list's
// "retry selected" / "delete selected" (one POST /api/tasks/TOPIC/ID/ACTION per task).
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const csrf = document.querySelector("meta[name=csrf-token]").content;
  const live = document.getElementById("live");
  let busy = 0;  // actions in progress: the overview does not reload under them
  let timer = null;
  const arm = () => {
    clearTimeout(timer);
    if (live && live.checked && !busy) timer = setTimeout(() => location.reload(), 5000);
  };
  const hold = () => { busy += 1; clearTimeout(timer); };
  const release = () => { busy -= 1; arm(); };
  if (live) {
    live.checked = sessionStorage.getItem("delayd-live") !== "off";
    live.addEventListener("change", () => { sessionStorage.setItem("delayd-live", live.checked ? "on" : "off"); arm(); });
    arm();
  }

  const post = async (url) => {
    const answer = await fetch(url, {method: "POST", headers: {"X-CSRF-Token": csrf, "Accept": "application/json"}});
    let data = {};
    try { data = await answer.json(); } catch (error) { data = {}; }
    return {ok: answer.ok, data: data, error: data.error || ("error " + answer.status)};
  };

  // A form with data-confirm asks first; any form sent leaves the page, so the refresh stops.
  for (const form of document.querySelectorAll("form[method=post]")) {
    form.addEventListener("submit", (event) => {
      if (form.dataset.confirm && !confirm(form.dataset.confirm)) { event.preventDefault(); return; }
      if (!form.dataset.repeat) hold();
    });
  }

  for (const form of document.querySelectorAll("form[data-repeat]")) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const button = form.querySelector("button");
      button.disabled = true;
      hold();
      let total = 0, cursor = "";
      try {
        for (;;) {
          const answer = await post(form.action + (cursor ? "?cursor=" + encodeURIComponent(cursor) : ""));
          if (!answer.ok) { button.textContent = answer.error; return; }
          total += answer.data.retried;
          button.textContent = `Retried ${total}, ${answer.data.failed_left} failed left`;
          cursor = answer.data.cursor;
          if (!cursor) break;
        }
      } finally {
        button.disabled = false;
        release();
      }
    });
  }

  const bulk = document.querySelector(".bulk");
  if (bulk) {
    const picks = [...document.querySelectorAll("input.pick")];
    const all = bulk.querySelector(".pick-all");
    const status = bulk.querySelector(".bulk-status");
    const buttons = [...bulk.querySelectorAll("button[data-bulk]")];
    const chosen = () => picks.filter((pick) => pick.checked && !pick.disabled);
    const update = () => {
      const n = chosen().length;
      for (const button of buttons) button.disabled = n === 0;
      all.checked = n > 0 && n === picks.filter((pick) => !pick.disabled).length;
    };
    all.addEventListener("change", () => {
      for (const pick of picks) if (!pick.disabled) pick.checked = all.checked;
      update();
    });
    for (const pick of picks) pick.addEventListener("change", update);
    for (const button of buttons) {
      button.addEventListener("click", async () => {
        const action = button.dataset.bulk;
        const targets = chosen();
        if (button.dataset.confirm && !confirm(`${button.dataset.confirm} (${targets.length})`)) return;
        for (const other of buttons) other.disabled = true;
        let done = 0;
        const errors = [];
        for (const pick of targets) {
          const answer = await post(pick.dataset.api + "/" + action);
          if (answer.ok) {
            done += 1;
            pick.checked = false;
            pick.disabled = true;
            const row = pick.closest("tr");
            row.classList.add("acted");
            const badge = row.querySelector(".st");
            badge.className = "st st-" + (action === "retry" ? "delayed" : "deleted");
            badge.textContent = action === "retry" ? "retrying" : "deleted";
            for (const rowForm of row.querySelectorAll("form")) rowForm.remove();
          } else {
            errors.push(`${pick.dataset.key}: ${answer.error}`);
          }
          status.textContent = `${action === "retry" ? "Retried" : "Deleted"} ${done} of ${targets.length}`;
        }
        status.textContent += errors.length ? `; ${errors.length} refused (${errors[0]})` : "";
        update();
      });
    }
    bulk.hidden = false;
    update();
  }
});
