(function () {
  "use strict";
  var table = document.getElementById("cases");
  if (!table) { return; }
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var selects = Array.prototype.slice.call(document.querySelectorAll("select[data-filter]"));
  var text = document.getElementById("filter-text");
  var shown = document.getElementById("shown");

  function apply() {
    var query = text ? text.value.toLowerCase() : "";
    var n = 0;
    rows.forEach(function (row) {
      var ok = selects.every(function (s) {
        return !s.value || row.getAttribute("data-" + s.getAttribute("data-filter")) === s.value;
      }) && (!query || row.getAttribute("data-name").toLowerCase().indexOf(query) >= 0);
      row.hidden = !ok;
      var detail = document.getElementById(row.getAttribute("data-target"));
      if (detail) { detail.hidden = !ok; }
      if (ok) { n += 1; }
    });
    if (shown) { shown.textContent = n + " of " + rows.length + " shown"; }
  }

  function key(row, col, numeric) {
    var cell = row.cells[col];
    var v = cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent.trim();
    if (!numeric) { return v; }
    var x = parseFloat(v);
    return isNaN(x) ? -Infinity : x;
  }

  heads.forEach(function (th, col) {
    th.addEventListener("click", function () {
      var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
      var numeric = th.getAttribute("data-type") === "number";
      rows.sort(function (a, b) {
        var x = key(a, col, numeric), y = key(b, col, numeric);
        if (numeric) { return dir * (x === y ? 0 : (x < y ? -1 : 1)); }
        return dir * String(x).localeCompare(String(y));
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });

  // A run page's case sections are drawn from its JSON block when first opened.
  var dataBlock = document.getElementById("case-data");
  var data = dataBlock ? JSON.parse(dataBlock.textContent) : null;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = text; }
    return e;
  }

  function str(i) { return i === null || i === undefined ? "" : data.strings[i]; }

  // A long or multi-line text as its first line, the whole one click away.
  function brief(text) {
    var lines = text.split("\n").filter(function (l) { return l.trim(); });
    if (lines.length <= 1 && text.length <= 120) { return document.createTextNode(text); }
    var d = el("details", "brief");
    var first = lines.length ? lines[0].trim() : "";
    d.appendChild(el("summary", null, first.slice(0, 120) + " \u2026"));
    d.appendChild(el("pre", null, text));
    return d;
  }

  function makeTable(cls, heads, rows, cell) {
    var t = el("table", cls);
    var tr = t.createTHead().insertRow();
    heads.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    var tb = t.createTBody();
    rows.forEach(function (row) {
      var r = tb.insertRow();
      row.forEach(function (v, j) {
        var td = r.insertCell();
        var made = cell ? cell(td, v, j, row) : false;
        if (!made) { td.textContent = str(v); }
      });
    });
    return t;
  }

  function folded(title, content) {
    var d = el("details");
    d.appendChild(el("summary", null, title));
    d.appendChild(content);
    return d;
  }

  function errorCell(td, e) {
    var type = str(e[0]), message = str(e[1]), tb = str(e[3]);
    var lines = message.split("\n").filter(function (l) { return l.trim(); });
    var first = lines.length ? lines[0].trim() : "";
    td.appendChild(el("b", null, type));
    td.appendChild(document.createTextNode(": " + (first.length > 120 ? first.slice(0, 120) + " \u2026" : first)));
    var more = el("details", "error");
    more.appendChild(el("summary", null, "message, signature" + (tb ? ", stack" : "") + (e[4].length ? ", worker log" : "")));
    more.appendChild(el("pre", null, message));
    var sig = el("p", "meta", "signature ");
    sig.appendChild(el("code", null, str(e[2])));
    more.appendChild(sig);
    if (tb) { more.appendChild(folded("stack", el("pre", null, tb))); }
    e[4].forEach(function (log) {
      more.appendChild(folded("worker log " + str(log[0]) + " (last " + str(log[1]).length + " characters)", el("pre", null, str(log[1]))));
    });
    td.appendChild(more);
  }

  function drawCase(details) {
    var d = data.cases[parseInt(details.getAttribute("data-case"), 10)];
    var meta = d.meta.map(str);
    var p = el("p", "meta", "source ");
    p.appendChild(el("code", null, meta[0]));
    p.appendChild(document.createTextNode(" \u00b7 seed " + meta[1] + " \u00b7 repeats " + meta[2]));
    if (meta[3]) {
      p.appendChild(document.createTextNode(" \u00b7 reference "));
      p.appendChild(el("code", null, meta[3]));
    }
    var out = [p];
    if (d.reason !== undefined) { out.push(el("p", "why reason", str(d.reason))); }
    (d.contention || []).forEach(function (k) { out.push(el("p", "why reason", str(k[0]) + ": " + str(k[1]))); });
    var tpl = details.querySelector("template");
    if (tpl) { out.push(tpl.content.cloneNode(true)); }
    if (d.checks.length) {
      out.push(makeTable("checks", ["check", "obtained", "required", "policy", "result", "settings, reason"], d.checks.map(function (k) {
        return [k[0], k[1], k[2], k[3], k[4], [k[5], k[6]]];
      }), function (td, v, j) {
        if (j === 4) { td.className = "s-" + str(v); return false; }
        if (j !== 5) { return false; }
        if (str(v[0])) { var r = el("span", "reason"); r.appendChild(brief(str(v[0]))); td.appendChild(r); td.appendChild(document.createTextNode(" ")); }
        td.appendChild(document.createTextNode(str(v[1])));
        return true;
      }));
    } else { out.push(el("p", "meta", "no checks")); }
    if (d.attempts) {
      out.push(makeTable("attempts", ["#", "run", "status", "seconds", "seed", "worker", "started", "error"], d.attempts, function (td, v, j) {
        if (j === 2) { td.className = "s-" + str(v); return false; }
        if (j === 7) { if (v) { errorCell(td, v); } return true; }
        return false;
      }));
    }
    (d.hangs || []).forEach(function (h) {
      var box = el("div", "hang");
      box.appendChild(makeTable("hang", ["pid", "rank", "CPU %", "log growing", "last log line", "stuck in", "stacks"], h[2].map(function (p) {
        return [p[0], p[1], p[2], p[3], p[4], p[5], [p[6], p[7], p[8]]];
      }), function (td, v, j) {
        if (j !== 6) { return false; }
        var title = str(v[0]) + (str(v[2]) ? " (" + str(v[2]) + ")" : "");
        td.appendChild(folded(title, el("pre", null, str(v[1]) || "(no stack)")));
        return true;
      }));
      box.appendChild(el("pre", "device", str(h[1])));
      var fold = folded(str(h[0]), box);
      fold.open = true;
      out.push(fold);
    });
    if (d.ranks) {
      var ranksFold = folded(str(d.ranks[0]), makeTable("ranks", d.ranks[1].map(str), d.ranks[2]));
      ranksFold.open = true;
      out.push(ranksFold);
    }
    if (d.layers) {
      var layersFold = folded(str(d.layers[0]), makeTable("layers", ["layer", "kind", "status", "metric", "value", "tolerance", "detail"], d.layers[1], function (td, v, j) {
        if (j === 2) { td.className = "s-" + str(v).split(" ")[0]; }
        return false;
      }));
      layersFold.open = true;
      out.push(layersFold);
    }
    if (d.stages) {
      var heads = ["stage"].concat(d.attempts.map(function (a) { return "#" + str(a[0]); }));
      out.push(folded("stage latencies (" + d.stages.length + " stages)", makeTable("stages", heads, d.stages)));
    }
    if (d.inputs) {
      out.push(folded("inputs (" + d.inputs.length + ")", makeTable("kv", ["input", "hash", "same in every measured attempt"], d.inputs)));
    }
    if (d.fps) {
      out.push(folded("fingerprints (" + d.fps.length + "; hashes: the first 12 digits)", makeTable("fps", ["tensor", "hash", "dtype, shape", "non-finite", "min", "max", "mean", "same in passing attempts"], d.fps)));
    }
    if (d.notes) {
      out.push(folded("notes (" + d.notes.length + ")", makeTable("kv", ["note", "value"], d.notes)));
    }
    var body = el("div", "detail");
    out.forEach(function (n) { body.appendChild(n); });
    details.appendChild(body);
  }

  function draw(details) {
    if (data && details.open && details.hasAttribute("data-case") && !details.hasAttribute("data-drawn")) {
      details.setAttribute("data-drawn", "");
      drawCase(details);
    }
  }

  function openTarget() {
    var target = location.hash ? document.getElementById(location.hash.slice(1)) : null;
    var details = target && target.querySelector("details[data-case]");
    if (details && !details.open) { details.open = true; draw(details); }
  }

  if (data) {
    document.addEventListener("toggle", function (ev) { draw(ev.target); }, true);
    Array.prototype.forEach.call(document.querySelectorAll("details[data-case][open]"), draw);
    window.addEventListener("hashchange", openTarget);
    openTarget();
  }

  selects.forEach(function (s) { s.addEventListener("change", apply); });
  if (text) { text.addEventListener("input", apply); }
  Array.prototype.forEach.call(document.querySelectorAll("[data-set-filter]"), function (el) {
    el.addEventListener("click", function () {
      var parts = el.getAttribute("data-set-filter").split("=");
      selects.forEach(function (s) {
        if (s.getAttribute("data-filter") === parts[0]) { s.value = s.value === parts[1] ? "" : parts[1]; }
      });
      apply();
    });
  });
  apply();
}());
