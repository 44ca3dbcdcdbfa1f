// gpuyard web UI: the live parts. Every page reads without this script; it adds the theme
// switch, the form's checks and queue prediction as you type, following a log, and a job's
// state as it changes, an interactive job's service as it starts. No libraries, no build step.
"use strict";

(function theme() {
  const key = "gpuyard-theme";
  const saved = localStorage.getItem(key);
  if (saved) document.documentElement.dataset.theme = saved;
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.getElementById("theme-toggle");
    if (!button) return;
    button.hidden = false;
    button.addEventListener("click", () => {
      const dark = document.documentElement.dataset.theme
        ? document.documentElement.dataset.theme === "dark"
        : matchMedia("(prefers-color-scheme: dark)").matches;
      const next = dark ? "light" : "dark";
      document.documentElement.dataset.theme = next;
      localStorage.setItem(key, next);
    });
  });
})();

function csrfOf(form) {
  const field = form.querySelector("input[name=csrf]");
  return field ? field.value : "";
}

function selectAll() {
  const all = document.getElementById("select-all");
  if (!all) return;
  all.hidden = false;
  all.addEventListener("change", () => {
    document.querySelectorAll("input[name=ids]").forEach((box) => { box.checked = all.checked; });
  });
}

function jobForm() {
  const form = document.getElementById("job-form");
  if (!form) return;
  const yaml = document.getElementById("spec-yaml");
  const text = document.getElementById("prediction-text");
  const start = document.getElementById("prediction-start");
  const list = document.getElementById("error-list");
  const type = document.getElementById("i-type");
  const ft = document.getElementById("i-ft_on");
  let timer = null;
  let asked = 0;
  let busy = false; // one check at a time: a prediction over a deep queue takes a while
  let again = false;

  function layout() {
    const batch = type.value === "batch";
    form.querySelectorAll(".batch-only").forEach((el) => { el.hidden = !batch; });
    document.getElementById("i-command").closest(".field").hidden = batch;
    form.querySelectorAll(".grid.ft").forEach((el) => { el.hidden = !ft.checked; });
  }

  function show(errors) {
    form.querySelectorAll("[data-error-for]").forEach((el) => {
      const message = errors[el.dataset.errorFor] || "";
      el.textContent = message;
      if (el.tagName === "P") el.hidden = !message;
    });
    form.querySelectorAll("[data-loc]").forEach((el) => {
      if (errors[el.dataset.loc]) el.setAttribute("aria-invalid", "true");
      else el.removeAttribute("aria-invalid");
    });
    list.replaceChildren();
    for (const [loc, message] of Object.entries(errors)) {
      if (loc === "spec") continue;
      const item = document.createElement("li");
      const name = document.createElement("strong");
      name.textContent = loc;
      item.append(name, ": " + message);
      list.append(item);
    }
    list.hidden = list.children.length === 0;
  }

  async function check() {
    if (busy) { again = true; return; }
    busy = true;
    try { await ask(); } finally { busy = false; }
    if (again) { again = false; check(); }
  }

  async function ask() {
    const mine = ++asked;
    const body = new URLSearchParams(new FormData(form));
    let answer;
    try {
      const response = await fetch("/jobs/check", {
        method: "POST", body, credentials: "same-origin",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
      });
      if (!response.ok) { text.textContent = "Could not check the form (" + response.status + ")."; return; }
      answer = await response.json();
    } catch (error) {
      text.textContent = "Could not reach the server.";
      return;
    }
    if (mine !== asked) return; // a later check is under way
    show(answer.errors);
    yaml.textContent = answer.yaml || "# not a valid spec yet: fix the fields marked";
    const p = answer.prediction;
    if (p) {
      text.textContent = p.reason;
      start.textContent = (p.now ? "Starts now." : (p.start_at ? "Expected start: " + new Date(p.start_at).toLocaleString() + "." : ""))
        + (p.run_time ? " Run time " + p.run_time + "." : "");
      document.getElementById("prediction").dataset.state = p.now ? "now" : "waits";
    } else {
      text.textContent = "Fix the fields marked to see when it would start.";
      start.textContent = "";
      document.getElementById("prediction").dataset.state = "invalid";
    }
  }

  function soon() {
    layout();
    clearTimeout(timer);
    timer = setTimeout(check, 250);
  }
  form.addEventListener("input", soon);
  form.addEventListener("change", soon);
  layout();
  check();
}

