// streamdeid review page: plain JavaScript, no build step, nothing loaded from elsewhere.
// Every URL is relative to the page's /TOKEN/ path, so each request carries the token.
//
// Frame index <-> time: the server sends each output frame's presentation time (PyAV pts x time base,
// in seconds). Frame i is on screen from times[i] to times[i+1]; a seek to frame i goes to the middle
// of that interval, and the frame shown is the last one whose time is <= currentTime (or the frame
// requestVideoFrameCallback reports while playing). A drawn box is saved for that frame.
"use strict";

const STATE_NAMES = ["detected", "held", "backfilled", "kept"];  // kept: left visible (--keep/--only)
const COLORS = { detected: "#3ddc84", held: "#ff9f1c", backfilled: "#4aa3ff", kept: "#b0b0b0", removed: "#ff4d4d",
                 added: "#ff5ce1", flag: "#ffd23f" };

const R = {
  data: null,          // /api/review
  times: [],           // frame presentation times (s)
  frame: 0,            // the frame on screen
  byFrame: new Map(),  // frame -> [{track, box, state}]
  tracks: new Map(),   // id -> track
  added: [],           // [{frame, box}]
  removed: new Map(),  // track id -> {frame, box, track}
  selectedTrack: null,
  selectedFlag: null,
  drag: null,          // box being drawn {x0, y0, x1, y1}
  dirty: false,
  stamp: "",           // the version of the edits file loaded or last saved (Save refuses another's)
};
window.review = R;  // for people poking at it in the console

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
  return e;
};
const fmtBox = (b) => "[" + b.map((v) => Math.round(v)).join(", ") + "]";

function setStatus(text, error = false) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("error", error);
}

function markDirty() {
  R.dirty = true;
  $("save").disabled = false;
  $("save").classList.add("dirty");
  setStatus("unsaved corrections");
}

// ------------------------------------------------------------------ time <-> frame
function frameAt(t) {
  const T = R.times;
  let lo = 0, hi = T.length - 1;
  if (t < T[0]) return 0;
  while (lo < hi) {  // the last i with T[i] <= t (1 us of slack for rounding)
    const mid = (lo + hi + 1) >> 1;
    if (T[mid] <= t + 1e-6) lo = mid; else hi = mid - 1;
  }
  return lo;
}

function timeOf(i) {
  const T = R.times;
  const next = i + 1 < T.length ? T[i + 1] : T[i] + 1 / R.data.video.fps;
  return (T[i] + next) / 2;
}

function seekFrame(i) {
  i = Math.max(0, Math.min(R.times.length - 1, i | 0));
  const v = $("video");
  v.pause();
  v.currentTime = timeOf(i);
  showFrame(i);
}

function showFrame(i) {
  R.frame = i;
  $("frame-input").value = i;
  $("scrub").value = i;
  $("clock").textContent = R.times[i].toFixed(3) + " s";
  drawOverlay();
  drawTimeline();
}

// ------------------------------------------------------------------ overlay
function coversAt(i) { return R.byFrame.get(i) || []; }

