/* rmqtool report: draws the charts of the page from its embedded data (the document of
   rmqtool report --format json), as SVG markup of its own; no library, nothing fetched.
   When every chart is drawn the <html> element gets data-rendered="ok" (the tests wait for
   it); an error anywhere leaves data-rendered="error" and data-errors with its text. */
(function () {
  "use strict";
  var root = document.documentElement;
  var PALETTE = ["#3367d6", "#e8710a", "#1b9e77", "#d81b60", "#7b5bd6", "#8c6d1f", "#00838f", "#c0392b",
    "#5b8c00", "#6d4c41"];
  var OTHER = "#b8c0c8";

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function num(n) {
    return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }
  function bytes(b) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(b < 10 ? 2 : 1) : String(b)) + " " + u[i];
  }
  function utc(ms, span) {
    var s = new Date(ms).toISOString();
    if (span < 120000) return s.slice(11, 23);           // hh:mm:ss.mmm
    if (span < 86400000) return s.slice(11, 19);         // hh:mm:ss
    return s.slice(0, 10) + " " + s.slice(11, 16);       // date hh:mm
  }
  function nice(max) {
    // the smallest round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten) >= max
    if (max <= 0) return 1;
    var p = Math.pow(10, Math.floor(Math.log(max) / Math.LN10)), m = max / p;
    var steps = [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10];
    for (var i = 0; i < steps.length; i++) if (m <= steps[i] + 1e-9) return Math.max(1, Math.ceil(steps[i] * p));
    return 10 * p;
  }
  function svg(w, h, body) {
    return '<svg viewBox="0 0 ' + w + " " + h + '" width="' + w + '" height="' + h + '" role="img">' + body + "</svg>";
  }
  function rect(x, y, w, h, fill, title, extra) {
    return '<rect x="' + x.toFixed(1) + '" y="' + y.toFixed(1) + '" width="' + Math.max(w, 0).toFixed(1) +
      '" height="' + Math.max(h, 0).toFixed(1) + '" fill="' + fill + '"' + (extra || "") + ">" +
      (title ? "<title>" + esc(title) + "</title>" : "") + "</rect>";
  }
  function text(x, y, s, anchor, cls) {
    return '<text x="' + x.toFixed(1) + '" y="' + y.toFixed(1) + '"' + (anchor ? ' text-anchor="' + anchor + '"' : "") +
      (cls ? ' class="' + cls + '"' : "") + ">" + esc(s) + "</text>";
  }
  function line(x1, y1, x2, y2, stroke, cls) {
    return '<line x1="' + x1.toFixed(1) + '" y1="' + y1.toFixed(1) + '" x2="' + x2.toFixed(1) + '" y2="' + y2.toFixed(1) +
      '" stroke="' + stroke + '"' + (cls ? ' class="' + cls + '"' : "") + "/>";
  }

  /* ------------------------------------------------------------ timeline: messages per topic */
  function drawTimeline(el, s, chosen) {
    var tl = s.timeline, topics = s.topics;
    if (!tl || tl.start_timestamp === null || !tl.buckets) {
      el.innerHTML = '<p class="note">No message the consume queues point at has a store time: nothing to draw.</p>';
      return;
    }
    var W = 960, L = 64, R = 12, T = 8, lane = 30, H = 230, B = 34;
    var n = tl.buckets, bw = (W - L - R) / n, t0 = tl.start_timestamp, span = n * tl.bucket_ms;
    var x = function (ms) { return L + (ms - t0) / span * (W - L - R); };
    var shown = topics.filter(function (t) { return chosen[t.topic]; });
    var totals = new Array(n), other = new Array(n), i, j, b;
    for (i = 0; i < n; i++) { totals[i] = 0; other[i] = 0; }
    topics.forEach(function (t) {
      for (j = 0; j < t.buckets.length; j++) {
        b = t.buckets[j];
        totals[b] += t.counts[j];
        if (!chosen[t.topic]) other[b] += t.counts[j];
      }
    });
    var top = 4 * nice(Math.max.apply(null, totals.concat([1])) / 4);  // (four round steps)
    var y0 = T + lane + H, yk = H / top;
    var out = [];
    // the commitlog files: when the messages each holds were stored
    s.commitlog.files.forEach(function (f, k) {
      if (f.first_store_timestamp === null) return;
      var a = x(f.first_store_timestamp), z = x(f.last_store_timestamp + 1);
      out.push(rect(a, T + 4, Math.max(z - a, 2), lane - 12, k % 2 ? "#9aa7b4" : "#c3ccd5",
        f.file + ": " + num(f.messages) + " messages, " + f.first_store_time + " to " + f.last_store_time));
    });
    out.push(text(L - 6, T + 16, "files", "end", "axis"));
    // the grid and the count axis
    for (i = 0; i <= 4; i++) {
      var yy = y0 - H * i / 4;
      out.push(line(L, yy, W - R, yy, "#eceff2", "grid"));
      out.push('<g class="axis">' + text(L - 6, yy + 4, num(Math.round(top * i / 4)), "end") + "</g>");
    }
    // stacked bars: the chosen topics, then the others
    for (i = 0; i < n; i++) {
      var acc = 0, bx = L + i * bw, when = utc(t0 + i * tl.bucket_ms, span);
      for (j = 0; j < shown.length; j++) {
        var c = shown[j], v = 0, at = c.buckets.indexOf(i);
        if (at >= 0) v = c.counts[at];
        if (!v) continue;
        out.push(rect(bx, y0 - (acc + v) * yk, Math.max(bw - 1, 1), v * yk, chosen[c.topic],
          c.topic + ": " + num(v) + " messages at " + when));
        acc += v;
      }
      if (other[i]) {
        out.push(rect(bx, y0 - (acc + other[i]) * yk, Math.max(bw - 1, 1), other[i] * yk, OTHER,
          "other topics: " + num(other[i]) + " messages at " + when));
      }
    }
    // the time axis
    out.push(line(L, y0, W - R, y0, "#8a949e"));
    var ticks = 6;
    for (i = 0; i <= ticks; i++) {
      var ms = t0 + span * i / ticks;
      out.push(line(x(ms), y0, x(ms), y0 + 4, "#8a949e"));
      out.push('<g class="axis">' + text(x(ms), y0 + 17, utc(ms, span), i === 0 ? "start" : i === ticks ? "end" : "middle") + "</g>");
    }
    out.push('<g class="axis">' + text(W - R, y0 + 31, "UTC; one bar = " + bucketName(tl.bucket_ms), "end") + "</g>");
    el.innerHTML = svg(W, T + lane + H + B, out.join(""));
  }
  function bucketName(ms) {
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return ms / 1000 + " s";
    if (ms < 3600000) return ms / 60000 + " min";
    if (ms < 86400000) return ms / 3600000 + " h";
    return ms / 86400000 + " d";
  }
  function timeline(el, s) {
    var legend = document.getElementById(el.id + "-legend");
    var chosen = {}, k = 0;
    s.topics.forEach(function (t) { if (t.messages && k < 8) { chosen[t.topic] = PALETTE[k++ % PALETTE.length]; } });
    function legendHtml() {
      var h = [], used = 0;
      s.topics.slice(0, 20).forEach(function (t) {
        if (!t.messages) return;
        h.push('<label><input type="checkbox" data-topic="' + esc(t.topic) + '"' + (chosen[t.topic] ? " checked" : "") + ">" +
          '<span class="sw" style="background:' + (chosen[t.topic] || OTHER) + '"></span>' + esc(t.topic) +
          " (" + num(t.messages) + ")</label>");
        used++;
      });
      var rest = s.topics.filter(function (t, i) { return i >= 20 && t.messages; });
      if (rest.length) {
        h.push('<label>more: <select data-more="1"><option value="">' + num(rest.length) + " other topics</option>" +
          rest.slice(0, 2000).map(function (t) {
            return '<option value="' + esc(t.topic) + '">' + esc(t.topic) + " (" + num(t.messages) + ")</option>";
          }).join("") + "</select></label>");
      }
      h.push('<label><span class="sw" style="background:' + OTHER + '"></span>other topics</label>');
      return h.join("");
    }
    function redraw() {
      drawTimeline(el, s, chosen);
      if (legend) legend.innerHTML = legendHtml();
    }
    if (legend) {
      legend.addEventListener("change", function (e) {
        var t = e.target, name = t.getAttribute("data-topic") || t.value;
        if (!name) return;
        if (t.getAttribute("data-more")) { if (!chosen[name]) chosen[name] = PALETTE[Object.keys(chosen).length % PALETTE.length]; }
        else if (t.checked) chosen[name] = PALETTE[Object.keys(chosen).length % PALETTE.length];
        else delete chosen[name];
        redraw();
      });
    }
    redraw();
  }

  /* ----------------------------------------------------- damage: where it lies in the commitlog */
  function damage(el, s) {
    var cl = s.commitlog, lo = cl.min_offset, hi = cl.end_offset;
    if (lo === null || hi <= lo) { el.innerHTML = '<p class="note">No commitlog file: nothing to draw.</p>'; return; }
    var W = 960, L = 170, R = 12, T = 6, row = 26, out = [], rows = [];
    var x = function (o) { return L + (Math.min(Math.max(o, lo), hi) - lo) / (hi - lo) * (W - L - R); };
    function band(y, a, z, fill, title) { out.push(rect(x(a), y + 4, Math.max(x(z) - x(a), 2), row - 10, fill, title)); }
    function label(y, s2) { out.push(text(L - 8, y + row / 2 + 4, s2, "end")); }
    var y = T;
    // the files
    label(y, "commitlog files");
    cl.files.forEach(function (f, k) {
      out.push(rect(x(f.base), y + 4, Math.max(x(f.base + f.size) - x(f.base), 1), row - 10, k % 2 ? "#9aa7b4" : "#c3ccd5",
        f.file + " [" + num(f.base) + ", " + num(f.base + f.size) + "): " + bytes(f.size) + ", " + num(f.messages) + " messages"));
    });
    y += row;
    // the findings that name an offset
    label(y, "findings");
    s.findings.forEach(function (f) {
      if (f.physical_offset === null || f.physical_offset === undefined) return;
      var fill = f.severity === "error" ? "#b3261e" : f.severity === "warning" ? "#e8a100" : "#8a949e";
      out.push(rect(x(f.physical_offset) - 1, y + 2, 3, row - 6, fill, f.code + " at " + num(f.physical_offset) + ": " + f.message));
    });
    y += row;
    // what recovery would do
    var rec = s.recovery, look = s.verify.outlook;
    label(y, "next start cuts");
    if (rec && rec.bytes_cut > 0) {
      band(y, rec.end_offset, hi, "#b3261e", "the next start (" + rec.mode + " recovery) cuts from " + num(rec.end_offset) + ": " +
        bytes(rec.bytes_cut) + ", " + num(rec.messages_cut) + " messages (" + num(rec.intact_cut) + " intact)");
    }
    y += row;
    if (look && look.abnormal) {
      label(y, "a crash would cut");
      var ab = look.abnormal;
      if (ab.records_cut > 0 && ab.stop_offset !== null) {
        band(y, ab.stop_offset, hi, "#e57368", "after a crash the abnormal recovery stops at " + num(ab.stop_offset) +
          " and cuts " + num(ab.records_cut) + " records");
      }
      y += row;
    }
    // what repair would do
    label(y, "repair fills");
    s.repair.regions.forEach(function (r) {
      band(y, r.from, r.to, "#e8710a", r.kind + " region [" + num(r.from) + ", " + num(r.to) + "): " + bytes(r.bytes) +
        " filled; " + num(r.quarantine_records) + " quarantine record(s), " + num(r.tombstones) + " tombstone(s)");
    });
    y += row;
    // not yet dispatched
    label(y, "not in the queues yet");
    var cq = cl.max_phy_offset_of_cq, upto = rec ? rec.end_offset : hi;
    if (cq !== null && s.answers.undispatched && upto > cq) {
      band(y, cq, upto, "#3367d6", num(s.answers.undispatched) + " messages after the consume queues' end (" + num(cq) +
        "): the next start dispatches them");
    }
    y += row;
    // the offset axis
    out.push(line(L, y + 2, W - R, y + 2, "#8a949e"));
    for (var i = 0; i <= 5; i++) {
      var o = lo + (hi - lo) * i / 5;
      out.push('<g class="axis">' + text(x(o), y + 16, bytes(Math.round(o)), i === 0 ? "start" : i === 5 ? "end" : "middle") + "</g>");
    }
    rows.push(y);
    el.innerHTML = svg(W, y + 24, out.join(""));
  }

  /* ------------------------------------------------------------ consumer lag per group */
  function lag(el, s) {
    var gs = s.consumer_groups.slice().sort(function (a, b) { return b.lag - a.lag; }).slice(0, 25);
    if (!gs.length) { el.innerHTML = '<p class="note">No committed consumer offsets in config/.</p>'; return; }
    var W = 960, L = 230, R = 110, row = 20, T = 4, out = [];
    var max = Math.max.apply(null, gs.map(function (g) { return g.lag; }).concat([1]));
    gs.forEach(function (g, k) {
      var y = T + k * row, w = (W - L - R) * g.lag / max;
      var bad = g.ahead || g.behind || g.missing;
      var name = g.group === null ? "(schedule progress)" : g.group;
      out.push(text(L - 8, y + 14, name.length > 34 ? name.slice(0, 33) + "…" : name, "end"));
      out.push(rect(L, y + 3, Math.max(w, g.lag ? 2 : 0), row - 6, bad ? "#b3261e" : "#3367d6",
        name + ": " + num(g.lag) + " messages not consumed over " + num(g.offsets) + " offsets; " + g.status +
        (g.ahead ? "; " + g.ahead + " ahead of their queue's end" : "") + (g.behind ? "; " + g.behind + " behind its start" : "")));
      out.push(text(L + Math.max(w, 0) + 6, y + 14, num(g.lag) + (bad ? " (" + g.status + ")" : "")));
    });
    el.innerHTML = svg(W, T + gs.length * row + 6, out.join(""));
  }

  /* ----------------------------------------------------------------- sortable tables */
  function sortable(table) {
    var heads = table.querySelectorAll("th");
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var dir = th.getAttribute("data-dir") === "asc" ? -1 : 1;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("data-dir"); });
        th.setAttribute("data-dir", dir === 1 ? "asc" : "desc");
        rows.sort(function (a, b) {
          var p = a.cells[col].getAttribute("data-v") || a.cells[col].textContent;
          var q = b.cells[col].getAttribute("data-v") || b.cells[col].textContent;
          var np = parseFloat(p), nq = parseFloat(q);
          if (!isNaN(np) && !isNaN(nq)) return (np - nq) * dir;
          return p < q ? -dir : p > q ? dir : 0;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  try {
    var data = JSON.parse(document.getElementById("rmq-data").textContent);
    data.stores.forEach(function (s, i) {
      if (s.refused) return;
      timeline(document.getElementById("timeline-" + i), s);
      damage(document.getElementById("damage-" + i), s);
      lag(document.getElementById("lag-" + i), s);
    });
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), sortable);
    var errs = window.__rmqErrors || [];
    root.setAttribute("data-rendered", errs.length ? "error" : "ok");
  } catch (e) {
    (window.__rmqNote || function () {})(e && e.stack ? e.stack : String(e));
    root.setAttribute("data-rendered", "error");
  }
})();
