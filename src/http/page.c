/* page.c: the dashboard's two pages, each one self-contained HTML document
 * with its CSS and JavaScript inline (no CDN, no network): the job page
 * (tasks, metric charts in SVG, logs, events; it polls the JSON API every
 * second with relative URLs, so it works at "/" and at "/job/<id>/") and
 * the `loom ui` index of jobs. The scripts only ever set textContent, never
 * HTML, so nothing a task logs or names can run in the page. The
 * Content-Security-Policy allows exactly these scripts, by their hashes.
 *
 * What both pages share (head, stylesheet, the script's helpers, end)
 * is written once, as macros that the compiler joins into each page's
 * string: each page stays one constant, and http__csp() hashes the bytes
 * that are served, so the policy cannot drift from the scripts. */
#include "http/http_int.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

/* The head of both pages, up to their titles. */
#define PAGE_HEAD                                                                                  \
  "<!doctype html>\n"                                                                              \
  "<html lang=\"en\">\n"                                                                           \
  "<head>\n"                                                                                       \
  "<meta charset=\"utf-8\">\n"                                                                     \
  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"                     \
  "<link rel=\"icon\" href=\"data:,\">\n"

/* The one stylesheet, the job page's; the index uses its header, tables
 * and badges. */
#define PAGE_STYLE                                                                                 \
  "<style>\n"                                                                                      \
  ":root{--bg:#f6f7f9;--fg:#1d2330;--mut:#6a7386;--line:#dfe3ea;--card:#fff;--acc:#2f6fde}\n"      \
  "*{box-sizing:border-box}\n"                                                                     \
  "body{margin:0;font:14px/1.4 system-ui,-apple-system,\"Segoe "                                   \
  "UI\",Roboto,sans-serif;background:var(--bg);color:var(--fg)}\n"                                 \
  "header{display:flex;gap:12px;align-items:baseline;flex-wrap:wrap;padding:12px "                 \
  "20px;background:#1d2330;color:#fff}\n"                                                          \
  "header h1{font-size:18px;margin:0;font-weight:600}\n"                                           \
  "header a{color:#9cc0ff}\n"                                                                      \
  "#meta,#conn,#tb{color:#b9c1d0;font-size:13px}\n"                                                \
  "header code{color:#e8ecf3;background:#2b3342;padding:1px 6px;border-radius:4px;font:12px "      \
  "ui-monospace,Menlo,Consolas,monospace;user-select:all}\n"                                       \
  "#conn.bad{color:#ffb4a8}\n"                                                                     \
  "main{padding:14px 20px;display:grid;gap:14px}\n"                                                \
  "section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px "    \
  "14px}\n"                                                                                        \
  "h2{font-size:15px;margin:2px 0 8px;font-weight:600}\n"                                          \
  "table{border-collapse:collapse;width:100%}\n"                                                   \
  "th,td{text-align:left;padding:4px 8px;border-bottom:1px solid "                                 \
  "var(--line);white-space:nowrap;font-variant-numeric:tabular-nums}\n"                            \
  "th{color:var(--mut);font-weight:500;font-size:12px}\n"                                          \
  "td.wrap{white-space:normal;max-width:420px;word-break:break-word}\n"                            \
  ".badge{display:inline-block;padding:1px "                                                       \
  "8px;border-radius:10px;font-size:12px;background:#e4e7ee;color:#333}\n"                         \
  ".s-running{background:#d9f2e3;color:#11643a}.s-succeeded{background:#dbe8ff;color:#1c4aa0}\n"   \
  ".s-failed,.s-lost{background:#ffdcd7;color:#9b1c0c}.s-killed,.s-stopped{background:#e9e9e9;"    \
  "color:#555}\n"                                                                                  \
  ".s-pending,.s-starting,.s-launched,.s-registered,.s-waiting,.s-rendezvous{background:#fff1c9;"  \
  "color:#7a5600}\n"                                                                               \
  "#charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:12px}\n"     \
  ".chart{border:1px solid var(--line);border-radius:6px;padding:6px 8px}\n"                       \
  ".chart h3{margin:0 0 2px;font-size:13px;font-weight:600}\n"                                     \
  ".chart svg{width:100%;height:auto;display:block}\n"                                             \
  ".chart .axis{stroke:#b8bfcc;stroke-width:1}.chart .grid{stroke:#eef0f4;stroke-width:1}\n"       \
  ".chart text{font-size:10px;fill:#6a7386}\n"                                                     \
  ".legend{display:flex;gap:10px;flex-wrap:wrap;font-size:12px;color:var(--mut)}\n"                \
  ".legend "                                                                                       \
  "i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-"     \
  "align:-1px}\n"                                                                                  \
  ".two{display:grid;grid-template-columns:1fr 1fr;gap:14px;background:none;border:0;padding:0}\n" \
  ".two>div{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px "   \
  "14px;min-width:0}\n"                                                                            \
  "pre#logs{margin:0;height:300px;overflow:auto;background:#12161f;color:#d7dde8;padding:8px;"     \
  "border-radius:6px;font:12px/1.35 "                                                              \
  "ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-all}\n"             \
  "#events-wrap{height:300px;overflow:auto}\n"                                                     \
  ".empty{color:var(--mut)}\n"                                                                     \
  "#root{color:#9b1c0c}\n"                                                                         \
  "@media(max-width:900px){.two{grid-template-columns:1fr}}\n"                                     \
  "</style>\n"

