"""The observer's web page: one self-contained HTML file (no network), polling the snapshot.

Everything the node reports is put in the page with ``textContent``, never as HTML, so a
process or conversation name cannot inject markup.
"""

FAVICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    b'<circle cx="8" cy="8" r="7" fill="#1d2430"/><circle cx="8" cy="8" r="3" fill="#5fd38d"/>'
    b"</svg>"
)
"""The page's icon (a browser asks for /favicon.ico whatever the page says)."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>otpmem observer</title>
<link rel="icon" href="/favicon.ico" type="image/svg+xml">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1d2430; }
  header { background: #1d2430; color: #fff; padding: 10px 18px; display: flex; gap: 24px;
           align-items: baseline; }
  header h1 { font-size: 17px; margin: 0; }
  header .figure b { font-size: 16px; }
  main { display: grid; grid-template-columns: minmax(520px, 1.4fr) 1fr; gap: 14px;
         padding: 14px; }
  section { background: #fff; border: 1px solid #dde1e7; border-radius: 6px; padding: 10px 14px; }
  h2 { font-size: 14px; margin: 2px 0 8px; text-transform: uppercase; letter-spacing: .04em;
       color: #5a6577; }
  ul.tree, ul.tree ul { list-style: none; margin: 0; padding-left: 18px; }
  ul.tree { padding-left: 0; }
  li.node > .row { display: flex; flex-wrap: wrap; gap: 4px 10px; align-items: baseline;
                   padding: 3px 0; border-bottom: 1px dotted #eef0f3; }
  li.node > .row > span { white-space: nowrap; }
  .label { font-weight: 600; }
  .supervisor > .row > .label::before { content: "\\25BE  "; color: #8893a5; }
  .worker > .row > .label::before { content: "\\2022  "; color: #8893a5; }
  .muted { color: #8893a5; font-size: 12px; }
  .badge { border-radius: 9px; padding: 0 7px; font-size: 12px; background: #e7ebf0; }
  .running { background: #d9f2e3; color: #186a3b; }
  .restarting, .unavailable { background: #fde2e1; color: #9b1c1c; }
  .restarts-nonzero { background: #fff1c2; color: #7a5300; font-weight: 600; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 3px 6px; border-bottom: 1px solid #eef0f3; }
  th { color: #5a6577; font-weight: 600; }
  td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
  #status.lost { color: #ff9a9a; }
  .side { display: flex; flex-direction: column; gap: 14px; }
  button.pid { font: inherit; border: 0; background: none; color: #1f5fbf; cursor: pointer;
               padding: 0; text-decoration: underline; }
  pre#process-state { background: #f6f7f9; padding: 6px; max-height: 260px; overflow: auto;
                      font-size: 12px; white-space: pre-wrap; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<header>
  <h1>otpmem observer</h1>
  <span class="figure">processes <b id="processes">-</b></span>
  <span class="figure">schedulers <b id="schedulers">-</b></span>
  <span class="figure">restarts <b id="restarts-total">-</b></span>
  <span class="figure">uptime <b id="uptime">-</b></span>
  <span id="attached" class="muted"></span>
  <span id="status" class="muted">connecting...</span>
</header>
<main>
  <section><h2>Supervision tree</h2><ul class="tree" id="tree"></ul></section>
  <div class="side">
    <section id="nodes-view" hidden><h2>Nodes (attached)</h2><table id="nodes"></table>
      <table id="leases"></table><p id="attach-hint" class="muted"></p></section>
    <section><h2>Agents</h2><table id="agents"></table></section>
    <section><h2>Stores</h2><table id="stores"></table></section>
    <section><h2>Recent supervisor events</h2><table id="events"></table></section>
    <section><h2>Processes (busiest mailboxes first)</h2><table id="procs"></table></section>
    <section id="process-view" hidden><h2>Process <span id="process-pid"></span></h2>
      <button id="trace-toggle" type="button">trace on</button>
      <span id="process-note" class="muted"></span>
      <pre id="process-state"></pre><table id="process-trace"></table></section>
  </div>
</main>
<script>
"use strict";
function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function fmt(v) { return v === undefined || v === null ? "-" : v; }
function renderNode(n) {
  const li = el("li", null, "node " + n.kind);
  li.dataset.label = n.label; li.dataset.kind = n.kind;
  li.dataset.restarts = String(n.restarts || 0); li.dataset.status = n.status;
  const row = el("div", null, "row");
  row.append(el("span", n.label, "label"), el("span", n.type || "", "muted"),
             el("span", n.pid || "not running", "muted"),
             el("span", n.status, "badge " + n.status));
  if (n.state) row.append(el("span", n.state + ", mailbox " + fmt(n.mailbox), "muted"));
  if (n.kind === "supervisor" && n.strategy) {
    row.append(el("span", n.strategy + ", intensity " + n.restarts_in_period + "/" +
                  n.intensity + " in " + n.period + " s", "muted"));
  }
  const restarts = n.restarts || 0;
  row.append(el("span", "restarts " + restarts,
                "badge restarts" + (restarts ? " restarts-nonzero" : "")));
  li.append(row);
  if (n.children && n.children.length) {
    const ul = el("ul");
    for (const c of n.children) ul.append(renderNode(c));
    if (n.more_children) ul.append(el("li", "... and " + n.more_children + " more", "muted"));
    li.append(ul);
  }
  return li;
}
function table(id, head, rows) {
  const t = document.getElementById(id);
  t.replaceChildren();
  const tr = el("tr");
  for (const [h, cls] of head) tr.append(el("th", h, cls));
  t.append(tr);
  for (const r of rows) {
    const row = el("tr");
    r.forEach((v, i) => row.append(el("td", fmt(v), head[i][1])));
    t.append(row);
  }
}
function render(s) {
  document.getElementById("processes").textContent = s.node.processes;
  document.getElementById("schedulers").textContent = s.node.schedulers;
  document.getElementById("restarts-total").textContent = s.restarts_total;
  document.getElementById("uptime").textContent = s.uptime_s + " s";
  const tree = document.getElementById("tree");
  tree.replaceChildren(...s.tree.map(renderNode));
  const a = s.agents;
  table("agents", [["running", "num"], ["turns", "num"], ["turns/s", "num"],
                   ["p50 ms", "num"], ["p99 ms", "num"], ["errors", "num"]],
        [[a.running, a.turns, a.turns_per_s, a.p50_ms, a.p99_ms, a.errors]]);
  table("stores", [["store", ""], ["type", ""], ["conversations", "num"], ["messages", "num"],
                   ["writes/s", "num"], ["fsyncs", "num"], ["writes/fsync", "num"]],
        s.stores.map(x => [x.name, x.type, x.conversations, x.messages, x.writes_per_s,
                           x.fsyncs, x.writes_per_fsync]));
  table("events", [["time", ""], ["supervisor", ""], ["event", ""], ["child", ""], ["reason", ""]],
        s.events.slice(0, 25).map(e => [new Date(e.t * 1000).toLocaleTimeString(),
                                         e.supervisor, e.kind, e.child, e.reason]));
  table("procs", [["pid", ""], ["name", ""], ["type", ""], ["state", ""], ["mailbox", "num"],
                  ["traced", ""]],
        s.processes.slice(0, 20).map(p => [p.pid, p.name, p.type, p.state, p.mailbox,
                                           p.traced ? "yes" : ""]));
  for (const cell of document.querySelectorAll("#procs td:first-child")) {
    const pid = cell.textContent;
    const button = el("button", pid, "pid");
    button.type = "button";
    button.addEventListener("click", () => { selected = pid.split(".")[1]; showProcess(); });
    cell.replaceChildren(button);
  }
  const attached = s.attached;
  attachedView = Boolean(attached);
  document.getElementById("nodes-view").hidden = !attached;
  document.getElementById("trace-toggle").hidden = Boolean(attached);
  if (attached) {
    document.getElementById("attached").textContent = "attached to " + attached.source;
    table("nodes", [["node", ""], ["os pid", "num"], ["state", ""], ["age s", "num"]],
          attached.nodes.map(n => [n.node, n.os_pid, n.state, n.age_s]));
    document.querySelectorAll("#nodes tr").forEach((tr, i) => {
      if (i > 0) tr.dataset.state = attached.nodes[i - 1].state;
    });
    table("leases", [["lease owner", ""], ["leases", "num"], ["live", "num"],
                     ["progress", "num"]],
          (s.leases || []).map(l => [l.owner, l.leases, l.live, l.progress]));
    document.getElementById("attach-hint").textContent = attached.hint || s.error || "";
  }
}
let selected = null;
let attachedView = false;
async function showProcess() {
  if (selected === null) return;
  const view = document.getElementById("process-view");
  const answer = await fetch("api/process/" + selected, {cache: "no-store"});
  view.hidden = false;
  document.getElementById("process-pid").textContent = "<0." + selected + ".0>";
  if (!answer.ok) {
    document.getElementById("process-note").textContent = "not running";
    return;
  }
  const p = await answer.json();
  view.dataset.traced = String(Boolean(p.traced));
  document.getElementById("trace-toggle").textContent = p.traced ? "trace off" : "trace on";
  document.getElementById("process-note").textContent = p.note || p.error || "";
  document.getElementById("process-state").textContent =
    p.state === undefined ? "" : JSON.stringify(p.state, null, 2);
  table("process-trace", [["#", "num"], ["event", ""], ["message", ""], ["from", ""]],
        (p.trace || []).slice(-25).reverse().map(e => [e.seq, e.kind, e.message, e.caller]));
}
document.getElementById("trace-toggle").addEventListener("click", async () => {
  if (selected === null || attachedView) return;
  const on = document.getElementById("process-view").dataset.traced !== "true";
  await fetch("api/trace/" + selected, {method: "POST", cache: "no-store",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify({on: on})});
  showProcess();
});
async function poll() {
  const status = document.getElementById("status");
  try {
    const answer = await fetch("api/snapshot", {cache: "no-store"});
    if (!answer.ok) throw new Error(answer.status);
    render(await answer.json());
    await showProcess();
    status.textContent = "live"; status.className = "muted";
    document.body.dataset.samples = String(Number(document.body.dataset.samples || 0) + 1);
  } catch (e) {
    status.textContent = "connection lost"; status.className = "muted lost";
  }
  setTimeout(poll, 500);
}
poll();
</script>
</body>
</html>
"""
