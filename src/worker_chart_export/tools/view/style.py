"""The page's stylesheet, inlined into every page (no external fonts or files: works offline)."""

CSS = """
:root {
  --bg:#f4f5f7;
  --card:#fff;
  --ink:#1d2330;
  --muted:#5f6b7a;
  --line:#e2e5ea;
  --ok:#137a3f;
  --ok-bg:#e3f5ea;
  --bad:#b42318;
  --bad-bg:#fdecea;
  --warn:#8a5a00;
  --warn-bg:#fff6e0;
  --accent:#2f5bd3;
  --mono:ui-monospace,"SFMono-Regular","DejaVu Sans Mono",Menlo,Consolas,monospace;
}
* {
  box-sizing:border-box;
}
body {
  margin:0;
  background:var(--bg);
  color:var(--ink);
  font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
}
main {
  max-width:1320px;
  margin:0 auto;
  padding:28px 24px 40px;
}
header {
  background:var(--card);
  border:1px solid var(--line);
  border-radius:12px;
  padding:22px 26px;
  margin-bottom:22px;
}
.eyebrow {
  font-size:12px;
  letter-spacing:.08em;
  text-transform:uppercase;
  color:var(--muted);
}
h1 {
  margin:2px 0 4px;
  font-size:26px;
  line-height:1.25;
  word-break:break-all;
}
h1 .run {
  font-weight:400;
  color:var(--muted);
  font-size:18px;
}
.facts {
  margin:0 0 14px;
  color:var(--muted);
}
.status {
  display:flex;
  align-items:center;
  gap:12px;
  flex-wrap:wrap;
}
.pill {
  display:inline-block;
  padding:3px 12px;
  border-radius:999px;
  font-weight:700;
  font-size:13px;
  letter-spacing:.04em;
}
.pill.ok {
  background:var(--ok-bg);
  color:var(--ok);
}
.pill.bad {
  background:var(--bad-bg);
  color:var(--bad);
}
.pill.neutral {
  background:#e8edf7;
  color:var(--accent);
}
.status-note {
  color:var(--muted);
  font-size:14px;
}
.step-error {
  margin:10px 0 0;
  color:var(--bad);
}
.stats {
  display:flex;
  gap:12px;
  margin-top:18px;
  flex-wrap:wrap;
}
.stat {
  min-width:110px;
  padding:10px 16px;
  border:1px solid var(--line);
  border-radius:10px;
  color:var(--muted);
  font-size:13px;
}
.stat-value {
  font-size:24px;
  font-weight:700;
  color:var(--ink);
  line-height:1.2;
}
h2 {
  font-size:18px;
  margin:26px 0 12px;
}
.count {
  display:inline-block;
  min-width:24px;
  padding:0 8px;
  border-radius:999px;
  background:var(--line);
  font-size:13px;
  text-align:center;
  color:var(--muted);
  vertical-align:2px;
}
.grid {
  display:grid;
  grid-template-columns:repeat(auto-fill,minmax(min(100%,520px),1fr));
  gap:18px;
}
figure.chart {
  margin:0;
  background:var(--card);
  border:1px solid var(--line);
  border-radius:12px;
  overflow:hidden;
  display:flex;
  flex-direction:column;
}
figure.chart img {
  display:block;
  width:100%;
  height:auto;
  background:#fff;
  border-bottom:1px solid var(--line);
}
.placeholder {
  aspect-ratio:16/9;
  display:flex;
  flex-direction:column;
  align-items:center;
  justify-content:center;
  gap:6px;
  padding:20px;
  text-align:center;
  background:repeating-linear-gradient(45deg,#fafafa,#fafafa 10px,#f1f2f4 10px,#f1f2f4 20px);
  border-bottom:1px dashed #c9ced6;
  color:var(--bad);
  word-break:break-word;
}
.placeholder span {
  color:var(--muted);
  font-size:13px;
}
figcaption {
  padding:14px 18px 16px;
}
.template {
  font-family:var(--mono);
  font-weight:700;
  font-size:14px;
  word-break:break-all;
}
.label {
  color:var(--muted);
}
dl {
  display:grid;
  grid-template-columns:max-content 1fr;
  gap:2px 14px;
  margin:10px 0 8px;
  font-size:14px;
}
dt {
  color:var(--muted);
}
dd {
  margin:0;
  word-break:break-word;
}
.uri {
  font-family:var(--mono);
  font-size:12px;
  color:var(--muted);
  word-break:break-all;
}
table.failures {
  width:100%;
  border-collapse:separate;
  border-spacing:0;
  background:var(--card);
  border:1px solid var(--line);
  border-radius:12px;
  overflow:hidden;
  font-size:14px;
}
th {
  text-align:left;
  font-size:12px;
  text-transform:uppercase;
  letter-spacing:.06em;
  color:var(--muted);
  background:#fafbfc;
}
th,td {
  padding:10px 14px;
  border-bottom:1px solid var(--line);
  vertical-align:top;
}
tbody tr:last-child td {
  border-bottom:0;
}
td.template {
  word-break:normal;
  overflow-wrap:break-word;
}
td.message {
  word-break:break-word;
}
td.details code {
  font-family:var(--mono);
  font-size:12px;
  color:var(--muted);
  word-break:break-all;
}
.code {
  display:inline-block;
  font-family:var(--mono);
  font-size:12px;
  font-weight:700;
  padding:2px 8px;
  border-radius:6px;
  background:var(--bad-bg);
  color:var(--bad);
  white-space:nowrap;
}
.problems {
  background:var(--warn-bg);
  border:1px solid #f0d9a0;
  border-radius:12px;
  padding:4px 22px 10px;
  color:var(--warn);
}
.problems h2 {
  margin:12px 0 4px;
  font-size:16px;
}
.problems li {
  word-break:break-word;
}
.empty {
  color:var(--muted);
  background:var(--card);
  border:1px dashed var(--line);
  border-radius:12px;
  padding:16px 20px;
  margin:0;
}
footer {
  margin-top:30px;
  color:var(--muted);
  font-size:13px;
}
"""