/* What both scripts open with: URLs that carry the token, fetch, and the
 * DOM and time helpers. */
#define PAGE_SCRIPT_HELPERS                                                                        \
  "\"use strict\";\n"                                                                              \
  "const TOK = new URLSearchParams(location.search).get(\"token\");\n"                             \
  "function url(p) { return TOK ? p + (p.indexOf(\"?\") < 0 ? \"?\" : \"&\") + \"token=\" + "      \
  "encodeURIComponent(TOK) : p; }\n"                                                               \
  "async function get(p) {\n"                                                                      \
  "  const r = await fetch(url(p), {cache: \"no-store\", credentials: \"same-origin\"});\n"        \
  "  if (!r.ok) {\n"                                                                               \
  "    let m = r.status + \" \" + r.statusText;\n"                                                 \
  "    try { m = (await r.json()).error || m; } catch (e) {}\n"                                    \
  "    throw new Error(m);\n"                                                                      \
  "  }\n"                                                                                          \
  "  return r.json();\n"                                                                           \
  "}\n"                                                                                            \
  "function el(tag, attrs, text) {\n"                                                              \
  "  const e = document.createElement(tag);\n"                                                     \
  "  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);\n"                                  \
  "  if (text !== undefined && text !== null) e.textContent = String(text);\n"                     \
  "  return e;\n"                                                                                  \
  "}\n"                                                                                            \
  "function badge(s) { return el(\"span\", {class: \"badge s-\" + String(s).replace(/[^a-z_-]/g, " \
  "\"\")}, s); }\n"                                                                                \
  "function dur(s) {\n"                                                                            \
  "  if (!(s >= 0)) return \"\";\n"                                                                \
  "  s = Math.floor(s);\n"                                                                         \
  "  const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, x = s % 60;\n"                   \
  "  return h ? h + \"h\" + String(m).padStart(2, \"0\") + \"m\" : m ? m + \"m\" + "               \
  "String(x).padStart(2, \"0\") + \"s\" : x + \"s\";\n"                                            \
  "}\n"                                                                                            \
  "function when(t) {\n"                                                                           \
  "  if (!t) return \"\";\n"                                                                       \
  "  const d = new Date(t * 1000);\n"                                                              \
  "  return d.toLocaleDateString() + \" \" + d.toLocaleTimeString();\n"                            \
  "}\n"                                                                                            \
  "function clock(t) {\n"                                                                          \
  "  const d = new Date(t * 1000);\n"                                                              \
  "  return d.toTimeString().slice(0, 8) + \".\" + String(d.getMilliseconds()).padStart(3, "       \
  "\"0\");\n"                                                                                      \
  "}\n"                                                                                            \
  "function setConn(ok, msg) {\n"                                                                  \
  "  const c = document.getElementById(\"conn\");\n"                                               \
  "  c.className = ok ? \"\" : \"bad\";\n"                                                         \
  "  c.textContent = msg;\n"                                                                       \
  "}\n"

/* The end of both pages, from the end of their scripts. */
#define PAGE_END                                                                                   \
  "</script>\n"                                                                                    \
  "</body>\n"                                                                                      \
  "</html>\n"                                                                                      \
  "\n"

