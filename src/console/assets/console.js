// hivegate console: the page's only script, served from this origin (no inline script anywhere).
// - [data-copy=ID]: copies the value of the element ID to the clipboard.
// - form[data-confirm]: asks before submitting.
// - [data-refresh=URL]: replaces the element's content with URL's every two seconds (the live page).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("[data-copy]")) {
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      if (!source) return;
      try {
        await navigator.clipboard.writeText(source.value);
        button.textContent = "Copied";
      } catch (_) {
        source.select();
        button.textContent = "Press Ctrl+C to copy";
      }
    });
  }
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
  for (const region of document.querySelectorAll("[data-refresh]")) {
    const refresh = async () => {
      try {
        const response = await fetch(region.dataset.refresh, { credentials: "same-origin", cache: "no-store" });
        if (response.redirected || !response.ok) return;
        const parsed = new DOMParser().parseFromString(await response.text(), "text/html");
        region.replaceChildren(...parsed.body.childNodes);
      } catch (_) {
        // The next tick tries again.
      }
    };
    setInterval(refresh, 2000);
  }
});
