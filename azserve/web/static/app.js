// azserve web: the pages of one or more runs. Everything shown comes from the server's JSON
// (/api/...), which reads the runs' own files; server-sent events (/api/events) say what changed.

import { makeBoard, markLanded } from "./boards.js";

const $ = (id) => document.getElementById(id);
const state = { runs: [], run: null, page: "run", metrics: [], charts: {}, games: [], game: null,
  frame: 0, board: null, dirty: new Set() };

async function api(path) {
  const r = await fetch(path);
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

const fmt = (x, d = 3) => (x === null || x === undefined ? "-" : typeof x === "number" ?
  (Number.isInteger(x) ? x.toLocaleString("en") : x.toPrecision(d)) : String(x));
const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "-");
const runUrl = (p) => `/api/runs/${encodeURIComponent(state.run)}${p}`;
const fileUrl = (rel) => runUrl(`/files/${rel.split("/").map(encodeURIComponent).join("/")}`);

// --- routing: #page[/game-id[/frame]] ------------------------------------------------------------------

function route() {
  const [page, gameId, frame] = (location.hash.slice(1) || "run").split("/");
  state.wantFrame = frame === undefined ? null : Number(frame);
  state.page = ["run", "strength", "networks", "games"].includes(page) ? page : "run";
  for (const p of ["run", "strength", "networks", "games"]) $(`page-${p}`).hidden = p !== state.page;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === state.page);
  refresh(state.page).then(() => {
    if (state.page === "games" && gameId && (!state.game || state.game.id !== decodeURIComponent(gameId))) {
      openGame(decodeURIComponent(gameId));
    }
  });
}

async function refresh(page) {
  state.dirty.delete(page);
  try {
    if (page === "run") await showRun();
    if (page === "strength") await showStrength();
    if (page === "networks") await showNetworks();
    if (page === "games") await showGames();
  } catch (e) {
    console.error(e);
  }
}

// --- the run -------------------------------------------------------------------------------------

function statusTable(rows) {
  $("status").replaceChildren(...rows.map((r) => {
    const tr = document.createElement("tr");
    tr.innerHTML = "<td></td><td></td>";
    tr.cells[0].textContent = r.label;
    tr.cells[1].textContent = r.text;
    return tr;
  }));
}

const LOSSES = [["loss", "#1d232b"], ["policy_loss", "#2f6fbf"], ["value_loss", "#c0392b"],
  ["ownership_loss", "#8e44ad"], ["score_loss", "#16a085"], ["reply_loss", "#d35400"]];
const SIDES = [["learner_busy", "#c0392b", "y"], ["inference_busy", "#2f6fbf", "y"],
  ["reuse", "#16a085", "r"], ["mean_lag", "#8e44ad", "r"]];
const RATES = [["insert_rate", "#2f6fbf"], ["sample_rate", "#c0392b"]];

function chart(key, target, series, rows) {
  const present = series.filter(([k]) => rows.some((r) => typeof r[k] === "number"));
  const data = [rows.map((r) => r.step), ...present.map(([k]) => rows.map((r) => r[k] ?? null))];
  const old = state.charts[key];
  if (old && old.keys === present.map(([k]) => k).join()) {
    old.plot.setData(data);
    return;
  }
  if (old) old.plot.destroy();
  const axes = [{ label: "step" }, { scale: "y" }];
  if (present.some((s) => s[2] === "r")) axes.push({ scale: "r", side: 1, grid: { show: false } });
  const plot = new uPlot({
    width: 560, height: 260, scales: { x: { time: false } }, axes,
    series: [{ label: "step" }, ...present.map(([k, stroke, scale]) => ({ label: k, stroke, scale: scale || "y", width: 1.5, spanGaps: true }))],
  }, data, $(target));
  state.charts[key] = { plot, keys: present.map(([k]) => k).join() };
}

function drawRunCharts() {
  chart("loss", "chart-loss", LOSSES, state.metrics);
  chart("side", "chart-side", SIDES, state.metrics);
  chart("rates", "chart-rates", RATES, state.metrics);
}