function drawOverlay() {
  const c = $("overlay"), ctx = c.getContext("2d");
  ctx.clearRect(0, 0, c.width, c.height);
  const lw = Math.max(2, c.width / 400);
  ctx.lineWidth = lw;
  ctx.font = `${Math.round(lw * 7)}px system-ui, sans-serif`;
  if ($("show-covers").checked) {
    for (const cv of coversAt(R.frame)) {
      const removed = R.removed.has(cv.track);
      ctx.strokeStyle = removed ? COLORS.removed : COLORS[cv.state];
      ctx.setLineDash(removed || cv.state === "kept" ? [lw * 3, lw * 2] : cv.state === "detected" ? [] : [lw * 2, lw * 2]);
      const [x1, y1, x2, y2] = cv.box;
      ctx.strokeRect(x1, y1, x2 - x1, y2 - y1);
      ctx.fillStyle = ctx.strokeStyle;
      ctx.fillText(String(cv.track) + (R.selectedTrack === cv.track ? " ◀" : ""), x1 + lw, y1 - lw);
    }
  }
  ctx.setLineDash([]);
  for (const a of R.added) {
    if (a.frame !== R.frame) continue;
    ctx.strokeStyle = COLORS.added;
    ctx.strokeRect(a.box[0], a.box[1], a.box[2] - a.box[0], a.box[3] - a.box[1]);
  }
  const f = R.selectedFlag;
  const seen = f && (f.seen ? f.seen.find((s) => s[0] === R.frame) : f.frame === R.frame ? [f.frame, f.box] : null);
  if (seen) {  // the flagged box, on each sampled frame it was found on
    const b = seen[1], g = 4 * lw;
    ctx.strokeStyle = COLORS.flag;
    ctx.setLineDash([lw, lw]);
    ctx.strokeRect(b[0] - g, b[1] - g, b[2] - b[0] + 2 * g, b[3] - b[1] + 2 * g);
    ctx.setLineDash([]);
  }
  if (R.drag) {
    const d = R.drag;
    ctx.strokeStyle = COLORS.added;
    ctx.setLineDash([lw * 2, lw]);
    ctx.strokeRect(Math.min(d.x0, d.x1), Math.min(d.y0, d.y1), Math.abs(d.x1 - d.x0), Math.abs(d.y1 - d.y0));
    ctx.setLineDash([]);
  }
}

function toSource(ev) {  // mouse -> source pixels
  const c = $("overlay"), r = c.getBoundingClientRect();
  return [(ev.clientX - r.left) / r.width * c.width, (ev.clientY - r.top) / r.height * c.height];
}

function setupOverlay() {
  const c = $("overlay"), v = $("video");
  c.addEventListener("mousedown", (ev) => {
    if (ev.button !== 0) return;
    ev.preventDefault();
    if (!v.paused) { v.pause(); return; }
    const [x, y] = toSource(ev);
    R.drag = { x0: x, y0: y, x1: x, y1: y };
  });
  window.addEventListener("mousemove", (ev) => {
    if (!R.drag) return;
    const [x, y] = toSource(ev);
    R.drag.x1 = Math.max(0, Math.min(c.width, x));
    R.drag.y1 = Math.max(0, Math.min(c.height, y));
    drawOverlay();
  });
  window.addEventListener("mouseup", () => {
    if (!R.drag) return;
    const d = R.drag;
    R.drag = null;
    const box = [Math.min(d.x0, d.x1), Math.min(d.y0, d.y1), Math.max(d.x0, d.x1), Math.max(d.y0, d.y1)];
    if (box[2] - box[0] < 4 || box[3] - box[1] < 4) {  // a click: select the cover under it
      const hit = coversAt(R.frame).filter((cv) => cv.box[0] <= d.x0 && d.x0 <= cv.box[2] && cv.box[1] <= d.y0 && d.y0 <= cv.box[3]);
      if (hit.length) selectTrack(hit[0].track, true);
      drawOverlay();
      return;
    }
    addBox(R.frame, box);
  });
}

// ------------------------------------------------------------------ corrections
function addBox(frame, box) {
  R.added.push({ frame, box: box.map((v) => Math.round(v * 10) / 10) });
  markDirty();
  renderCorrections();
  drawOverlay();
  drawTimeline();
}

function toggleRemoved(trackId, at = null) {
  if (R.removed.has(trackId)) {
    R.removed.delete(trackId);
  } else {
    const t = R.tracks.get(trackId);
    // the cover on the frame shown when the track has one there, else the track's own frame
    const here = at || coversAt(R.frame).find((cv) => cv.track === trackId);
    const frame = here ? (here.frame ?? R.frame) : t.rep.frame;
    const box = here ? here.box : t.rep.box;
    R.removed.set(trackId, { frame, box: box.slice(), track: trackId });
  }
  markDirty();
  renderCorrections();
  renderTracks();
  drawOverlay();
  drawTimeline();
}