const char http__job_page[] = PAGE_HEAD
    "<title>loom</title>\n" PAGE_STYLE "</head>\n"
    "<body>\n"
    "<header><a id=\"back\" hidden>all jobs</a><h1 id=\"title\">loom</h1><span "
    "id=\"state\"></span><span id=\"meta\"></span><span id=\"tb\"></span><span "
    "id=\"conn\">loading…</span></header>\n"
    "<main>\n"
    "<div id=\"root\"></div>\n"
    "<section><h2>Tasks</h2>\n"
    "<table "
    "id=\"tasks\"><thead><tr><th>task</th><th>state</th><th>attempt</th><th>restarts</"
    "th><th>host:port</th><th>exit</th><th>cpu</th><th>memory</th><th>elapsed</th><th>reason</th></"
    "tr></thead><tbody></tbody></table>\n"
    "</section>\n"
    "<section><h2>Metrics</h2><div id=\"charts\"><p class=\"empty\">loading…</p></div></section>\n"
    "<div class=\"two\">\n"
    "<div><h2>Logs <select id=\"logtask\"></select></h2><pre id=\"logs\"></pre></div>\n"
    "<div><h2>Events</h2><div id=\"events-wrap\"><table "
    "id=\"events\"><tbody></tbody></table></div></div>\n"
    "</div>\n"
    "</main>\n"
    "<script>\n" PAGE_SCRIPT_HELPERS
    "const COLORS = [\"#2f6fde\", \"#e4572e\", \"#29a36a\", \"#a23bd6\", \"#f0a202\", \"#1bb6c1\", "
    "\"#d6336c\", \"#6b7a8f\",\n"
    "                \"#8c5a2b\", \"#5c7cfa\"];\n"
    "const taskColor = {};\n"
    "let taskOrder = [], jobState = \"\", finished = false, lastLogTask = null;\n"
    "const SVGNS = \"http://www.w3.org/2000/svg\";\n"
    "function colorOf(task) {\n"
    "  if (!(task in taskColor)) taskColor[task] = COLORS[Object.keys(taskColor).length % "
    "COLORS.length];\n"
    "  return taskColor[task];\n"
    "}\n"
    "function fmtBytes(v) {\n"
    "  const u = [\"B\", \"KiB\", \"MiB\", \"GiB\", \"TiB\"];\n"
    "  let i = 0;\n"
    "  while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }\n"
    "  return (i ? String(Number(v.toPrecision(4))) : String(Math.round(v))) + \" \" + u[i];\n"
    "}\n"
    "function fmt(v, tag) {\n"
    "  if (v === null || v === undefined || !isFinite(v)) return \"–\";\n"
    "  if (/bytes$/.test(tag)) return fmtBytes(v);\n"
    "  const a = Math.abs(v);\n"
    "  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);\n"
    "  return String(Number(v.toPrecision(4)));\n"
    "}\n"
    "/* A tick label: as many decimals as the tick step needs, bytes in the unit\n"
    " * of the chart's largest value. */\n"
    "function tickFmt(v, step, tag, top) {\n"
    "  let unit = 1, suffix = \"\";\n"
    "  if (/bytes$/.test(tag)) {\n"
    "    const u = [\"B\", \"KiB\", \"MiB\", \"GiB\", \"TiB\"];\n"
    "    let k = 0;\n"
    "    while (top >= Math.pow(1024, k + 1) && k < u.length - 1) k++;\n"
    "    unit = Math.pow(1024, k);\n"
    "    suffix = \" \" + u[k];\n"
    "  } else if (Math.abs(top) >= 1e6 || (top !== 0 && Math.abs(top) < 1e-3)) {\n"
    "    return v.toExponential(2);\n"
    "  }\n"
    "  const d = Math.min(6, Math.max(0, -Math.floor(Math.log10(step / unit) + 1e-9)));\n"
    "  return (v / unit).toFixed(d) + suffix;\n"
    "}\n"
    "function svg(tag, attrs) {\n"
    "  const e = document.createElementNS(SVGNS, tag);\n"
    "  for (const k in attrs) e.setAttribute(k, attrs[k]);\n"
    "  return e;\n"
    "}\n"
    "/* About n round ticks (1, 2 or 5 times a power of ten) covering [lo, hi]. */\n"
    "function niceStep(lo, hi, n, integer) {\n"
    "  const raw = (hi - lo) / n, p = Math.pow(10, Math.floor(Math.log10(raw)));\n"
    "  let step = p * ([1, 2, 5, 10].find(m => m * p >= raw) || 10);\n"
    "  if (integer) step = Math.max(1, Math.round(step));\n"
    "  return step;\n"
    "}\n"
    "function ticks(lo, hi, step) {\n"
    "  const out = [];\n"
    "  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9 && out.length < 50; "
    "v += step)\n"
    "    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);\n"
    "  return out;\n"
    "}\n"
    "\n"
    "/* One chart per tag, one line per task; a new line where the task's\n"
    " * attempt changes (steps start over). */\n"
    "function drawChart(tag, series) {\n"
    "  const W = 560, H = 230, L = 58, R = 12, T = 10, B = 26;\n"
    "  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity, total = 0;\n"
    "  for (const s of series) for (const p of s.points) {\n"
    "    if (p[1] === null) continue;\n"
    "    x0 = Math.min(x0, p[0]); x1 = Math.max(x1, p[0]);\n"
    "    y0 = Math.min(y0, p[1]); y1 = Math.max(y1, p[1]);\n"
    "    total++;\n"
    "  }\n"
    "  const root = svg(\"svg\", {viewBox: \"0 0 \" + W + \" \" + H, \"data-tag\": tag, "
    "\"data-points\": total, role: \"img\"});\n"
    "  if (!total) return root;\n"
    "  if (x0 === x1) { x0 -= 1; x1 += 1; }\n"
    "  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }\n"
    "  let unit = 1;\n"
    "  if (/bytes$/.test(tag)) while (Math.max(Math.abs(y0), Math.abs(y1)) >= unit * 1024 && unit "
    "< Math.pow(1024, 4)) unit *= 1024;\n"
    "  const ys = niceStep(y0 / unit, y1 / unit, 4, false) * unit, xs = niceStep(x0, x1, 6, "
    "true);\n"
    "  y0 = Math.floor(y0 / ys + 1e-9) * ys; y1 = Math.ceil(y1 / ys - 1e-9) * ys;\n"
    "  const X = x => L + (x - x0) / (x1 - x0) * (W - L - R);\n"
    "  const Y = y => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);\n"
    "  for (const v of ticks(y0, y1, ys)) {\n"
    "    root.appendChild(svg(\"line\", {class: \"grid\", x1: L, x2: W - R, y1: Y(v), y2: "
    "Y(v)}));\n"
    "    const t = svg(\"text\", {x: L - 4, y: Y(v) + 3, \"text-anchor\": \"end\"});\n"
    "    t.textContent = tickFmt(v, ys, tag, Math.max(Math.abs(y0), Math.abs(y1)));\n"
    "    root.appendChild(t);\n"
    "  }\n"
    "  for (const v of ticks(x0, x1, xs)) {\n"
    "    const t = svg(\"text\", {x: X(v), y: H - 8, \"text-anchor\": \"middle\"});\n"
    "    t.textContent = String(Math.round(v));\n"
    "    root.appendChild(t);\n"
    "  }\n"
    "  root.appendChild(svg(\"line\", {class: \"axis\", x1: L, x2: L, y1: T, y2: H - B}));\n"
    "  root.appendChild(svg(\"line\", {class: \"axis\", x1: L, x2: W - R, y1: H - B, y2: H - "
    "B}));\n"
    "  for (const s of series) {\n"
    "    const c = colorOf(s.task);\n"
    "    let seg = [], att = null;\n"
    "    const flush = () => {\n"
    "      if (seg.length > 1)\n"
    "        root.appendChild(svg(\"polyline\", {points: seg.join(\" \"), fill: \"none\", stroke: "
    "c, \"stroke-width\": 1.6,\n"
    "                                          \"data-task\": s.task}));\n"
    "      seg = [];\n"
    "    };\n"
    "    for (const p of s.points) {\n"
    "      if (p[1] === null) continue;\n"
    "      if (att !== null && p[3] !== att) flush();\n"
    "      att = p[3];\n"
    "      seg.push(X(p[0]).toFixed(1) + \",\" + Y(p[1]).toFixed(1));\n"
    "    }\n"
    "    flush();\n"
    "    const few = s.points.length <= 120;\n"
    "    for (let i = few ? 0 : s.points.length - 1; i < s.points.length; i++) {\n"
    "      const p = s.points[i];\n"
    "      if (p[1] === null) continue;\n"
    "      const dot = svg(\"circle\", {class: \"pt\", cx: X(p[0]).toFixed(1), cy: "
    "Y(p[1]).toFixed(1), r: few ? 2.4 : 3,\n"
    "                                 fill: c, \"data-task\": s.task});\n"
    "      const ti = svg(\"title\", {});\n"
    "      ti.textContent = s.task + \" step \" + p[0] + \": \" + fmt(p[1], tag);\n"
    "      dot.appendChild(ti);\n"
    "      root.appendChild(dot);\n"
    "    }\n"
    "  }\n"
    "  return root;\n"
    "}\n"
    "\n"
    "function renderCharts(m) {\n"
    "  const box = document.getElementById(\"charts\");\n"
    "  const byTag = {};\n"
    "  for (const s of m.series) (byTag[s.tag] = byTag[s.tag] || []).push(s);\n"
    "  /* losses, then accuracies, then the task's other tags, then the agents' */\n"
    "  const rank = t => (t === \"cpu_percent\" || t === \"memory_bytes\") ? 3 : /loss/i.test(t) ? "
    "0 "
    ": /acc/i.test(t) ? 1 : 2;\n"
    "  const tags = Object.keys(byTag).sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 "
    ": 0));\n"
    "  if (!tags.length) {\n"
    "    box.replaceChildren(el(\"p\", {class: \"empty\"}, \"no metrics yet: loom_metric() and "
    "loom/summary.h scalars from tasks, CPU and memory from agents\"));\n"
    "    return;\n"
    "  }\n"
    "  const keep = {};\n"
    "  for (const tag of tags) {\n"
    "    let card = box.querySelector('.chart[data-tag=\"' + CSS.escape(tag) + '\"]');\n"
    "    if (!card) {\n"
    "      card = el(\"div\", {class: \"chart\", \"data-tag\": tag});\n"
    "      card.appendChild(el(\"h3\", {}, tag));\n"
    "      card.appendChild(svg(\"svg\", {}));\n"
    "      card.appendChild(el(\"div\", {class: \"legend\"}));\n"
    "    }\n"
    "    const ser = byTag[tag];\n"
    "    card.replaceChild(drawChart(tag, ser), card.querySelector(\"svg\"));\n"
    "    const lg = card.querySelector(\".legend\");\n"
    "    lg.replaceChildren();\n"
    "    for (const s of ser) {\n"
    "      const last = s.points.length ? s.points[s.points.length - 1] : null;\n"
    "      const it = el(\"span\", {});\n"
    "      const sw = el(\"i\", {});\n"
    "      sw.style.background = colorOf(s.task);\n"
    "      it.appendChild(sw);\n"
    "      it.appendChild(document.createTextNode(s.task + (last ? \" \" + fmt(last[1], tag) + \" "
    "@\" + last[0] : \"\")));\n"
    "      lg.appendChild(it);\n"
    "    }\n"
    "    keep[tag] = card;\n"
    "  }\n"
    "  box.replaceChildren(...tags.map(t => keep[t]));\n"
    "}\n"
    "\n"
    "function renderJob(j) {\n"
    "  document.title = j.id + \" · loom\";\n"
    "  document.getElementById(\"title\").textContent = j.id;\n"
    "  const st = document.getElementById(\"state\");\n"
    "  st.replaceChildren(badge(j.state));\n"
    "  jobState = j.state;\n"
    "  finished = !!j.finished;\n"
    "  const end = j.finished || j.now;\n"
    "  const bits = [];\n"
    "  if (j.backend) bits.push(j.backend);\n"
    "  bits.push(\"attempt \" + (j.attempt || 0) + (j.retries ? \" of \" + (j.retries + 1) : "
    "\"\"));\n"
    "  bits.push(j.ntasks + \" task\" + (j.ntasks === 1 ? \"\" : \"s\"));\n"
    "  if (j.started) bits.push(\"started \" + when(j.started));\n"
    "  if (j.started) bits.push((j.finished ? \"ran \" : \"running \") + dur(end - j.started));\n"
    "  if (j.exit_status !== undefined) bits.push(\"exit status \" + j.exit_status);\n"
    "  document.getElementById(\"meta\").textContent = bits.join(\" · \");\n"
    "  renderTensorBoard(j);\n"
    "  const rc = document.getElementById(\"root\");\n"
    "  rc.textContent = j.root_cause ? \"root cause: \" + (j.root_cause.task ? j.root_cause.task + "
    "\": \" : \"\") + j.root_cause.message : \"\";\n"
    "}\n"
    "\n"
    "/* The tensorboard role's link while it runs; else, where summaries were\n"
    " * written, the command that serves them. */\n"
    "function shq(s) { return /^[A-Za-z0-9_@%+=:,.\\/-]+$/.test(s) ? s : \"'\" + "
    "s.replace(/'/g, \"'\\\\''\") + \"'\"; }\n"
    "function renderTensorBoard(j) {\n"
    "  const tb = document.getElementById(\"tb\");\n"
    "  const runs = j.tensorboard_runs_total || 0;\n"
    "  const live = j.tensorboard && !j.finished && /^https?:\\/\\//.test(j.tensorboard);\n"
    "  const key = [live, j.tensorboard, runs, j.tensorboard_logdir].join(\"|\");\n"
    "  if (tb.dataset.key === key) return;\n"
    "  tb.dataset.key = key;\n"
    "  tb.replaceChildren();\n"
    "  if (live) {\n"
    "    tb.appendChild(el(\"a\", {id: \"tb-link\", href: j.tensorboard, target: \"_blank\", rel: "
    "\"noopener\"}, \"TensorBoard\"));\n"
    "  } else if ((j.tensorboard || runs) && j.tensorboard_logdir) {\n"
    "    const runWord = runs + \" run\" + (runs === 1 ? \"\" : \"s\");\n"
    "    tb.appendChild(document.createTextNode((j.tensorboard ? \"TensorBoard stopped with the "
    "job (\" "
    ": \"TensorBoard summaries (\") + runWord + \"): \"));\n"
    "    tb.appendChild(el(\"code\", {id: \"tb-cmd\"}, \"tensorboard --logdir \" + "
    "shq(j.tensorboard_logdir)));\n"
    "  }\n"
    "}\n"
    "\n"
    "function renderTasks(t) {\n"
    "  const tb = document.querySelector(\"#tasks tbody\");\n"
    "  tb.replaceChildren();\n"
    "  taskOrder = [];\n"
    "  for (const k of t.tasks) {\n"
    "    taskOrder.push(k.task);\n"
    "    colorOf(k.task);\n"
    "    const tr = el(\"tr\", {\"data-task\": k.task});\n"
    "    tr.appendChild(el(\"td\", {}, k.task));\n"
    "    const s = el(\"td\", {});\n"
    "    s.appendChild(badge(k.state || \"?\"));\n"
    "    tr.appendChild(s);\n"
    "    tr.appendChild(el(\"td\", {}, k.attempt ?? \"\"));\n"
    "    tr.appendChild(el(\"td\", {}, k.restarts ?? 0));\n"
    "    tr.appendChild(el(\"td\", {}, k.host ? k.host + \":\" + (k.port ?? \"\") : \"\"));\n"
    "    let ex = \"\";\n"
    "    if (k.exit_code !== undefined) ex = String(k.exit_code);\n"
    "    if (k.signal_name) ex = \"SIG\" + k.signal_name;\n"
    "    tr.appendChild(el(\"td\", {}, ex));\n"
    "    const lat = k.latest || {};\n"
    "    tr.appendChild(el(\"td\", {}, lat.cpu_percent ? fmt(lat.cpu_percent.value, \"\") + \"%\" "
    ": \"\"));\n"
    "    tr.appendChild(el(\"td\", {}, lat.memory_bytes ? fmtBytes(lat.memory_bytes.value) : "
    "\"\"));\n"
    "    const t0 = k.started || k.launched;\n"
    "    tr.appendChild(el(\"td\", {}, t0 ? dur((k.finished || t.now) - t0) : \"\"));\n"
    "    tr.appendChild(el(\"td\", {class: \"wrap\"}, k.reason || \"\"));\n"
    "    tb.appendChild(tr);\n"
    "  }\n"
    "  if (!t.tasks.length) {\n"
    "    const tr = el(\"tr\", {});\n"
    "    tr.appendChild(el(\"td\", {colspan: 10, class: \"empty\"}, \"no tasks yet\"));\n"
    "    tb.appendChild(tr);\n"
    "  }\n"
    "  const sel = document.getElementById(\"logtask\");\n"
    "  const want = [\"all\", ...taskOrder];\n"
    "  if (sel.options.length !== want.length || [...sel.options].some((o, i) => o.value !== "
    "want[i])) {\n"
    "    const cur = sel.value || (taskOrder[0] || \"all\");\n"
    "    sel.replaceChildren(...want.map(v => el(\"option\", {value: v}, v === \"all\" ? \"all "
    "tasks\" : v)));\n"
    "    sel.value = want.includes(cur) ? cur : \"all\";\n"
    "  }\n"
    "}\n"
    "\n"
    "function renderEvents(e) {\n"
    "  const tb = document.querySelector(\"#events tbody\");\n"
    "  tb.replaceChildren();\n"
    "  const evs = e.events.slice().reverse();\n"
    "  for (const v of evs) {\n"
    "    const tr = el(\"tr\", {});\n"
    "    tr.appendChild(el(\"td\", {}, v.t ? clock(v.t) : \"\"));\n"
    "    tr.appendChild(el(\"td\", {}, v.task || \"\"));\n"
    "    tr.appendChild(el(\"td\", {}, v.event));\n"
    "    const rest = {};\n"
    "    for (const k in v) if (![\"t\", \"job\", \"task\", \"event\", \"attempt\"].includes(k)) "
    "rest[k] = v[k];\n"
    "    const txt = Object.keys(rest).length ? JSON.stringify(rest) : \"\";\n"
    "    tr.appendChild(el(\"td\", {class: \"wrap\"}, txt.length > 300 ? txt.slice(0, 300) + \"…\" "
    ": txt));\n"
    "    tb.appendChild(tr);\n"
    "  }\n"
    "}\n"
    "\n"
    "function renderLogs(l) {\n"
    "  const pre = document.getElementById(\"logs\");\n"
    "  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4 || lastLogTask !== "
    "l.task;\n"
    "  pre.textContent = l.lines.length ? l.lines.join(\"\\n\") : \"(no output yet)\";\n"
    "  if (atEnd) pre.scrollTop = pre.scrollHeight;\n"
    "  lastLogTask = l.task;\n"
    "}\n"
    "\n"
    "let failures = 0;\n"
    "async function tick() {\n"
    "  try {\n"
    "    const [j, t, m, e] = await Promise.all([get(\"api/job\"), get(\"api/tasks\"), "
    "get(\"api/metrics?max=500\"),\n"
    "                                             get(\"api/events?n=40\")]);\n"
    "    renderJob(j);\n"
    "    renderTasks(t);\n"
    "    renderCharts(m);\n"
    "    renderEvents(e);\n"
    "    const sel = document.getElementById(\"logtask\").value || \"all\";\n"
    "    renderLogs(await get(\"api/logs?n=80&task=\" + encodeURIComponent(sel)));\n"
    "    failures = 0;\n"
    "    setConn(true, (finished ? \"finished · \" : \"live · \") + \"updated \" + new "
    "Date().toTimeString().slice(0, 8));\n"
    "  } catch (err) {\n"
    "    failures++;\n"
    "    setConn(false, finished || jobState === \"\" ? \"cannot reach the dashboard: \" + "
    "err.message\n"
    "        : \"disconnected (\" + err.message + \"): the job's coordinator may have exited; "
    "`loom ui` shows finished jobs\");\n"
    "  }\n"
    "  setTimeout(tick, finished ? 5000 : failures ? 3000 : 1000);\n"
    "}\n"
    "document.getElementById(\"logtask\").addEventListener(\"change\", () => { lastLogTask = null; "
    "});\n"
    "if (location.pathname.indexOf(\"/job/\") === 0) {\n"
    "  const a = document.getElementById(\"back\");\n"
    "  a.href = url(\"../../\");\n"
    "  a.hidden = false;\n"
    "}\n"
    "tick();\n" PAGE_END;

