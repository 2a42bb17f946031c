// trainyard console: live regions over server-sent events, forms sent to the REST API, job
// logs followed per rank. No framework, no build step; the pages work for reading without it.
"use strict";

(function () {
  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

  // ---- times: shown in the reader's own time zone --------------------------------------
  function localTimes(root) {
    for (const t of root.querySelectorAll("time[datetime]")) {
      const d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d)) {
        t.title = t.textContent;
        t.textContent = d.toLocaleString(undefined, {
          year: "numeric", month: "2-digit", day: "2-digit",
          hour: "2-digit", minute: "2-digit", second: "2-digit",
        });
      }
    }
  }

  // ---- live regions ---------------------------------------------------------------------
  const state = document.getElementById("live-state");
  function say(text, off) {
    if (!state) return;
    state.textContent = text;
    state.classList.toggle("off", !!off);
  }

  function swap(id, html) {
    const old = document.getElementById(id);
    if (!old) return;
    const focused = document.activeElement && document.activeElement.id;
    const openDetails = [...old.querySelectorAll("details[open]")].map((d, i) => i);
    const box = document.createElement("div");
    box.innerHTML = html;
    const fresh = box.firstElementChild;
    if (!fresh) return;
    const details = fresh.querySelectorAll("details");
    for (const i of openDetails) if (details[i]) details[i].open = true;
    old.replaceWith(fresh);
    localTimes(fresh);
    if (focused) {
      const again = document.getElementById(focused);
      if (again && fresh.contains(again)) again.focus({ preventScroll: true });
    }
    document.dispatchEvent(new CustomEvent("console:updated", { detail: { id } }));
  }

  function live() {
    const url = document.body.dataset.live;
    if (!url) return;
    if (!window.EventSource) return poll(url);
    const source = new EventSource(url);
    source.addEventListener("open", () => say("live"));
    source.addEventListener("update", (e) => {
      const data = JSON.parse(e.data);
      swap(data.id, data.html);
      say("live");
    });
    source.addEventListener("gone", (e) => {
      say(JSON.parse(e.data).message, true);
      source.close();
    });
    source.addEventListener("error", () => say("reconnecting…", true));
  }

  // Without server-sent events: fetch the page again every 5 s and take its live regions.
  function poll(url) {
    say("updating every 5 s");
    setInterval(async () => {
      try {
        const answer = await fetch(url, { credentials: "same-origin" });
        const doc = new DOMParser().parseFromString(await answer.text(), "text/html");
        for (const el of doc.querySelectorAll("main [id]")) {
          if (document.getElementById(el.id) && el.closest("main") && el.parentElement.closest("[id]") === null) {
            swap(el.id, el.outerHTML);
          }
        }
      } catch (err) { say("offline", true); }
    }, 5000);
  }

  // ---- forms that write through the REST API -------------------------------------------
  function clearErrors(form) {
    for (const p of form.querySelectorAll("[data-error-for]")) { p.hidden = true; p.textContent = ""; }
    for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  }

  function showError(form, error) {
    const field = error.field || "";
    const top = field.split(".")[0].split("[")[0];
    const slot = form.querySelector(`[data-error-for="${CSS.escape(field)}"]`)
      || form.querySelector(`[data-error-for="${CSS.escape(top)}"]`)
      || form.querySelector('[data-error-for="*"]')
      || form.querySelector('[data-error-for=""]');
    const input = form.querySelector(`[name="${CSS.escape(top)}"]`);
    if (slot) {
      slot.textContent = (slot.dataset.errorFor === field ? "" : (field ? field + ": " : "")) + error.message;
      slot.hidden = false;
      if (!slot.id) slot.id = "err-" + Math.random().toString(36).slice(2);
    }
    if (input) {
      input.setAttribute("aria-invalid", "true");
      if (slot) input.setAttribute("aria-describedby", slot.id);
      input.focus();
    } else if (slot) {
      slot.setAttribute("tabindex", "-1");
      slot.focus();
    }
  }

  function body(form) {
    if (form.dataset.body === "yaml") {
      return { type: "application/yaml", text: form.querySelector("textarea").value };
    }
    if (form.dataset.body !== "json") return null;
    const out = {};
    for (const el of form.elements) {
      if (!el.name || el.type === "submit") continue;
      const value = el.value.trim();
      if (value === "") continue;
      if (el.dataset.type === "number") {
        const n = Number(value);
        out[el.name] = Number.isFinite(n) ? n : value; // the API names a field that is not a number
      } else {
        out[el.name] = value;
      }
    }
    return { type: "application/json", text: JSON.stringify(out) };
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!form.classList || !form.classList.contains("api-form")) return;
    event.preventDefault();
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
    clearErrors(form);
    const sent = body(form);
    const headers = { "X-CSRF-Token": csrf(), "Accept": "application/json" };
    if (sent) headers["Content-Type"] = sent.type;
    const button = form.querySelector('[type="submit"]');
    if (button) button.disabled = true;
    let answer, data = {};
    try {
      answer = await fetch(form.dataset.action, {
        method: form.dataset.method || "POST", headers, body: sent ? sent.text : undefined,
        credentials: "same-origin",
      });
      data = await answer.json().catch(() => ({}));
    } catch (err) {
      showError(form, { field: "", message: "the server did not answer: " + err });
      if (button) button.disabled = false;
      return;
    }
    if (button) button.disabled = false;
    if (!answer.ok) {
      showError(form, (data && data.error) || { field: "", message: `HTTP ${answer.status}` });
      return;
    }
    const done = form.dataset.done;
    if (done === "job" && data.id) {
      window.location.assign(data.id.startsWith("a-") ? `/jobs?array=${data.id}` : `/jobs/${data.id}`);
    } else if (done === "token" && data.token) {
      const box = document.getElementById("new-token");
      box.hidden = false;
      box.textContent = "";
      box.append("New token (shown once; copy it now): ");
      const code = document.createElement("code");
      code.textContent = data.token;
      box.append(code);
      form.reset();
    } else {
      window.location.reload();
    }
  });

  // ---- job logs ---------------------------------------------------------------------------
  function logs() {
    const panel = document.getElementById("logs");
    if (!panel) return;
    const job = panel.dataset.job;
    const pre = document.getElementById("log");
    const status = document.getElementById("log-status");
    const attemptBox = document.getElementById("log-attempt");
    const follow = document.getElementById("log-follow");
    const download = document.getElementById("log-download");
    const MAX_LINES = 5000;
    let rank = 0, source = null, current = "", count = 0, truncated = false;

    // Terminal control sequences (colours, titles, cursor moves: tqdm, rich, loggers) are
    // taken out of a line rather than shown raw; the download keeps them.
    const ESCAPES = /\x1b\[[0-?]*[ -\/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]/g;
    function plainText(line) { return line.replace(ESCAPES, ""); }

    function latestAttempt() {
      const head = document.getElementById("job_head");
      return head ? head.dataset.attempt : "";
    }

    function open() {
      const attempt = attemptBox.value;
      const key = `${rank}/${attempt || "latest:" + latestAttempt()}`;
      if (key === current && source) return;
      current = key;
      if (source) source.close();
      pre.textContent = "";
      count = 0;
      truncated = false;
      const query = `rank=${rank}` + (attempt ? `&attempt=${attempt}` : "");
      download.href = `/v1/jobs/${job}/logs?${query}`;
      status.textContent = "connecting…";
      source = new EventSource(`/jobs/${job}/log?${query}`);
      source.addEventListener("lines", (e) => {
        const lines = JSON.parse(e.data).map(plainText);
        const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.append(document.createTextNode(lines.join("\n") + "\n"));
        count += lines.length;
        if (count > MAX_LINES) { // keep the newest lines only
          const text = pre.textContent.split("\n");
          pre.textContent = text.slice(text.length - MAX_LINES - 1).join("\n");
          count = MAX_LINES;
          truncated = true;
        }
        if (follow.checked && atBottom) pre.scrollTop = pre.scrollHeight;
        status.textContent = `${count} lines` + (truncated ? " (the newest; download for all)" : "");
      });
      source.addEventListener("end", () => {
        const head = document.getElementById("job_head");
        const waiting = head && head.dataset.state === "PENDING" && !count;
        status.textContent = waiting ? "no output: the job has not started" : `${count} lines · attempt ended`;
        source.close();
        source = null;
      });
      source.addEventListener("gone", (e) => { // the session ended: stop following
        status.textContent = JSON.parse(e.data).message;
        source.close();
        source = null;
      });
      source.addEventListener("error", () => { if (source) status.textContent = "reconnecting…"; });
    }

    for (const b of panel.querySelectorAll("button.rank")) {
      b.addEventListener("click", () => {
        for (const o of panel.querySelectorAll("button.rank")) o.setAttribute("aria-pressed", String(o === b));
        rank = Number(b.dataset.rank);
        open();
      });
    }
    attemptBox.addEventListener("change", open);
    document.addEventListener("console:updated", (e) => {
      if (e.detail.id === "job_head" && !attemptBox.value) open(); // a new attempt started
    });
    open();
  }

  // A login link another site opened is not followed (the server shows the login form with
  // its token filled in): take the token out of the address, the history and bookmarks.
  function dropToken() {
    const url = new URL(window.location.href);
    if (!url.searchParams.has("token")) return;
    url.searchParams.delete("token");
    window.history.replaceState(null, "", url.pathname + url.search + url.hash);
  }

  document.addEventListener("DOMContentLoaded", () => {
    dropToken();
    localTimes(document);
    live();
    logs();
  });
})();