function renderCorrections() {
  const add = $("added"), rem = $("removed");
  add.replaceChildren(...R.added.map((a, k) => el("li", { dataset: { frame: a.frame } },
    el("a", { href: "#", onclick: (e) => { e.preventDefault(); seekFrame(a.frame); } }, `frame ${a.frame} ${fmtBox(a.box)}`),
    el("button", { type: "button", title: "remove this box", onclick: () => {
      R.added.splice(k, 1); markDirty(); renderCorrections(); drawOverlay(); drawTimeline(); } }, "✕"))));
  if (!R.added.length) add.append(el("li", { class: "small" }, "none: pause and drag on the picture"));
  rem.replaceChildren(...[...R.removed.values()].map((r) => el("li", { dataset: { track: r.track } },
    el("a", { href: "#", onclick: (e) => { e.preventDefault(); seekFrame(r.frame); } }, `track ${r.track} (frame ${r.frame})`),
    el("button", { type: "button", title: "keep this cover", onclick: () => toggleRemoved(r.track) }, "✕"))));
  if (!R.removed.size) rem.append(el("li", { class: "small" }, "none: “Not a face” on a track"));
}

async function save() {
  // stamp: the version of the file this page loaded (the server refuses to save over another review's)
  const body = { add: R.added, remove: [...R.removed.values()].map(({ frame, box }) => ({ frame, box })),
                 stamp: R.stamp };
  $("save").disabled = true;
  setStatus("saving…");
  try {
    const res = await fetch("api/edits", { method: "POST", headers: { "content-type": "application/json" },
                                           body: JSON.stringify(body) });
    const out = await res.json();
    if (!res.ok) throw new Error(out.error || res.statusText);
    R.dirty = false;
    R.stamp = out.stamp;
    $("save").classList.remove("dirty");
    setStatus(`saved: ${out.add} added, ${out.remove} removed → ${out.path}`);
    document.body.dataset.saved = out.path;
  } catch (err) {
    $("save").disabled = false;
    setStatus("not saved: " + err.message, true);
  }
}

// ------------------------------------------------------------------ tracks and flags
function selectTrack(id, scroll = false) {
  R.selectedTrack = id;
  for (const li of document.querySelectorAll("#tracks .track")) li.classList.toggle("selected", Number(li.dataset.track) === id);
  if (scroll) document.querySelector(`#tracks .track[data-track="${id}"]`)?.scrollIntoView({ block: "nearest" });
  drawOverlay();
  drawTimeline();
}

function thumb(name, caption) {
  if (!name) return null;
  return el("figure", {}, el("img", { src: `thumb/${name}.jpg`, alt: caption, loading: "lazy" }), el("figcaption", {}, caption));
}

function renderTracks() {
  const list = $("tracks");
  list.replaceChildren(...R.data.tracks.map((t) => {
    const removed = R.removed.has(t.id);
    const states = Object.entries(t.states).map(([k, n]) => `${n} ${k}`).join(", ");
    const spans = t.decision && t.decision.left_visible ? (t.decision.visible_frames || []).map(([a, b]) => `${a}–${b}`).join(", ") : "";
    const decision = t.decision ? ` · ${t.decision.left_visible ? "LEFT VISIBLE" + (spans ? " on frames " + spans : "") : "covered"}` : "";
    return el("li", { class: "track" + (removed ? " removed" : "") + (R.selectedTrack === t.id ? " selected" : ""),
                      dataset: { track: t.id } },
      el("div", { class: "thumbs" }, thumb(t.thumb_out, "output"), thumb(t.thumb_src, "original"),
         el("strong", {}, `#${t.id}`)),
      el("div", { class: "meta" }, `frames ${t.first}–${t.last} (${t.frames}) · ${states} · best ${t.best.toFixed(2)}${decision}`),
      el("div", { class: "actions" },
        el("button", { type: "button", class: "go", onclick: () => { selectTrack(t.id); seekFrame(t.rep.frame); } }, "Show"),
        el("button", { type: "button", class: "not-face" + (removed ? " on" : ""), "aria-pressed": String(removed),
                       onclick: () => toggleRemoved(t.id) }, removed ? "Not a face ✓" : "Not a face")));
  }));
}

