// delayd dashboard: the pages work without this file; it adds live refresh of the
// overview and runs "retry failed" batch after batch with a running count.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const live = document.getElementById("live");
  if (live) {
    let timer = null;
    const arm = () => { clearTimeout(timer); if (live.checked) timer = setTimeout(() => location.reload(), 5000); };
    live.checked = sessionStorage.getItem("delayd-live") !== "off";
    live.addEventListener("change", () => { sessionStorage.setItem("delayd-live", live.checked ? "on" : "off"); arm(); });
    arm();
  }

  for (const form of document.querySelectorAll("form[data-repeat]")) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const button = form.querySelector("button");
      const csrf = form.querySelector("input[name=csrf]").value;
      button.disabled = true;
      let total = 0, cursor = "";
      try {
        for (;;) {
          const url = form.action + (cursor ? "?cursor=" + encodeURIComponent(cursor) : "");
          const answer = await fetch(url, {method: "POST", headers: {"X-CSRF-Token": csrf, "Accept": "application/json"}});
          const data = await answer.json();
          if (!answer.ok) { button.textContent = data.error || ("error " + answer.status); return; }
          total += data.retried;
          button.textContent = `Retried ${total}, ${data.failed_left} failed left`;
          cursor = data.cursor;
          if (!cursor) break;
        }
      } finally {
        button.disabled = false;
      }
    });
  }
});
