// The rate limit dashboard: polls <api>/zones (API.md beside this file), shows each zone, its
// rates over the last minutes, its top keys and Redis's health. Plain DOM, no framework; every
// text from the server (zone names, keys: client-chosen) goes in as text, never as markup.
"use strict";
(() => {
  const POLL_MS = 1500;
  const HISTORY_MS = 5 * 60 * 1000;  // what the charts show
  const MORE = 20;                    // keys asked for when a zone's list is opened
  const SERIES = ["admitted", "rejected", "delayed", "blocked"];
  const base = new URL(".", location.href);

  const zones = new Map();   // name -> {prev: sample, points: [{t, admitted, ...}]}
  const redisPrev = new Map();
  const opened = new Set();  // zones whose longer list is shown
  const longer = new Map();  // zone -> its last .../top answer
  let last = null;           // the last /zones answer
  let write = false;
  let timer = 0;

  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  async function getJSON(path, init) {
    const r = await fetch(new URL(path, base), Object.assign({
      headers: { Accept: "application/json" }, cache: "no-store", credentials: "same-origin",
    }, init));
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) throw new Error((body && body.error) || ("HTTP " + r.status));
    return body;
  }

  // ---- numbers ------------------------------------------------------------------------------

  const isNum = (v) => typeof v === "number" && isFinite(v);

  function fmt(v) {
    if (!isNum(v)) return "-";
    if (Math.abs(v) < 10 && v !== Math.trunc(v)) return v.toFixed(1);
    return Math.round(v).toLocaleString("en-US");
  }

  function fmtMs(ms) {
    if (!isNum(ms)) return "-";
    if (ms < 1) return (ms * 1000).toFixed(0) + " µs";
    if (ms < 10) return ms.toFixed(2) + " ms";
    return fmt(ms) + " ms";
  }

  function fmtPeriod(ms) {
    if (!isNum(ms)) return "?";
    const units = [[86400000, "d"], [3600000, "h"], [60000, "m"], [1000, "s"]];
    for (const [n, u] of units) if (ms >= n && ms % n === 0) return (ms / n) + u;
    return ms + "ms";
  }

  function fmtAgo(ms) {
    if (!isNum(ms)) return "-";
    if (ms < 1000) return "now";
    if (ms < 60000) return Math.round(ms / 1000) + " s ago";
    if (ms < 3600000) return Math.round(ms / 60000) + " min ago";
    return Math.round(ms / 3600000) + " h ago";
  }

  function policyText(p) {
    if (!p) return "";
    if (p.algorithm === "concurrency") return "concurrency " + fmt(p.concurrency) + ", hold " + fmtPeriod(p.hold_ms);
    let s = p.algorithm + " " + fmt(p.requests) + " per " + fmtPeriod(p.period_ms);
    if (isNum(p.burst)) s += ", burst " + fmt(p.burst);
    if (isNum(p.block_ms)) s += ", block " + fmtPeriod(p.block_ms);
    return s;
  }

  // Per second between two cumulative readings; null when there is no earlier one or it went down.
  function rate(cur, prev, dt) {
    if (!isNum(cur) || !isNum(prev) || dt <= 0 || cur < prev) return null;
    return (cur - prev) * 1000 / dt;
  }

  // ---- zones --------------------------------------------------------------------------------

  function sampleOf(z, now) {
    const r = z.requests || null;
    const s = { t: now, evictions: z.evictions, req: r };
    if (z.sync) Object.assign(s, { rounds: z.sync.rounds, keys_sent: z.sync.keys_sent, failures: z.sync.failures });
    return s;
  }

  function sum(r, names) {
    let n = 0;
    for (const k of names) { if (!isNum(r[k])) return null; n += r[k]; }
    return n;
  }

  // The zone's rates now (from the previous reading), and its history updated.
  function track(z, now) {
    let h = zones.get(z.name);
    if (!h) { h = { prev: null, points: [] }; zones.set(z.name, h); }
    if (h.prev && h.prev.t === now) return h;  // the same reading again
    const cur = sampleOf(z, now), prev = h.prev;
    const rates = {};
    if (prev && cur.req && prev.req) {
      const dt = cur.t - prev.t;
      const pick = (names) => rate(sum(cur.req, names), sum(prev.req, names), dt);
      rates.admitted = pick(["passed", "delayed"]);
      rates.rejected = pick(["rejected"]);
      rates.delayed = pick(["delayed"]);
      rates.blocked = pick(["blocked"]);
      rates.dry = pick(["rejected_dry_run", "blocked_dry_run"]);
      rates.errors = pick(["error_allowed", "error_denied", "error_local"]);
      rates.evictions = rate(cur.evictions, prev.evictions, dt);
      rates.rounds = rate(cur.rounds, prev.rounds, dt);
      rates.keys_sent = rate(cur.keys_sent, prev.keys_sent, dt);
      if (SERIES.every((k) => rates[k] !== null)) {
        const p = { t: now };
        for (const k of SERIES) p[k] = rates[k];
        h.points.push(p);
      } else {
        h.points = [];  // counters went back: nginx restarted
      }
    }
    while (h.points.length && h.points[0].t < now - HISTORY_MS) h.points.shift();
    h.prev = cur;
    h.rates = rates;
    return h;
  }

  function stat(label, value, cls) {
    const d = el("dl", "stat" + (cls ? " " + cls : ""));
    d.append(el("dt", null, label), el("dd", null, value));
    return d;
  }

  function chart(points, now) {
    const W = 300, H = 60, top = 4;
    const s = svg("svg", { class: "chart", viewBox: "0 0 " + W + " " + (H + 1), preserveAspectRatio: "none",
      role: "img", "aria-label": "requests per second, up to the last " + HISTORY_MS / 60000 + " minutes" });
    let max = 0;
    for (const p of points) for (const k of SERIES) max = Math.max(max, p[k]);
    const scale = max > 0 ? max : 1;
    s.append(svg("line", { class: "axis", x1: 0, y1: H, x2: W, y2: H }));
    // The whole width for what was collected, until it covers HISTORY_MS (at least 30 s).
    const span = points.length ? Math.min(HISTORY_MS, Math.max(30000, now - points[0].t)) : HISTORY_MS;
    const x = (t) => ((t - (now - span)) / span * W).toFixed(1);
    const y = (v) => (H - v / scale * (H - top)).toFixed(1);
    for (const k of SERIES) {
      if (points.length < 2) break;
      const line = svg("polyline", { class: "s-" + k, points: points.map((p) => x(p.t) + "," + y(p[k])).join(" ") });
      s.append(line);
    }
    return s;
  }

  function legend(points) {
    const d = el("div", "legend");
    if (points.length < 2) {
      d.append(el("span", null, "Rates of the last " + HISTORY_MS / 60000 + " minutes: collecting…"));
      return d;
    }
    let max = 0;
    for (const p of points) for (const k of SERIES) max = Math.max(max, p[k]);
    for (const k of SERIES) {
      const span = el("span");
      span.append(el("i", "k-" + k), document.createTextNode(k));
      d.append(span);
    }
    const span = Math.min(HISTORY_MS, Math.max(30000, points[points.length - 1].t - points[0].t));
    d.append(el("span", null, "top: " + fmt(max) + "/s, last " + (span >= 60000 ? Math.round(span / 60000) + " min" : "30 s")));
    return d;
  }

  function onReset(zone, item, button) {
    const what = item.key + (item.truncated ? "…" : "");
    if (!window.confirm("Reset key \"" + what + "\" in zone \"" + zone + "\"?\nIts limit starts afresh.")) return;
    button.disabled = true;
    getJSON("zones/" + encodeURIComponent(zone) + "?" + item.reset, { method: "DELETE" })
      .then(() => say("Key \"" + what + "\" of zone \"" + zone + "\" reset."))
      .catch((e) => say("Reset of \"" + what + "\" failed: " + e.message, "reset"))
      .finally(() => { longer.delete(zone); poll(); });
  }

  // A reset the server spelt for us (API.md): key=... or addr=..., one parameter.
  const RESET_RE = /^(key|addr)=[^&#]*$/;

  function topTable(z, items, now) {
    const t = el("table", "top");
    const head = el("tr");
    head.append(el("th", "key", "key"), el("th", "num", "rejected"), el("th", "num", "blocked"),
      el("th", "num seen", "last"));
    if (write) head.append(el("th", "num", ""));
    const thead = el("thead");
    thead.append(head);
    const body = el("tbody");
    for (const it of items) {
      const tr = el("tr");
      if (it.error > 0 && it.error * 2 >= it.rejected) tr.className = "uncertain";
      const key = el("td", "key", it.key);
      if (it.truncated) key.append(el("span", "cut", "…"));
      const rej = el("td", "num", fmt(it.rejected));
      if (it.error > 0) rej.append(el("span", "err", "± " + fmt(it.error)));
      tr.append(key, rej, el("td", "num", fmt(it.blocked)), el("td", "num seen", fmtAgo(now - it.last_seen)));
      if (write) {
        const cell = el("td", "num");
        if (typeof it.reset === "string" && RESET_RE.test(it.reset)) {
          const b = el("button", "reset", "reset");
          b.type = "button";
          b.setAttribute("aria-label", "reset key " + it.key + " in zone " + z.name);
          b.addEventListener("click", () => onReset(z.name, it, b));
          cell.append(b);
        }
        tr.append(cell);
      }
      body.append(tr);
    }
    t.append(thead, body);
    return t;
  }

  function topSection(z, now) {
    const box = el("div", "tops");
    box.append(el("h3", null, "Top keys (rejected, last 1-2 minutes)"));
    if (!isNum(z.top_k) || z.top_k === 0) {
      box.append(el("p", "note", isNum(z.top_k) ? "Off (top=0)." : "Not reported by this server."));
      return box;
    }
    const open = opened.has(z.name) && longer.has(z.name);
    const items = open ? longer.get(z.name).top || [] : z.top || [];
    if (items.length === 0) box.append(el("p", "note", "No key rejected lately."));
    else box.append(topTable(z, items, now));
    if (z.top_k > 3) {
      const b = el("button", "more", opened.has(z.name) ? "fewer keys" : "more keys");
      b.type = "button";
      b.addEventListener("click", () => {
        if (opened.has(z.name)) { opened.delete(z.name); longer.delete(z.name); render(); }
        else { opened.add(z.name); poll(); }
      });
      box.append(b);
    }
    return box;
  }

  function zoneCard(z, now) {
    const h = zones.get(z.name) || { points: [] }, r = h.rates || {};
    const card = el("article", "card zone");
    card.dataset.zone = z.name;
    const head = el("div", "card-head");
    head.append(el("h2", null, z.name), el("span", "badge store", z.store));
    if (z.redis) head.append(el("span", "badge", "redis " + z.redis));
    if (z.tiered) head.append(el("span", "badge", "tiered"));
    card.append(head);
    for (const p of z.policies || []) card.append(el("p", "policy", policyText(p)));

    const stats = el("div", "stats");
    const keys = stat("keys in use", fmt(z.keys) + " / " + fmt(z.capacity));
    if (isNum(z.keys) && isNum(z.capacity) && z.capacity > 0) {
      const m = el("div", "meter" + (z.keys >= z.capacity ? " full" : ""));
      const fill = el("span");
      fill.style.width = Math.min(100, z.keys / z.capacity * 100).toFixed(1) + "%";
      m.append(fill);
      keys.append(m);
    }
    stats.append(keys, stat("evictions", fmt(z.evictions) + (isNum(r.evictions) && r.evictions > 0 ? " (" + fmt(r.evictions) + "/s)" : "")));
    const inflight = (z.policies || []).find((p) => p.algorithm === "concurrency");
    if (isNum(z.in_flight) || inflight) {
      stats.append(stat("in flight", fmt(z.in_flight) + (inflight ? " / " + fmt(inflight.concurrency) : "")));
    }
    if (z.requests) {
      for (const k of SERIES) stats.append(stat(k + "/s", fmt(r[k]), k));
      if (r.dry > 0) stats.append(stat("dry run: would reject/s", fmt(r.dry)));
      if (r.errors > 0) stats.append(stat("Redis errors decided/s", fmt(r.errors), "rejected"));
    }
    if (isNum(z.settle_failures) && z.settle_failures > 0) stats.append(stat("settle failures", fmt(z.settle_failures)));
    card.append(stats);
    if (z.requests) {
      card.append(chart(h.points, now), legend(h.points));
    } else {
      card.append(el("p", "note", "Rates need the request counters (API.md: requests)."));
    }

    if (z.sync) {
      const s = z.sync;
      card.append(el("h3", null, "Sync (" + s.mode + ", every " + fmtPeriod(s.interval_ms) + ")"));
      const st = el("div", "stats");
      st.append(stat("rounds", fmt(s.rounds) + (isNum(r.rounds) ? " (" + fmt(r.rounds) + "/s)" : "")),
        stat("failures", fmt(s.failures)), stat("hosts", fmt(s.hosts)),
        stat("last round", s.last_round_ms_ago === null ? "never" : fmtAgo(s.last_round_ms_ago)));
      if (isNum(s.keys_sent)) st.append(stat("keys sent/s", fmt(r.keys_sent)));
      card.append(st);
      if (s.last_round_ms_ago === null || s.last_round_ms_ago > 3 * s.interval_ms) {
        card.append(el("p", "note warn", "No successful round lately: this host decides alone."));
      }
    }
    card.append(topSection(z, now));
    return card;
  }

  // ---- Redis --------------------------------------------------------------------------------

  // The smallest bucket bound holding 99% of the observations made since the previous reading.
  function p99(cur, prev) {
    if (!cur || !prev || !Array.isArray(cur.buckets) || !Array.isArray(prev.buckets)) return null;
    const n = cur.count - prev.count;
    if (!(n > 0)) return null;
    for (let i = 0; i < cur.buckets.length; i++) {
      const d = cur.buckets[i][1] - ((prev.buckets[i] || [0, 0])[1]);
      if (d >= 0.99 * n) return cur.buckets[i][0] * 1000;
    }
    return Infinity;
  }

  // Keeps the reading before this one of each ratelimit_redis, for its rates.
  function trackRedis(d, now) {
    const h = redisPrev.get(d.name);
    if (h && h.cur.t === now) return;
    redisPrev.set(d.name, { prev: h ? h.cur : null, cur: { t: now, d } });
  }

  function redisCard(d) {
    const h = redisPrev.get(d.name) || {};
    const prev = h.prev || null;
    const dt = prev ? h.cur.t - prev.t : 0;
    const p = prev ? prev.d : null;
    const card = el("article", "card redis");
    card.dataset.redis = d.name;
    const head = el("div", "card-head");
    head.append(el("h2", null, "Redis " + d.name));
    card.append(head);
    const st = el("div", "stats");
    const calls = p ? rate(d.calls, p.calls, dt) : null, checks = p ? rate(d.checks, p.checks, dt) : null;
    st.append(stat("calls/s", fmt(calls)), stat("checks/s", fmt(checks)),
      stat("checks per call", calls > 0 ? (checks / calls).toFixed(1) : "-"), stat("in flight", fmt(d.in_flight)));
    const rt = d.round_trip || {}, prt = p ? p.round_trip || {} : {};
    const n = rt.count - prt.count;
    st.append(stat("round trip (mean)", n > 0 ? fmtMs((rt.sum_s - prt.sum_s) / n * 1000) : "-"));
    const q = p99(rt, p ? prt : null);
    st.append(stat("round trip p99", q === null ? "-" : q === Infinity ? "> 1 s" : "≤ " + fmtMs(q)));
    st.append(stat("reconnects", fmt(d.reconnects)));
    if (d.redirects) st.append(stat("redirects", fmt(d.redirects.moved) + " moved, " + fmt(d.redirects.ask) + " ask"));
    card.append(st);
    const errs = el("div", "stats");
    let any = false;
    for (const [reason, count] of Object.entries(d.errors || {})) {
      if (!(count > 0)) continue;
      any = true;
      const pr = p && p.errors ? rate(count, p.errors[reason], dt) : null;
      errs.append(stat(reason, fmt(count) + (pr ? " (" + fmt(pr) + "/s)" : ""), pr ? "rejected" : ""));
    }
    card.append(el("h3", null, "Errors"));
    card.append(any ? errs : el("p", "note", "None."));
    return card;
  }

  // ---- the page -----------------------------------------------------------------------------

  // The banner: what just happened, or why the API cannot be read (kind "api", cleared by the next poll).
  function say(text, kind) {
    const b = $("banner");
    b.textContent = text;
    b.hidden = !text;
    b.dataset.kind = kind || "";
  }

  function render() {
    if (!last) return;
    const now = isNum(last.now_ms) ? last.now_ms : Date.now();
    const filter = $("filter").value.trim().toLowerCase();
    const list = (last.zones || []).filter((z) => !filter || String(z.name).toLowerCase().includes(filter));
    const zf = document.createDocumentFragment();
    for (const z of list) zf.append(zoneCard(z, now));
    $("zones").replaceChildren(zf);
    const rf = document.createDocumentFragment();
    for (const d of last.redis || []) rf.append(redisCard(d));
    $("redis").replaceChildren(rf);
    $("mode").textContent = write ? "write=on: keys can be reset" : "read only";
  }

  async function poll() {
    clearTimeout(timer);
    const started = Date.now();
    try {
      const data = await getJSON("zones");
      write = data.write === true;
      const names = new Set((data.zones || []).map((z) => z.name));
      await Promise.all([...opened].filter((n) => names.has(n)).map((n) =>
        getJSON("zones/" + encodeURIComponent(n) + "/top?n=" + MORE)
          .then((t) => longer.set(n, t))
          .catch(() => longer.delete(n))));
      const now = isNum(data.now_ms) ? data.now_ms : Date.now();
      for (const z of data.zones || []) track(z, now);
      for (const d of data.redis || []) trackRedis(d, now);
      last = data;
      render();
      const zs = data.zones || [];
      $("status").textContent = "Updated " + new Date(isNum(data.now_ms) ? data.now_ms : Date.now()).toLocaleTimeString() +
        " · " + zs.length + (zs.length === 1 ? " zone" : " zones") + " · every " + POLL_MS / 1000 + " s · " +
        (Date.now() - started) + " ms";
      if ($("banner").dataset.kind === "api") say("");
    } catch (e) {
      say("Cannot read the API: " + e.message, "api");
    }
    timer = setTimeout(poll, POLL_MS);
  }

  $("filter").addEventListener("input", render);
  poll();
})();