function renderFlags() {
  const list = $("flags");
  $("flag-count").textContent = `(${R.data.flags.length})`;
  if (!R.data.flags.length) { list.append(el("li", { class: "small" }, "none")); return; }
  list.replaceChildren(...R.data.flags.map((f, k) => {
    const action = f.kind === "visible"
      ? el("button", { type: "button", class: "cover-it", onclick: (e) => { e.stopPropagation(); addBox(f.frame, f.box); seekFrame(f.frame); } }, "Cover this face")
      : el("button", { type: "button", class: "not-face", onclick: (e) => {
          e.stopPropagation(); if (!R.removed.has(f.track)) toggleRemoved(f.track, { frame: f.frame, box: f.box }); } }, "Not a face");
    return el("li", { class: "flag", dataset: { kind: f.kind, frame: f.frame, index: k },
                      onclick: () => { R.selectedFlag = f; for (const li of list.children) li.classList.toggle("selected", li.dataset.index === String(k));
                                       if (f.track !== null) selectTrack(f.track, true); seekFrame(f.frame); } },
      thumb(f.thumb_out, "output"),
      el("div", {},
        el("div", {}, el("span", { class: "badge " + f.kind }, f.kind), `frame ${f.frame} · doubt ${f.doubt.toFixed(2)}`),
        el("div", { class: "why" }, f.why),
        el("div", { class: "actions" }, action)));
  }));
}

function renderFacts() {
  $("facts").replaceChildren(...R.data.facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  if (R.data.audit_log) $("audit-link").replaceChildren(el("a", { href: "audit.jsonl", target: "_blank" }, "the audit log"));
  $("edits-path").textContent = "Save writes " + R.data.edits.path;
}

// ------------------------------------------------------------------ timeline
const ROW = () => (R.data.tracks.length > 40 ? 6 : 10);
const TOP = 12;  // the flags' row

function drawTimeline() {
  const c = $("timeline");
  const w = c.clientWidth || 600, rows = R.data.tracks.length, row = ROW();
  const h = TOP + rows * row + 4, dpr = window.devicePixelRatio || 1;
  if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr); c.style.height = h + "px";
  }
  const ctx = c.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const n = R.times.length, x = (i) => (i / n) * w, fw = Math.max(1, w / n);
  ctx.fillStyle = COLORS.flag;
  for (const f of R.data.flags) {
    for (const t of f.seen ? f.seen.map((s) => s[0]) : [f.frame]) ctx.fillRect(x(t), 2, Math.max(2, fw), TOP - 4);
  }
  for (const a of R.added) { ctx.fillStyle = COLORS.added; ctx.fillRect(x(a.frame), 0, Math.max(2, fw), TOP); }
  R.data.tracks.forEach((t, r) => {
    const y = TOP + r * row;
    if (R.selectedTrack === t.id) { ctx.fillStyle = "#333a44"; ctx.fillRect(0, y, w, row); }
    const removed = R.removed.has(t.id);
    for (const cv of t.covers) {
      ctx.fillStyle = removed ? COLORS.removed : COLORS[STATE_NAMES[cv[5]] || "held"];
      ctx.fillRect(x(cv[0]), y + 1, fw, row - 2);
    }
  });
  ctx.fillStyle = "#fff";
  ctx.fillRect(x(R.frame) + fw / 2 - 0.5, 0, 1, h);
}

function setupTimeline() {
  $("timeline").addEventListener("click", (ev) => {
    const c = $("timeline"), r = c.getBoundingClientRect();
    const frame = Math.floor((ev.clientX - r.left) / r.width * R.times.length);
    const row = Math.floor((ev.clientY - r.top - TOP) / ROW());
    if (row >= 0 && row < R.data.tracks.length) selectTrack(R.data.tracks[row].id, true);
    seekFrame(frame);
  });
  window.addEventListener("resize", drawTimeline);
}

