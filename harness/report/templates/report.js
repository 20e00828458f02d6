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