async function showRun() {
  const [run, metrics] = await Promise.all([api(runUrl("")), api(runUrl("/metrics"))]);
  $("run-title").textContent = `${run.label}: ${run.game || "?"} (${run.path})`;
  statusTable(run.status);
  $("config").textContent = run.config || "(no config.toml yet)";
  $("summary-box").hidden = !run.summary;
  $("summary").textContent = run.summary ? JSON.stringify(run.summary, null, 1) : "";
  $("run-files").replaceChildren(...run.files.map((f) => {
    const a = document.createElement("a");
    a.href = fileUrl(f); a.textContent = f; a.target = "_blank"; a.style.marginRight = "1em";
    return a;
  }));
  state.metrics = metrics.rows;
  drawRunCharts();
}

// --- strength: each ladder's ratings against time, positions or steps -----------------------------

const COLOURS = ["#2f6fbf", "#c0392b", "#16a085", "#8e44ad", "#d35400", "#2c3e50", "#7f8c8d"];

function ladderChart(root, ladder, xKey) {
  const players = ladder.players.filter((p) => p.games > 0 || p.fixed);
  const byRun = new Map();
  for (const p of players) {
    if (p.anchor || p[xKey] === null || p[xKey] === undefined || p.lo === null) continue;
    if (!byRun.has(p.run)) byRun.set(p.run, []);
    byRun.get(p.run).push(p);
  }
  const xs = [...new Set([...byRun.values()].flat().map((p) => p[xKey]))].sort((a, b) => a - b);
  if (!xs.length) {
    root.insertAdjacentHTML("beforeend", "<p class='muted'>No rated checkpoint yet.</p>");
    return;
  }
  const data = [xs];
  const series = [{ label: xKey }];
  const bands = [];
  let i = 0;
  for (const [run, pts] of byRun) {
    const at = new Map(pts.map((p) => [p[xKey], p]));
    const colour = COLOURS[i++ % COLOURS.length];
    const base = data.length;
    data.push(xs.map((x) => at.get(x)?.elo ?? null), xs.map((x) => at.get(x)?.hi ?? null), xs.map((x) => at.get(x)?.lo ?? null));
    series.push({ label: run, stroke: colour, width: 2, spanGaps: true, points: { show: true, size: 6 } },
      { label: `${run} hi`, stroke: colour, width: 0.5, dash: [4, 4], spanGaps: true },
      { label: `${run} lo`, stroke: colour, width: 0.5, dash: [4, 4], spanGaps: true });
    bands.push({ series: [base + 1, base + 2], fill: colour + "22" });
  }
  const keys = [...byRun.keys()].map((run, j) => [run, COLOURS[j % COLOURS.length], "solid"]);
  for (const p of players.filter((q) => q.anchor)) {
    data.push(xs.map(() => p.elo));
    series.push({ label: `${p.player} (anchor)`, stroke: "#999", dash: [6, 4], width: 1 });
    keys.push([`${p.player} (anchor, ${Math.round(p.elo)})`, "#999", "dashed"]);
  }
  const legend = document.createElement("p");
  legend.className = "legend";
  for (const [name, colour, style] of keys) {
    const span = document.createElement("span");
    span.innerHTML = `<i style="border-top: 3px ${style} ${colour}"></i>`;
    span.append(name);
    legend.appendChild(span);
  }
  root.appendChild(legend);
  const div = document.createElement("div");
  root.appendChild(div);
  new uPlot({ width: 900, height: 340, scales: { x: { time: false } }, bands, series, legend: { show: false },
    axes: [{ label: { hours: "wall-clock hours", positions: "positions", step: "learner steps" }[xKey],
      values: (u, splits) => splits.map((v) => (v == null ? "" : String(+v.toPrecision(3)))) },
    { label: "Elo" }] }, data, div);
}

function ratingsTable(root, ladder) {
  const t = document.createElement("table");
  t.className = "grid";
  t.innerHTML = "<tr><th class='left'>player</th><th>Elo</th><th>95% interval</th><th>games</th><th>score</th><th>step</th><th>hours</th></tr>";
  for (const p of ladder.players) {
    const tr = t.insertRow();
    const cells = [p.player, p.games || p.fixed ? fmt(Math.round(p.elo)) : "-",
      p.fixed ? "fixed" : p.lo === null ? "-" : `${Math.round(p.lo)} .. ${Math.round(p.hi)}`,
      p.games, p.games ? `${Math.round((100 * p.score) / p.games)}%` : "-", fmt(p.step), p.hours == null ? "-" : p.hours.toFixed(3)];
    cells.forEach((c, j) => { const td = tr.insertCell(); td.textContent = c; if (j === 0) td.className = "left"; });
  }
  root.appendChild(t);
}

