/**
 * The live flow view's page (`GET /ui`): one HTML document with its style and script inline, no
 * external asset, no build step (it works offline, in an air-gapped cluster). It holds no data:
 * it reads the API token from the URL fragment (`/ui#token=…`, never sent to the server) or a
 * form, then reads `/ui/events` (Server-Sent Events, bearer token) with `fetch` and renders the
 * summaries: throughput chart, top talkers, denied flows, recent flows, the loss ledger, and a
 * filter over all of them.
 *
 * @module
 */

/** The page. */
export const UI_HTML: string = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>flow-aggregator live flows</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 13px system-ui, sans-serif; margin: 1em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .5em; }
h2 { font-size: 1em; margin: 1em 0 .3em; }
table { border-collapse: collapse; }
td, th { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: left; white-space: nowrap; }
th { background: #f3f3f3; }
.grid { display: flex; flex-wrap: wrap; gap: 1.5em; }
.deny { color: #b00; }
#status { margin-left: 1em; color: #666; }
#chart { border: 1px solid #ccc; background: #fafafa; }
#ledger span { margin-right: 1.5em; }
</style>
</head>
<body>
<h1>flow-aggregator: live flows <span id="status">connecting…</span></h1>
<form id="login" hidden>API token: <input id="token" type="password" size="40"> <button>Connect</button></form>
<div>Filter (namespace, Pod, IP, policy action): <input id="filter" size="30" placeholder="e.g. default or 10.0.0.1 or drop"></div>
<h2>Loss ledger</h2><div id="ledger"></div>
<h2>Throughput (bytes/s, last minutes)</h2>
<svg id="chart" width="600" height="120" viewBox="0 0 600 120"><polyline id="line" fill="none" stroke="#2a6" stroke-width="1.5" points=""/></svg>
<div id="rate"></div>
<h2>Top talkers (last 1-2 minutes, bytes)</h2>
<div class="grid" id="top"></div>
<h2>Denied flows</h2>
<table id="denied"><thead><tr><th>time</th><th>source</th><th>destination</th><th>proto</th><th>source Pod</th><th>destination Pod</th><th>action</th></tr></thead><tbody></tbody></table>
<h2>Recent flows (sampled)</h2>
<table id="rows"><thead><tr><th>time</th><th>source</th><th>destination</th><th>proto</th><th>source Pod</th><th>destination Pod</th><th>service</th><th>bytes</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const MAX_ROWS = 200;
let recent = [];
let last = null;
function esc(s) { return String(s).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";"); }
function addr(a, p) { return a.includes(":") ? "[" + a + "]:" + p : a + ":" + p; }
function pod(ns, n) { return n ? ns + "/" + n : ""; }
function matches(f, texts) {
  if (!f) return true;
  return texts.some((t) => String(t).toLowerCase().includes(f));
}
function rowText(r) { return [r.src, r.dst, r.srcPod, r.dstPod, r.srcNs, r.dstNs, r.service, r.action]; }
function render() {
  if (last === null) return;
  const f = $("filter").value.trim().toLowerCase();
  const l = last.ledger;
  $("ledger").innerHTML = Object.keys(l).map((k) => "<span>" + esc(k) + ": <b>" + esc(l[k]) + "</b></span>").join("");
  const tp = last.throughput;
  const max = Math.max(1, ...tp.map((x) => x[1]));
  const t0 = tp.length ? tp[tp.length - 1][0] - 299 : 0;
  $("line").setAttribute("points", tp.map((x) => ((x[0] - t0) * 2) + "," + (118 - 116 * x[1] / max)).join(" "));
  const lastSec = tp.length ? tp[tp.length - 1] : [0, 0, 0];
  $("rate").textContent = "last second: " + lastSec[1] + " bytes, " + lastSec[2] + " flows; flows seen: " + last.seen;
  $("top").innerHTML = Object.keys(last.top).map((c) =>
    "<table><thead><tr><th>" + esc(c) + "</th><th>bytes</th></tr></thead><tbody>" +
    last.top[c].filter((e) => matches(f, [e[0]])).map((e) => "<tr><td>" + esc(e[0]) + "</td><td>" + e[1] + "</td></tr>").join("") +
    "</tbody></table>").join("");
  $("denied").tBodies[0].innerHTML = last.denied.filter((r) => matches(f, rowText(r))).map((r) =>
    "<tr class=deny><td>" + new Date(r.t).toLocaleTimeString() + "</td><td>" + esc(addr(r.src, r.sport)) + "</td><td>" +
    esc(addr(r.dst, r.dport)) + "</td><td>" + r.proto + "</td><td>" + esc(pod(r.srcNs, r.srcPod)) + "</td><td>" +
    esc(pod(r.dstNs, r.dstPod)) + "</td><td>" + esc(r.action) + "</td></tr>").join("");
  $("rows").tBodies[0].innerHTML = recent.filter((r) => matches(f, rowText(r))).map((r) =>
    "<tr" + (r.action === "drop" || r.action === "reject" ? " class=deny" : "") + "><td>" + new Date(r.t).toLocaleTimeString() +
    "</td><td>" + esc(addr(r.src, r.sport)) + "</td><td>" + esc(addr(r.dst, r.dport)) + "</td><td>" + r.proto + "</td><td>" +
    esc(pod(r.srcNs, r.srcPod)) + "</td><td>" + esc(pod(r.dstNs, r.dstPod)) + "</td><td>" + esc(r.service) + "</td><td>" + r.bytes + "</td></tr>").join("");
}
async function connect(token) {
  $("status").textContent = "connecting…";
  let res;
  try {
    res = await fetch("/ui/events", { headers: { authorization: "Bearer " + token } });
  } catch (e) {
    $("status").textContent = "cannot connect: " + e.message;
    return;
  }
  if (!res.ok) {
    $("status").textContent = "refused (" + res.status + "): check the token";
    $("login").hidden = false;
    return;
  }
  $("status").textContent = "live";
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf("\\n\\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = ev.split("\\n").filter((x) => x.startsWith("data: ")).map((x) => x.slice(6)).join("\\n");
      if (!data) continue;
      last = JSON.parse(data);
      recent = last.rows.slice().reverse().concat(recent).slice(0, MAX_ROWS);
      render();
    }
  }
  $("status").textContent = "disconnected";
}
$("filter").addEventListener("input", render);
$("login").addEventListener("submit", (e) => { e.preventDefault(); connect($("token").value.trim()); });
const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
if (m) connect(decodeURIComponent(m[1])); else { $("login").hidden = false; $("status").textContent = "enter the API token"; }
</script>
</body>
</html>
`;
