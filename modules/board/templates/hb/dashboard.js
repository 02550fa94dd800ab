(function () {
  "use strict";
  var list = document.getElementById("freight");
  var state = document.getElementById("feed-state");
  var csrf = document.querySelector('meta[name="csrf-token"]').content;
  var pollMs = parseInt(list.dataset.pollMs, 10) || 250;
  var v2 = list.dataset.layout === "v2";
  var next = "/api/v2/loads?page%5Bafter%5D=0&page%5Bsize%5D=100";

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  // Booking is a plain form POST: the board answers with a page.
  function bookForm(id) {
    var f = el("form", "book-form");
    f.method = "post";
    f.action = "/loads/" + encodeURIComponent(id) + "/book";
    var t = el("input"); t.type = "hidden"; t.name = "authenticity_token"; t.value = csrf; f.appendChild(t);
    var b = el("button", v2 ? "take-btn btn" : "book-it btn", v2 ? "Take load" : "Book it");
    b.type = "submit"; f.appendChild(b);
    return f;
  }
  function render(r) {
    var a = r.attributes, item;
    if (v2) {
      item = el("li", "offer");
      item.appendChild(el("h3", "lane", a.origin + " to " + a.destination));
      item.appendChild(el("p", "facts", a.equipment_type + ", " + a.weight_lbs + " lbs, " + a.distance_mi + " mi at $" + a.rate_per_mile + "/mi, ref " + a.reference));
      item.appendChild(bookForm(r.id));
    } else {
      item = el("tr", "freight-row");
      [a.reference, a.origin + " – " + a.destination, a.equipment_type, a.weight_lbs + " lbs", a.distance_mi, "$" + a.rate_per_mile,
        a.pickup.opens + " " + a.pickup.tz].forEach(function (v) { item.appendChild(el("td", "", v)); });
      var td = el("td"); td.appendChild(bookForm(r.id)); item.appendChild(td);
    }
    item.dataset.load = r.id;
    list.appendChild(item);
  }
  function poll() {
    fetch(next, { credentials: "same-origin", headers: { Accept: "application/vnd.api+json" } })
      .then(function (res) { return res.json(); })
      .then(function (doc) {
        if (doc.errors) { window.location = "/signin"; return; }
        doc.data.forEach(render);
        next = doc.links.next;
        state.textContent = "Updated " + doc.meta.server_time;
      })
      .catch(function () { state.textContent = "Reconnecting…"; })
      .then(function () { setTimeout(poll, pollMs); });
  }
  poll();
})();