async function showStrength() {
  const { ladders } = await api("/api/strength");
  const root = $("ladders");
  if (!ladders.length) return;
  root.replaceChildren();
  // The ladders that rate the chosen run first.
  ladders.sort((a, b) => b.runs.includes(state.run) - a.runs.includes(state.run));
  for (const ladder of ladders) {
    const box = document.createElement("div");
    box.className = "ladder";
    box.innerHTML = `<h3></h3><p class="muted"></p>`;
    box.querySelector("h3").textContent = `ladder ${ladder.id}`;
    box.querySelector("p").textContent = `${ladder.games} games (${ladder.disputed} disputed), runs: ${ladder.runs.join(", ")}`;
    ladderChart(box, ladder, $("strength-x").value);
    ratingsTable(box, ladder);
    root.appendChild(box);
  }
}

// --- networks -----------------------------------------------------------------------------------

async function showNetworks() {
  const { networks } = await api(runUrl("/networks"));
  const keys = [...new Set(networks.flatMap((n) => Object.keys(n.scores || {})))].sort();
  const t = $("networks");
  t.replaceChildren();
  const head = t.insertRow();
  for (const h of ["step", "version", "written", "hours", "Elo", "95% interval", "ladder games", ...keys, "file"]) {
    const th = document.createElement("th");
    th.textContent = h;
    head.appendChild(th);
  }
  for (const n of networks) {
    const r = n.rating || {};
    const cells = [fmt(n.step), fmt(n.version), when(n.time), n.hours == null ? "-" : n.hours.toFixed(3),
      r.elo == null ? "-" : Math.round(r.elo), r.lo == null ? "-" : `${Math.round(r.lo)} .. ${Math.round(r.hi)}`,
      r.games ?? "-", ...keys.map((k) => fmt(n.scores?.[k]))];
    const tr = t.insertRow();
    for (const c of cells) tr.insertCell().textContent = c;
    const td = tr.insertCell();
    td.className = "left";
    if (n.kept && n.file) {
      const a = document.createElement("a");
      a.href = fileUrl(n.file); a.textContent = n.file.split("/").pop();
      td.appendChild(a);
    } else td.textContent = "pruned";
  }
}

// --- games ------------------------------------------------------------------------------------------

async function showGames() {
  const { games } = await api(runUrl("/games"));
  state.games = games;
  const source = $("games-source").value;
  const list = $("games-list");
  list.replaceChildren(...games.filter((g) => !source || g.source === source).map((g) => {
    const li = document.createElement("li");
    li.dataset.id = g.id;
    li.innerHTML = "<span class='src'></span><span class='t'></span><br><span class='muted'></span>";
    li.querySelector(".src").textContent = g.source;
    li.querySelector(".t").textContent = g.title;
    li.querySelector(".muted").textContent = [g.result, `${g.moves} moves`, when(g.time)].filter((x) => x).join(", ");
    li.classList.toggle("selected", state.game?.id === g.id);
    li.onclick = () => { location.hash = `games/${encodeURIComponent(g.id)}`; };
    return li;
  }));
  if (!state.game && games.length && !location.hash.includes("/")) openGame(games[0].id);
}

async function openGame(id) {
  let g;
  try {
    g = await api(runUrl(`/games/${encodeURIComponent(id)}`));
  } catch (e) {
    $("game-title").textContent = `game ${id}: ${e.message}`;
    return;
  }
  state.game = g;
  markLanded(g.frames, g.board);
  state.board = makeBoard($("board"), g.board);
  $("game-title").textContent = g.title;
  $("game-result").textContent = g.result;
  $("game-note").textContent = g.note ? `Note: ${g.note}` : "";
  const link = $("record-link");
  link.hidden = !g.record;
  if (g.record) { link.href = fileUrl(g.record); link.textContent = `record: ${g.record.split("/").pop()}`; }
  $("slider").max = g.frames.length - 1;
  $("moves").replaceChildren(...g.frames.slice(1).map((f, i) => {
    const li = document.createElement("li");
    li.innerHTML = "<span class='muted'></span> ";
    li.firstChild.textContent = `${i + 1}.`;
    li.append(f.move.text);
    li.onclick = () => showFrame(i + 1);
    return li;
  }));
  for (const li of $("games-list").children) li.classList.toggle("selected", li.dataset.id === id);
  showFrame(state.wantFrame ?? g.frames.length - 1);
}

