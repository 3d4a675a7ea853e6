// The operator's page: polls ?part=data.json every half second and draws it. No framework,
// no build step; every value goes in with textContent (never as HTML).
"use strict";

const POLL_MS = 500;
const COLORS = { allowed: "#2e7d32", denied: "#c62828", shadow_denied: "#ef8f00" };
const base = window.location.pathname;

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function fill(id, rows, columns, empty) {
  const body = document.getElementById(id);
  const fresh = [];
  for (const row of rows) {
    const tr = document.createElement("tr");
    for (const column of columns) tr.append(column(row));
    fresh.push(tr);
  }
  if (!fresh.length) {
    const tr = document.createElement("tr");
    const td = cell(empty, "empty");
    td.colSpan = columns.length;
    tr.append(td);
    fresh.push(tr);
  }
  body.replaceChildren(...fresh);
}

function sum(values) {
  return (values || []).reduce((total, value) => total + value, 0);
}

function chart(outcomes, seconds) {
  const canvas = document.createElement("canvas");
  const width = Math.max(seconds * 2, 120);
  canvas.width = width;
  canvas.height = 40;
  const context = canvas.getContext("2d");
  let top = 1;
  for (let i = 0; i < seconds; i++) {
    let stacked = 0;
    for (const name of Object.keys(COLORS)) stacked += (outcomes[name] || [])[i] || 0;
    top = Math.max(top, stacked);
  }
  const bar = width / seconds;
  for (let i = 0; i < seconds; i++) {
    let y = canvas.height;
    for (const [name, color] of Object.entries(COLORS)) {
      const value = (outcomes[name] || [])[i] || 0;
      const height = (value / top) * canvas.height;
      context.fillStyle = color;
      context.fillRect(i * bar, y - height, Math.max(bar - 0.5, 0.5), height);
      y -= height;
    }
  }
  return canvas;
}

function draw(data) {
  document.getElementById("seconds").textContent = String(data.seconds);
  const policies = Object.entries(data.policies).map(([name, outcomes]) => ({ name, outcomes }));
  const body = document.getElementById("decisions");
  const rows = [];
  for (const { name, outcomes } of policies) {
    const tr = document.createElement("tr");
    tr.dataset.policy = name;
    tr.append(cell(name));
    const graph = document.createElement("td");
    graph.append(chart(outcomes, data.seconds));
    tr.append(graph);
    for (const outcome of ["allowed", "denied", "shadow_denied"]) {
      const td = cell(String(sum(outcomes[outcome])), "number " + outcome);
      td.dataset.outcome = outcome;
      tr.append(td);
    }
    const last = Object.keys(COLORS).map((name) => (outcomes[name] || [])[data.seconds - 1] || 0);
    tr.append(cell(last.join(" / "), "number"));
    rows.push(tr);
  }
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = cell("no decisions yet", "empty");
    td.colSpan = 6;
    tr.append(td);
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  fill("nearest", data.nearest, [
    (row) => cell(row.identity),
    (row) => cell(row.policy),
    (row) => cell(`${row.remaining} of ${row.limit}`, "number"),
    (row) => cell(`${row.seen} s ago`, "number"),
  ], "nobody near a limit");
  fill("blocks", data.blocks, [
    (row) => cell(row.identity),
    (row) => cell(row.policy),
    (row) => cell(`${row.ends_in} s`, "number"),
  ], "nobody refused now");
  fill("overrides", data.overrides, [
    (row) => cell(row.identity),
    (row) => cell(row.policy === "*" ? "every policy" : row.policy),
    (row) => cell(row.limits.join(", ")),
    (row) => cell(row.ends_in === null ? "no end" : `${row.ends_in} s`, "number"),
  ], "no overrides");
}

function say(id, text, failed) {
  const element = document.getElementById(id);
  element.textContent = text;
  element.className = failed ? "error" : "";
}

async function poll() {
  try {
    const response = await fetch(`${base}?part=data.json`, { cache: "no-store" });
    if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
    draw(await response.json());
    say("status", `updated ${new Date().toLocaleTimeString()}`, false);
  } catch (error) {
    say("status", `not updated: ${error.message}`, true);
  }
  window.setTimeout(poll, POLL_MS);
}

async function submit(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const body = new URLSearchParams(new FormData(form));
  try {
    const response = await fetch(`${base}?action=${form.dataset.action}`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body,
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || `${response.status}`);
    say("message", answer.done, false);
  } catch (error) {
    say("message", error.message, true);
  }
}

for (const form of document.querySelectorAll("form")) form.addEventListener("submit", submit);
poll();
