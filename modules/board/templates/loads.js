(function () {
  "use strict";
  var root = document.getElementById("board");
  var list = document.getElementById("loads");
  var status = document.getElementById("feed-status");
  var csrf = document.querySelector('meta[name="csrf-token"]').content;
  var pollMs = parseInt(root.dataset.pollMs, 10) || 250;
  var v2 = root.dataset.layout === "v2";
  var after = 0, rows = {};

  function cell(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function place(p) { return p.city + ", " + p.state; }
  function money(n) { return "$" + n.toLocaleString("en-US"); }
  function when(s) { return new Date(s).toLocaleString(); }

  function render(l) {
    var btn = cell("button", v2 ? "reserve-btn" : "book-btn", v2 ? "Reserve" : "Book");
    btn.type = "button";
    var res = cell("span", "result");
    btn.addEventListener("click", function () { book(l.id, btn, res); });
    var el;
    if (v2) {
      el = cell("div", "lane-card");
      el.appendChild(cell("div", "lane", place(l.origin) + " → " + place(l.destination)));
      el.appendChild(cell("div", "meta", l.equipment + " · " + l.weight_lb + " lb · " + money(l.rate_usd) + " · ref " + l.id));
      el.appendChild(btn); el.appendChild(res);
    } else {
      el = cell("tr", "load-row");
      [l.id, place(l.origin), place(l.destination), l.equipment, l.weight_lb + " lb", money(l.rate_usd), when(l.pickup_start)]
        .forEach(function (t) { el.appendChild(cell("td", "", t)); });
      var td = cell("td"); td.appendChild(btn); td.appendChild(res); el.appendChild(td);
    }
    el.dataset.loadId = l.id;
    el.dataset.expires = l.expires_at;
    rows[l.id] = el;
    list.insertBefore(el, list.firstChild);
  }

  function prune() {
    var now = Date.now();
    Object.keys(rows).forEach(function (id) {
      if (Date.parse(rows[id].dataset.expires) <= now) { rows[id].remove(); delete rows[id]; }
    });
  }

  function tick() {
    fetch("/api/loads?after=" + after, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) {
        if (r.status === 401) { location.href = "/login"; throw new Error("signed out"); }
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (d) {
        after = d.next_after;
        d.loads.forEach(function (l) { if (!rows[l.id]) render(l); });
        prune();
        status.textContent = "live · " + Object.keys(rows).length + " loads";
      })
      .catch(function (e) { status.textContent = "retrying (" + e.message + ")"; })
      .then(function () { setTimeout(tick, pollMs); });
  }

  function book(id, btn, res) {
    btn.disabled = true;
    res.textContent = " booking…";
    fetch("/api/book", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf, "Accept": "application/json" },
      body: JSON.stringify({ load_id: id })
    }).then(function (r) {
      return r.json().catch(function () { return { status: "error" }; }).then(function (d) { return [r, d]; });
    }).then(function (rd) {
      var d = rd[1];
      if (rd[0].status === 401) { location.href = "/login"; return; }
      if (d.status === "confirmed") { res.textContent = " Booked #" + d.booking.id; res.className = "result booked"; return; }
      if (d.status === "captcha") {
        document.getElementById("overlay-text").textContent = "Load " + id + " needs a quick human check before booking.";
        document.getElementById("overlay-link").href = d.challenge_url;
        document.getElementById("overlay").style.display = "flex";
      }
      res.textContent = " " + (d.status === "taken" ? "Taken" : d.status);
      res.className = "result " + d.status;
      btn.disabled = false;
    }).catch(function () {
      res.textContent = " Request failed";
      res.className = "result failed";
      btn.disabled = false;
    });
  }

  tick();
})();