function showFrame(t) {
  const g = state.game;
  if (!g) return;
  t = Math.max(0, Math.min(g.frames.length - 1, t));
  state.frame = t;
  const f = g.frames[t];
  state.board.show(f);
  $("slider").value = t;
  const sides = g.board.sides;
  const m = f.move;
  let info = t === 0 ? "start" : `move ${t}: ${sides[m.by]} ${m.text}${m.illegal ? " (illegal: forfeit)" : ""}`;
  if (f.position.toPlay !== null && f.position.toPlay !== undefined) info += `; ${sides[f.position.toPlay]} to play`;
  if (f.outcome !== undefined) info += `; result for the side to move: ${f.outcome > 0 ? "+" : ""}${f.outcome}`;
  $("frame-info").textContent = info;
  const pol = $("policy");
  pol.replaceChildren();
  if (f.policy && f.policy.length) {
    const t2 = document.createElement("table");
    t2.innerHTML = "<tr><td colspan=3 class='muted'>search policy here</td></tr>";
    for (const p of f.policy.slice(0, 8)) {
      const tr = t2.insertRow();
      tr.insertCell().textContent = p.text;
      tr.insertCell().textContent = `${(100 * p.p).toFixed(1)}%`;
      tr.insertCell().innerHTML = `<span class="bar" style="width:${Math.round(120 * p.p)}px"></span>`;
    }
    pol.appendChild(t2);
  }
  [...$("moves").children].forEach((li, i) => li.classList.toggle("current", i + 1 === t));
}

// --- live ------------------------------------------------------------------------------------------

function listen() {
  const es = new EventSource("/api/events");
  es.onopen = () => { $("live").className = "live on"; };
  es.onerror = () => { $("live").className = "live off"; };
  const mine = (e) => { const d = JSON.parse(e.data); return d.run === state.run ? d : null; };
  es.addEventListener("metrics", (e) => {
    const d = mine(e);
    if (!d) return;
    if (d.status) statusTable(d.status);
    state.metrics = d.reset ? d.rows : state.metrics.concat(d.rows);
    if (state.page === "run") drawRunCharts();
  });
  for (const kind of ["networks", "strength", "games", "status"]) {
    es.addEventListener(kind, (e) => {
      const d = JSON.parse(e.data);
      if (kind !== "strength" && d.run !== state.run) return;
      if (kind === "status" && d.status) statusTable(d.status);
      const page = kind === "status" ? "run" : kind;
      if (state.page === page) refresh(page);
      else state.dirty.add(page);
    });
  }
}

// --- start -------------------------------------------------------------------------------------------

async function main() {
  const { runs } = await api("/api/runs");
  state.runs = runs;
  const params = new URLSearchParams(location.search);
  state.run = runs.some((r) => r.id === params.get("run")) ? params.get("run") : runs[0].id;
  const select = $("run-select");
  for (const r of runs) select.add(new Option(`${r.label} (${r.game || "?"})`, r.id, false, r.id === state.run));
  select.onchange = () => {
    state.run = select.value;
    state.game = null;
    state.metrics = [];
    route();
  };
  $("strength-x").onchange = () => showStrength();
  $("games-source").onchange = () => showGames();
  $("slider").oninput = (e) => showFrame(Number(e.target.value));
  $("first").onclick = () => showFrame(0);
  $("prev").onclick = () => showFrame(state.frame - 1);
  $("next").onclick = () => showFrame(state.frame + 1);
  $("last").onclick = () => showFrame(Infinity);
  document.addEventListener("keydown", (e) => {
    if (state.page !== "games" || e.target.tagName === "SELECT") return;
    if (e.key === "ArrowLeft") showFrame(state.frame - 1);
    if (e.key === "ArrowRight") showFrame(state.frame + 1);
  });
  window.addEventListener("hashchange", route);
  route();
  listen();
}

main();