const char http__index_page[] = PAGE_HEAD
    "<title>loom jobs</title>\n" PAGE_STYLE "</head>\n"
    "<body>\n"
    "<header><h1>loom jobs</h1><span id=\"meta\"></span><span "
    "id=\"conn\">loading…</span></header>\n"
    "<main>\n"
    "<section>\n"
    "<table "
    "id=\"jobs\"><thead><tr><th>job</th><th>name</th><th>state</th><th>tasks</th><th>attempt</"
    "th><th>started</th><th>elapsed</th><th>exit</th></tr></thead><tbody></tbody></table>\n"
    "</section>\n"
    "</main>\n"
    "<script>\n" PAGE_SCRIPT_HELPERS "async function tick() {\n"
    "  let next = 3000;\n"
    "  try {\n"
    "    const r = await get(\"api/jobs\");\n"
    "    const tb = document.querySelector(\"#jobs tbody\");\n"
    "    tb.replaceChildren();\n"
    "    for (const j of r.jobs) {\n"
    "      const tr = el(\"tr\", {\"data-job\": j.id});\n"
    "      const td = el(\"td\", {});\n"
    "      td.appendChild(el(\"a\", {href: url(\"job/\" + encodeURIComponent(j.id) + \"/\")}, "
    "j.id));\n"
    "      tr.appendChild(td);\n"
    "      tr.appendChild(el(\"td\", {}, j.name || \"\"));\n"
    "      const s = el(\"td\", {});\n"
    "      s.appendChild(badge(j.state || \"unknown\"));\n"
    "      tr.appendChild(s);\n"
    "      const c = j.counts || {};\n"
    "      tr.appendChild(el(\"td\", {}, Object.keys(c).map(k => c[k] + \" \" + k).join(\", \") || "
    "j.ntasks));\n"
    "      tr.appendChild(el(\"td\", {}, j.attempt ?? \"\"));\n"
    "      tr.appendChild(el(\"td\", {}, when(j.started)));\n"
    "      tr.appendChild(el(\"td\", {}, j.started ? dur((j.finished || r.now) - j.started) : "
    "\"\"));\n"
    "      tr.appendChild(el(\"td\", {}, j.exit_status ?? \"\"));\n"
    "      tb.appendChild(tr);\n"
    "    }\n"
    "    if (!r.jobs.length) {\n"
    "      const tr = el(\"tr\", {});\n"
    "      tr.appendChild(el(\"td\", {colspan: 8, class: \"empty\"}, \"no jobs yet\"));\n"
    "      tb.appendChild(tr);\n"
    "    }\n"
    "    document.getElementById(\"meta\").textContent = r.total + \" job\" + (r.total === 1 ? "
    "\"\" : \"s\") +\n"
    "        (r.jobs.length < r.total ? \" (the newest \" + r.jobs.length + \" shown)\" : \"\");\n"
    "    setConn(true, \"updated \" + new Date().toTimeString().slice(0, 8));\n"
    "  } catch (err) {\n"
    "    setConn(false, \"cannot reach loom ui: \" + err.message);\n"
    "    next = 5000;\n"
    "  }\n"
    "  setTimeout(tick, next);\n"
    "}\n"
    "tick();\n" PAGE_END;

/* "'sha256-<base64>'" of the inline script in page. */
static void script_hash(const char *page, char *out, size_t outlen) {
  const char *a = strstr(page, "<script>"), *b = a ? strstr(a, "</script>") : NULL;
  out[0] = 0;
  if (!a || !b) return;
  a += strlen("<script>");
  unsigned char md[EVP_MAX_MD_SIZE], b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  unsigned int mdlen = 0;
  if (!EVP_Digest(a, (size_t)(b - a), md, &mdlen, EVP_sha256(), NULL)) return;
  EVP_EncodeBlock(b64, md, (int)mdlen);
  snprintf(out, outlen, "'sha256-%s'", (const char *)b64);
}

const char *http__csp(void) {
  static char csp[512];
  if (!csp[0]) {
    char h1[128], h2[128];
    script_hash(http__job_page, h1, sizeof h1);
    script_hash(http__index_page, h2, sizeof h2);
    snprintf(csp, sizeof csp,
             "default-src 'none'; script-src %s %s; style-src 'unsafe-inline'; "
             "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
             "frame-ancestors 'none'",
             h1, h2);
  }
  return csp;
}