function followLog() {
  const pre = document.getElementById("log-text");
  if (!pre) return;
  const follow = document.getElementById("log-follow");
  const label = document.getElementById("log-follow-label");
  const search = document.getElementById("log-search");
  const matches = document.getElementById("log-matches");
  follow.hidden = false; label.hidden = false;
  let offset = Number(pre.dataset.offset || 0);
  let whole = pre.textContent;
  if (pre.dataset.filtered === "true") {
    // The server sent only the lines matching ?q=: read the tail again, whole.
    offset = Number(pre.dataset.start || 0);
    whole = "";
  }
  let done = false;

  function render() {
    const q = search.value.trim().toLowerCase();
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    if (!q) {
      pre.textContent = whole;
      matches.textContent = "";
    } else {
      const lines = whole.split("\n").filter((line) => line.toLowerCase().includes(q));
      pre.textContent = lines.join("\n");
      matches.textContent = lines.length + " matching line" + (lines.length === 1 ? "" : "s");
    }
    if (follow.checked && atEnd) pre.scrollTop = pre.scrollHeight;
  }

  async function poll() {
    if (done || !follow.checked) { setTimeout(poll, 500); return; }
    try {
      const url = "/jobs/" + pre.dataset.job + "/log?worker=" + pre.dataset.worker + "&offset=" + offset;
      const response = await fetch(url, { credentials: "same-origin" });
      if (response.ok) {
        const chunk = await response.json();
        if (chunk.data) {
          whole += chunk.data;
          offset = chunk.next_offset;
          render();
          pre.scrollTop = pre.scrollHeight;
        }
        if (chunk.eof) { done = true; pre.dataset.eof = "true"; }
        if (chunk.next_offset < chunk.size) { setTimeout(poll, 0); return; }
      }
    } catch (error) { /* the server is restarting: try again */ }
    setTimeout(poll, 250);
  }
  search.addEventListener("input", render);
  render();
  pre.scrollTop = pre.scrollHeight;
  poll();
}

function watchState() {
  const badge = document.getElementById("job-state");
  if (!badge) return;
  const first = badge.dataset.status;
  async function poll() {
    try {
      const response = await fetch("/jobs/" + badge.dataset.job + "/status.json", { credentials: "same-origin" });
      if (response.ok) {
        const s = await response.json();
        badge.textContent = s.status + (s.state !== s.status ? " (" + s.state + ")" : "");
        badge.dataset.state = s.state;
        const status = s.status === "error" ? "failed" : s.status;
        badge.className = "state big s-" + status;
        const typing = document.activeElement && ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
        if (status !== first && !typing) { location.reload(); return; }
        if (["succeeded", "failed", "stopped", "expired"].includes(status)) return;
      }
    } catch (error) { /* try again */ }
    setTimeout(poll, 1000);
  }
  setTimeout(poll, 1000);
}

function watchService() {
  // An interactive job's service while it starts: its state and why it is not ready yet, from
  // the readiness probe (the job's own state reloads the page when it changes).
  const badge = document.getElementById("service-state");
  if (!badge || badge.dataset.state !== "starting") return;
  const detail = document.getElementById("service-detail");
  async function poll() {
    try {
      const response = await fetch("/jobs/" + badge.dataset.job + "/service.json", { credentials: "same-origin" });
      if (response.ok) {
        const s = await response.json();
        badge.textContent = s.state;
        badge.dataset.state = s.state;
        badge.className = "service-state v-" + s.state;
        if (detail) detail.textContent = s.detail;
        if (s.state === "ready" || s.state === "ended") return;
      }
    } catch (error) { /* try again */ }
    setTimeout(poll, 1500);
  }
  setTimeout(poll, 1500);
}

function imagePush() {
  // The archive goes as the raw request body (streamed to disk by the server, never parsed
  // as multipart), the other fields in the query string, the CSRF token in a header.
  const form = document.getElementById("image-push");
  if (!form) return;
  form.hidden = false;
  const error = document.getElementById("image-push-error");
  const status = document.getElementById("image-push-status");
  const say = (box, text) => { box.textContent = text; box.hidden = !text; };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const file = form.elements.archive.files[0];
    if (!file) return;
    const query = new URLSearchParams();
    for (const key of ["name", "scope", "accelerator", "description", "visibility"]) {
      if (form.elements[key].value) query.set(key, form.elements[key].value);
    }
    say(error, "");
    say(status, `pushing ${file.name}…`);
    form.querySelector("button[type=submit]").disabled = true;
    try {
      const answer = await fetch(`/images/push?${query}`, {
        method: "POST", body: file, credentials: "same-origin",
        headers: { "Content-Type": "application/octet-stream", "X-Gpuyard-CSRF": form.dataset.csrf },
      });
      const type = answer.headers.get("content-type") || "";
      if (answer.ok && type.startsWith("application/json")) {
        location.href = (await answer.json()).next;
        return;
      }
      if (answer.ok) { location.href = answer.url; return; }  // signed out: the sign-in page
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const detail = page.querySelector(".error");
      say(error, detail ? detail.textContent : `the push failed (${answer.status})`);
    } catch (failed) {
      say(error, `the push failed: ${failed}`);
    }
    say(status, "");
    form.querySelector("button[type=submit]").disabled = false;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  imagePush();
  selectAll();
  jobForm();
  followLog();
  watchState();
  watchService();
});
