package catalog

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
)

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func page(w http.ResponseWriter, title, body string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>%s</title></head>\n<body>\n%s\n</body></html>\n", html.EscapeString(title), body)
}

func (s *Server) home(w http.ResponseWriter, h *host) {
	page(w, "Sandbox catalogue "+h.name, `<h1>Sandbox catalogue</h1>
<ul><li><a href="/catalog?page=1">Products</a></li><li><a href="/js/catalog?page=1">Products (JavaScript)</a></li><li><a href="/api/items">JSON API</a></li><li><a href="/private/staff">Staff</a></li></ul>`)
}

// pageNum reads ?page=, 1-based.
func pageNum(r *http.Request) (int, bool) {
	v := r.URL.Query().Get("page")
	if v == "" {
		return 1, true
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 1
}

func (s *Server) listing(w http.ResponseWriter, r *http.Request, h *host, js bool) {
	p, ok := pageNum(r)
	if !ok {
		http.Error(w, "page must be a number from 1", http.StatusBadRequest)
		return
	}
	layout, n := s.snapshot()
	pages := max((n+s.cfg.PerPage-1)/s.cfg.PerPage, 1)
	if p > pages {
		http.NotFound(w, r)
		return
	}
	var items []Item
	for i := (p-1)*s.cfg.PerPage + 1; i <= min(p*s.cfg.PerPage, n); i++ {
		items = append(items, s.itemAt(h, i))
	}
	base := "/catalog"
	if js {
		base = "/js/catalog"
	}
	next := fmt.Sprintf("%s?page=%d", base, p+1)
	nextText := "Next"
	if p == pages {
		// The last page's "next" leads into robots-disallowed space: a
		// crawler that ignores robots.txt walks into it.
		next, nextText = "/private/archive?page=1", "Archive"
	}
	if js {
		s.jsListing(w, h, layout, items, next, nextText, p)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<h1>Products, page %d of %d</h1>\n", p, pages)
	if layout == 1 {
		b.WriteString("<ul class=\"products\">\n")
		for _, it := range items {
			fmt.Fprintf(&b, "<li class=\"product\"><a class=\"title\" href=\"/item/%s\">%s</a> <span class=\"price\">$%.2f</span> <span class=\"sku\">SKU-%d</span></li>\n",
				it.ID, html.EscapeString(it.Title), it.Price, it.SKU)
		}
		fmt.Fprintf(&b, "</ul>\n<nav><a class=\"next\" href=\"%s\">%s</a></nav>", next, nextText)
	} else {
		b.WriteString("<div class=\"grid\">\n")
		for _, it := range items {
			fmt.Fprintf(&b, "<div class=\"card\"><a class=\"name\" href=\"/item/%s\">%s</a><div class=\"cost\">%.2f USD</div><small>%d</small></div>\n",
				it.ID, html.EscapeString(it.Title), it.Price, it.SKU)
		}
		fmt.Fprintf(&b, "</div>\n<nav><a rel=\"next\" class=\"pager-next\" href=\"%s\">%s</a></nav>", next, nextText)
	}
	page(w, fmt.Sprintf("Products %d", p), b.String())
}

// jsListing sends no product markup: a script builds it from data, so only
// a browser sees the products.
func (s *Server) jsListing(w http.ResponseWriter, h *host, layout int, items []Item, next, nextText string, p int) {
	data, _ := json.Marshal(items)
	page(w, fmt.Sprintf("Products %d", p), fmt.Sprintf(`<h1>Products, page %d</h1>
<ul id="list"></ul><nav id="pager"></nav>
<script>
(function () {
  var layout = %d, items = %s, next = %q, nextText = %q;
  var list = document.getElementById("list");
  items.forEach(function (it) {
    var li = document.createElement("li");
    li.className = layout === 1 ? "product" : "card";
    var a = document.createElement("a");
    a.className = layout === 1 ? "title" : "name";
    a.href = "/item/" + it.id;
    a.textContent = it.title;
    var price = document.createElement("span");
    price.className = layout === 1 ? "price" : "cost";
    price.textContent = "$" + it.price.toFixed(2);
    li.appendChild(a); li.appendChild(document.createTextNode(" ")); li.appendChild(price);
    list.appendChild(li);
  });
  var n = document.createElement("a");
  n.className = layout === 1 ? "next" : "pager-next";
  n.href = next.indexOf("/private/") === 0 ? next : next.replace("/catalog", "/js/catalog").replace("/js/js/", "/js/");
  n.textContent = nextText;
  document.getElementById("pager").appendChild(n);
})();
</script>`, p, layout, data, next, nextText))
}

func (s *Server) item(w http.ResponseWriter, r *http.Request, h *host) {
	id := r.PathValue("id")
	layout, n := s.snapshot()
	i, err := strconv.Atoi(strings.TrimPrefix(id, "p"))
	if err != nil || !strings.HasPrefix(id, "p") || i < 1 || i > n {
		http.NotFound(w, r)
		return
	}
	it := s.itemAt(h, i)
	if layout == 1 {
		page(w, it.Title, fmt.Sprintf(`<link rel="canonical" href="%s">
<h1 class="name">%s</h1><p><span class="price">$%.2f</span></p><p class="sku">SKU-%d</p><p class="tags">%s</p>`,
			it.URL, html.EscapeString(it.Title), it.Price, it.SKU, strings.Join(it.Tags, ", ")))
		return
	}
	page(w, it.Title, fmt.Sprintf(`<link rel="canonical" href="%s">
<h2 class="product-title">%s</h2><div class="amount">%.2f USD</div><div class="code">%d</div>`,
		it.URL, html.EscapeString(it.Title), it.Price, it.SKU))
}

func (s *Server) api(w http.ResponseWriter, r *http.Request, h *host) {
	layout, n := s.snapshot()
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil || l < 1 || l > 100 {
			http.Error(w, `{"error":"limit must be 1 to 100"}`, http.StatusBadRequest)
			return
		}
		limit = l
	}
	off := 0
	if c := q.Get("cursor"); c != "" {
		o, err := strconv.ParseInt(strings.TrimPrefix(c, "c"), 36, 32)
		if err != nil || !strings.HasPrefix(c, "c") || o < 0 {
			http.Error(w, `{"error":"`+errBadCursor.Error()+`"}`, http.StatusBadRequest)
			return
		}
		off = int(o)
	}
	items := []Item{}
	for i := off + 1; i <= min(off+limit, n); i++ {
		items = append(items, s.itemAt(h, i))
	}
	for i := range items {
		items[i].URL = "/item/" + items[i].ID // relative, as APIs often are
	}
	nextCursor := ""
	if off+limit < n {
		nextCursor = "c" + strconv.FormatInt(int64(off+limit), 36)
	}
	if layout == 1 {
		writeJSON(w, map[string]any{"items": items, "next_cursor": nextCursor, "total": n})
		return
	}
	writeJSON(w, map[string]any{"products": items, "next": nextCursor, "count": n})
}
