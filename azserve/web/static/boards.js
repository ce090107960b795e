// Boards: Go, Othello, Connect Four and tic-tac-toe as SVG drawn here; chess by chessground
// (the board Lichess uses); any other game as its own text rendering. A board is made once per
// game (makeBoard(el, spec)) and shown a frame at a time (board.show(frame)): the position,
// the move that led to it, and the search's policy there where it was recorded.

import { Chessground } from "./vendor/chessground/chessground.min.js";

const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, parent) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function text(parent, x, y, s, attrs) {
  const t = el("text", { x, y, "text-anchor": "middle", "dominant-baseline": "central",
    "font-size": 11, "font-family": "system-ui, sans-serif", fill: "#333", ...attrs }, parent);
  t.textContent = s;
  return t;
}

const LOOKS = {
  go: { cell: 40, background: "#dcb35c", first: "#111", second: "#f7f7f7" },
  othello: { cell: 48, background: "#2e8b57", first: "#111", second: "#f7f7f7" },
  connect4: { cell: 56, background: "#2456b5", first: "#d7263d", second: "#f4c430" },
  tictactoe: { cell: 100, background: "#fff", first: "#c0392b", second: "#2c6fb0" },
};

// The grid games: spec {style, rows, cols, colLabels, rowLabels}; frame.position.cells is the
// board top row first, "X" the first player's, "O" the second's, "." empty.
function gridBoard(root, spec) {
  const look = LOOKS[spec.style] || LOOKS.othello;
  const c = look.cell;
  const pad = spec.colLabels.length || spec.rowLabels.length ? 24 : 6;
  const c4 = spec.style === "connect4";
  const top = c4 ? 36 : pad; // Connect Four: room for the policy's bars, its labels below
  const w = pad * 2 + spec.cols * c;
  const h = top + pad + spec.rows * c;
  const svg = el("svg", { viewBox: `0 0 ${w} ${h}`, class: `grid-board ${spec.style}` }, root);
  const center = (r, col) => [pad + col * c + c / 2, top + r * c + c / 2];
  if (spec.style === "go") {
    el("rect", { x: 0, y: 0, width: w, height: h, fill: look.background }, svg);
    const [x0, y0] = center(0, 0);
    const [x1, y1] = center(spec.rows - 1, spec.cols - 1);
    for (let i = 0; i < spec.rows; i++) el("line", { x1: x0, x2: x1, y1: y0 + i * c, y2: y0 + i * c, stroke: "#333" }, svg);
    for (let j = 0; j < spec.cols; j++) el("line", { y1: y0, y2: y1, x1: x0 + j * c, x2: x0 + j * c, stroke: "#333" }, svg);
    for (const [r, col] of starPoints(spec.rows)) {
      const [x, y] = center(r, col);
      el("circle", { cx: x, cy: y, r: 3.5, fill: "#333" }, svg);
    }
  } else {
    el("rect", { x: pad, y: top, width: spec.cols * c, height: spec.rows * c, fill: look.background,
      rx: spec.style === "connect4" ? 8 : 0 }, svg);
    if (spec.style !== "connect4") {
      for (let i = 0; i <= spec.rows; i++) el("line", { x1: pad, x2: pad + spec.cols * c, y1: top + i * c, y2: top + i * c, stroke: spec.style === "tictactoe" ? "#333" : "#1d5e3a", "stroke-width": 2 }, svg);
      for (let j = 0; j <= spec.cols; j++) el("line", { y1: top, y2: top + spec.rows * c, x1: pad + j * c, x2: pad + j * c, stroke: spec.style === "tictactoe" ? "#333" : "#1d5e3a", "stroke-width": 2 }, svg);
    }
  }
  const labelY = c4 ? top + spec.rows * c + pad / 2 : top - 10;
  spec.colLabels.forEach((s, j) => text(svg, center(0, j)[0], labelY, s));
  spec.rowLabels.forEach((s, i) => text(svg, pad / 2, center(i, 0)[1], s));
  const layer = el("g", {}, svg);

  function stone(r, col, who) {
    const [x, y] = center(r, col);
    if (spec.style === "tictactoe") {
      const k = c * 0.28;
      const colour = who === "X" ? look.first : look.second;
      if (who === "X") {
        el("line", { x1: x - k, y1: y - k, x2: x + k, y2: y + k, stroke: colour, "stroke-width": 9, "stroke-linecap": "round" }, layer);
        el("line", { x1: x - k, y1: y + k, x2: x + k, y2: y - k, stroke: colour, "stroke-width": 9, "stroke-linecap": "round" }, layer);
      } else {
        el("circle", { cx: x, cy: y, r: k * 1.1, fill: "none", stroke: colour, "stroke-width": 9 }, layer);
      }
      return;
    }
    const fill = who === "X" ? look.first : who === "O" ? look.second : "#fff";
    const stroke = spec.style === "connect4" ? "#183c80" : "#222";
    el("circle", { cx: x, cy: y, r: c * (spec.style === "go" ? 0.47 : 0.4), fill, stroke,
      "stroke-width": who === "." ? 1 : 1.2, class: who === "." ? "hole" : "stone" }, layer);
  }

  return {
    show(frame) {
      layer.replaceChildren();
      const cells = frame.position.cells;
      for (let r = 0; r < spec.rows; r++) {
        for (let col = 0; col < spec.cols; col++) {
          const who = cells[r * spec.cols + col];
          if (who !== "." || spec.style === "connect4") stone(r, col, who);
        }
      }
      // The search's policy: a blue square on each of its moves, as large as its share.
      for (const p of frame.policy || []) {
        if (p.target === undefined) continue;
        if (spec.style === "connect4") {
          const [x] = center(0, p.target);
          const hgt = Math.max(2, 28 * p.p);
          el("rect", { x: x - c * 0.3, y: top - 4 - hgt, width: c * 0.6, height: hgt, fill: "#2f6fbf", opacity: 0.8 }, layer);
          continue;
        }
        const [x, y] = center(p.target[0], p.target[1]);
        const s = c * (0.25 + 0.6 * Math.sqrt(p.p));
        el("rect", { x: x - s / 2, y: y - s / 2, width: s, height: s, fill: "#1f5fd1", opacity: 0.6, class: "policy" }, layer);
        if (p.p >= 0.05) text(layer, x, y, Math.round(100 * p.p), { fill: "#fff", "font-size": c * 0.3, "font-weight": 700 });
      }
      // The last move: a ring on the stone it placed (for Connect Four: the disc it dropped).
      const m = frame.move;
      if (m && !m.illegal) {
        let cell = m.target;
        if (spec.style === "connect4" && frame.landed) cell = frame.landed;
        if (Array.isArray(cell)) {
          const [x, y] = center(cell[0], cell[1]);
          const ring = cells[cell[0] * spec.cols + cell[1]] === "X" ? "#fff" : "#e33";
          el("circle", { cx: x, cy: y, r: c * 0.16, fill: "none", stroke: ring, "stroke-width": 3, class: "last-move" }, layer);
        }
      }
    },
  };
}