// ------------------------------------------------------------------ playback
function setupPlayer() {
  const v = $("video");
  v.addEventListener("seeked", () => showFrame(frameAt(v.currentTime)));
  v.addEventListener("play", () => { $("play").textContent = "❚❚"; });
  v.addEventListener("pause", () => { $("play").textContent = "▶"; showFrame(frameAt(v.currentTime)); });
  if ("requestVideoFrameCallback" in HTMLVideoElement.prototype) {
    const onFrame = (_now, meta) => { if (!v.paused) showFrame(frameAt(meta.mediaTime)); v.requestVideoFrameCallback(onFrame); };
    v.requestVideoFrameCallback(onFrame);
  } else {
    v.addEventListener("timeupdate", () => showFrame(frameAt(v.currentTime)));
  }
  $("play").addEventListener("click", () => (v.paused ? v.play() : v.pause()));
  $("prev").addEventListener("click", () => seekFrame(R.frame - 1));
  $("next").addEventListener("click", () => seekFrame(R.frame + 1));
  $("scrub").addEventListener("input", (e) => seekFrame(Number(e.target.value)));
  $("frame-input").addEventListener("change", (e) => seekFrame(Number(e.target.value)));
  $("show-covers").addEventListener("change", drawOverlay);
  $("save").addEventListener("click", save);
  document.addEventListener("keydown", (ev) => {
    if (ev.target.tagName === "INPUT") return;
    if (ev.key === "ArrowLeft") { seekFrame(R.frame - 1); ev.preventDefault(); }
    else if (ev.key === "ArrowRight") { seekFrame(R.frame + 1); ev.preventDefault(); }
    else if (ev.key === " ") { v.paused ? v.play() : v.pause(); ev.preventDefault(); }
  });
  window.addEventListener("beforeunload", (ev) => { if (R.dirty) { ev.preventDefault(); ev.returnValue = ""; } });
}

// ------------------------------------------------------------------ start
async function main() {
  const res = await fetch("api/review");
  if (!res.ok) { setStatus("cannot load the review: " + res.status, true); return; }
  const d = R.data = await res.json();
  R.times = d.video.times;
  document.title = `review: ${d.output}`;
  $("title").textContent = `— ${d.output}`;
  $("track-count").textContent = `(${d.tracks.length})`;
  $("frame-count").textContent = `of ${d.video.frames}`;
  $("scrub").max = d.video.frames - 1;
  $("frame-input").max = d.video.frames - 1;
  const c = $("overlay");
  c.width = d.video.width; c.height = d.video.height;  // the overlay draws in the output's own pixels
  for (const t of d.tracks) {
    R.tracks.set(t.id, t);
    for (const cv of t.covers) {
      const list = R.byFrame.get(cv[0]) || [];
      list.push({ track: t.id, frame: cv[0], box: cv.slice(1, 5), state: STATE_NAMES[cv[5]] || "held" });
      R.byFrame.set(cv[0], list);
    }
  }
  R.stamp = d.edits.stamp;
  for (const a of d.edits.add) R.added.push({ frame: a.frame, box: a.box });
  for (const r of d.edits.remove) if (r.track !== null) R.removed.set(r.track, { frame: r.frame, box: r.box, track: r.track });
  renderFacts(); renderFlags(); renderTracks(); renderCorrections();
  setupOverlay(); setupTimeline(); setupPlayer();
  const v = $("video");
  v.addEventListener("loadedmetadata", () => { seekFrame(0); document.body.dataset.ready = "1"; }, { once: true });
  v.addEventListener("error", () => setStatus("the video does not play here (media error " + (v.error && v.error.code) + ")", true));
  v.src = "video";
  setStatus(d.edits.add.length || d.edits.remove.length ? "corrections loaded from " + d.edits.path : "ready");
  showFrame(0);
}

main().catch((err) => setStatus("error: " + err.message, true));