function starPoints(n) {
  const e = n >= 13 ? 3 : 2;
  const pts = n < 7 ? [] : [[e, e], [e, n - 1 - e], [n - 1 - e, e], [n - 1 - e, n - 1 - e]];
  if (n % 2 === 1 && n >= 9) pts.push([(n - 1) / 2, (n - 1) / 2]);
  if (n >= 19) pts.push([e, 9], [9, e], [n - 1 - e, 9], [9, n - 1 - e]);
  return pts;
}

// Chess: chessground with the position's FEN, the last move and the policy's moves as arrows.
function chessBoard(root) {
  const wrap = document.createElement("div");
  wrap.className = "cg-wrap";
  root.appendChild(wrap);
  const cg = Chessground(wrap, { viewOnly: true, coordinates: true, animation: { enabled: true, duration: 150 },
    drawable: { enabled: false, visible: true } });
  return {
    show(frame) {
      const uci = frame.move && frame.move.uci;
      const shapes = (frame.policy || []).filter((p) => p.uci).slice(0, 4).map((p, i) => ({
        orig: p.uci.slice(0, 2), dest: p.uci.slice(2, 4), brush: i === 0 ? "green" : "paleBlue",
        modifiers: { lineWidth: Math.max(3, Math.round(16 * p.p)) },
      }));
      cg.set({
        fen: frame.position.fen.split(" ")[0],
        turnColor: frame.position.fen.split(" ")[1] === "b" ? "black" : "white",
        lastMove: uci ? [uci.slice(0, 2), uci.slice(2, 4)] : undefined,
      });
      cg.setAutoShapes(shapes);
    },
  };
}

function textBoard(root) {
  const pre = document.createElement("pre");
  pre.className = "textboard";
  root.appendChild(pre);
  return { show(frame) { pre.textContent = frame.position.text; } };
}

export function makeBoard(root, spec) {
  root.replaceChildren();
  root.dataset.kind = spec.kind;
  if (spec.kind === "grid") return gridBoard(root, spec);
  if (spec.kind === "chess") return chessBoard(root);
  return textBoard(root);
}

// Connect Four's moves name a column; the disc lands in the cell that filled.
export function markLanded(frames, spec) {
  if (spec.style !== "connect4") return;
  for (let t = 1; t < frames.length; t++) {
    const a = frames[t - 1].position.cells;
    const b = frames[t].position.cells;
    for (let i = 0; i < b.length; i++) {
      if (a[i] === "." && b[i] !== ".") frames[t].landed = [Math.floor(i / spec.cols), i % spec.cols];
    }
  }
}
