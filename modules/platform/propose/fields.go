package propose

import (
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// leaf is one scalar value inside a JSON object, at a gjson path.
type leaf struct {
	path   string // gjson path from the object
	name   string // the last key, lower case
	parent string // the key above it, lower case ("" at the top)
	depth  int
	v      gjson.Result
}

var gjsonSpecial = strings.NewReplacer(`\`, `\\`, `.`, `\.`, `*`, `\*`, `?`, `\?`, `#`, `\#`, `|`, `\|`, `@`, `\@`, `!`, `\!`, `=`, `\=`, `<`, `\<`, `>`, `\>`, `%`, `\%`)

// leaves lists the scalars of an object (not inside arrays), at most three
// levels down, in document order.
func leaves(obj gjson.Result) []leaf {
	var out []leaf
	var walk func(r gjson.Result, prefix, parent string, depth int)
	walk = func(r gjson.Result, prefix, parent string, depth int) {
		r.ForEach(func(k, v gjson.Result) bool {
			p := gjsonSpecial.Replace(k.String())
			if prefix != "" {
				p = prefix + "." + p
			}
			switch {
			case v.IsObject():
				if depth < 3 {
					walk(v, p, strings.ToLower(k.String()), depth+1)
				}
			case v.IsArray():
			default:
				out = append(out, leaf{path: p, name: strings.ToLower(k.String()), parent: parent, depth: depth, v: v})
			}
			return true
		})
	}
	if obj.IsObject() {
		walk(obj, "", "", 0)
	}
	return out
}

// arrays lists the arrays of objects in a JSON document (not inside other
// arrays), at most three levels down: the gjson path of each.
func arrays(doc gjson.Result) []string {
	var out []string
	var walk func(r gjson.Result, prefix string, depth int)
	walk = func(r gjson.Result, prefix string, depth int) {
		r.ForEach(func(k, v gjson.Result) bool {
			p := gjsonSpecial.Replace(k.String())
			if prefix != "" {
				p = prefix + "." + p
			}
			switch {
			case v.IsArray():
				first := v.Get("0")
				if first.IsObject() || len(v.Array()) == 0 {
					out = append(out, p)
				}
			case v.IsObject() && depth < 3:
				walk(v, p, depth+1)
			}
			return true
		})
	}
	walk(doc, "", 0)
	return out
}

// timeGuess is how a value reads as a time.
type timeGuess struct {
	format, layout string
	zonePath       string
	zoneInValue    bool
	noZone         bool // a wall-clock time with no zone found: read as UTC
}

var layouts = []string{
	"2006-01-02 15:04:05.000", "2006-01-02 15:04:05", "2006-01-02 15:04",
	"2006-01-02T15:04:05.000", "2006-01-02T15:04:05", "2006-01-02T15:04",
	"01/02/2006 3:04 PM", "01/02/2006 03:04 PM", "01/02/2006 15:04", "Jan 2, 2006 3:04 PM", "2 Jan 2006 15:04",
}

func readLayout(s string) string {
	for _, l := range layouts {
		if t, err := time.Parse(l, s); err == nil && t.Format(l) == s {
			return l
		}
	}
	return ""
}

// guessTime reads v (at lf within item) as a time, the way the engine
// would; ok is false when it does not read as one.
func guessTime(lf leaf, item []leaf) (timeGuess, bool) {
	v := lf.v
	if v.Type == gjson.Number || (v.Type == gjson.String && regexp.MustCompile(`^\d{9,13}$`).MatchString(v.String())) {
		n := v.Float()
		switch {
		case n > 1e11 && n < 1e14:
			return timeGuess{format: "epoch_ms"}, true
		case n > 1e8 && n < 1e11:
			return timeGuess{format: "epoch_s"}, true
		}
		return timeGuess{}, false
	}
	if v.Type != gjson.String {
		return timeGuess{}, false
	}
	s := v.String()
	if _, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return timeGuess{format: "rfc3339"}, true
	}
	if i := strings.LastIndex(s, " "); i > 0 {
		zone := s[i+1:]
		if strings.Contains(zone, "/") || zone == "UTC" {
			if _, err := time.LoadLocation(zone); err == nil {
				if l := readLayout(s[:i]); l != "" {
					return timeGuess{format: "layout", layout: l, zoneInValue: true}, true
				}
			}
		}
	}
	l := readLayout(s)
	if l == "" {
		return timeGuess{}, false
	}
	g := timeGuess{format: "layout", layout: l}
	// A zone beside the value: the same object's tz, timezone or zone.
	dir := ""
	if i := strings.LastIndex(lf.path, "."); i >= 0 {
		dir = lf.path[:i+1]
	}
	for _, o := range item {
		if o.path == dir+o.name && strings.HasPrefix(o.path, dir) && (o.name == "tz" || o.name == "timezone" || o.name == "time_zone" || o.name == "zone") {
			if _, err := time.LoadLocation(o.v.String()); err == nil {
				g.zonePath = o.path
				return g, true
			}
		}
	}
	g.noZone = true
	return g, true
}

// fieldGuess is one job or booking field the draft maps.
type fieldGuess struct {
	field   string
	path    string
	paths   []string
	unit    string
	time    *timeGuess
	comment string
}

// pick returns the first leaf (in the order of names) whose name, or
// parent.name, is one of names.
func pick(ls []leaf, names ...string) (leaf, bool) {
	for _, n := range names {
		for _, l := range ls {
			if l.name == n || l.parent+"."+l.name == n {
				return l, true
			}
		}
	}
	return leaf{}, false
}

var (
	keyNames       = []string{"id", "load_id", "loadid", "job_id", "jobid", "uuid", "reference", "ref", "key", "number"}
	publishedNames = []string{"published_at", "posted_at", "publishedat", "postedat", "published", "posted", "listed_at", "created_at", "createdat", "created"}
	expiresNames   = []string{"expires_at", "expiresat", "expires", "expiry", "bookable_until", "valid_until", "available_until", "expiration"}
	pickStartNames = []string{"pickup_start", "pickup.start", "pickup.opens", "pickup.from", "pickup_from", "pickup.earliest", "pickup_earliest", "pickup_at"}
	pickEndNames   = []string{"pickup_end", "pickup.end", "pickup.closes", "pickup.to", "pickup_to", "pickup.latest", "pickup_latest"}
	equipNames     = []string{"equipment", "equipment_type", "trailer_type", "trailer", "truck_type", "equipmenttype"}
	distanceNames  = []string{"miles", "distance_mi", "distance_miles", "distance", "distance_km", "mileage", "distancemi"}
)

// keyLeaf is the item's id-like field: the shallowest of the key names
// whose values are distinct across the items.
func keyLeaf(items [][]leaf) (string, bool) {
	if len(items) == 0 {
		return "", false
	}
	for _, n := range keyNames {
		for _, l := range items[0] {
			if l.name != n || (l.v.Type != gjson.String && l.v.Type != gjson.Number) || l.v.String() == "" {
				continue
			}
			seen := map[string]bool{}
			ok := true
			for _, it := range items {
				v := valueAt(it, l.path)
				if v == "" || seen[v] {
					ok = false
					break
				}
				seen[v] = true
			}
			if ok {
				return l.path, true
			}
		}
	}
	return "", false
}

func valueAt(ls []leaf, path string) string {
	for _, l := range ls {
		if l.path == path {
			return l.v.String()
		}
	}
	return ""
}

// timeLeaf is an item's time-like field (published first).
func timeLeaf(item []leaf, names []string) (leaf, *timeGuess, bool) {
	for _, n := range names {
		for _, l := range item {
			if l.name == n || l.parent+"."+l.name == n {
				if g, ok := guessTime(l, item); ok {
					return l, &g, true
				}
			}
		}
	}
	return leaf{}, nil, false
}

// anyTimeLeaf is the first field that reads as a time, for a job list
// whose published time has a name propose does not know.
func anyTimeLeaf(item []leaf) (leaf, *timeGuess, bool) {
	for _, l := range item {
		if g, ok := guessTime(l, item); ok {
			return l, &g, true
		}
	}
	return leaf{}, nil, false
}

// place maps an origin or destination: a text field, or an object's city
// and state joined.
func place(item []leaf, names ...string) (fieldGuess, bool) {
	for _, n := range names {
		for _, l := range item {
			if l.name == n && l.v.Type == gjson.String {
				return fieldGuess{path: l.path, comment: "guess: by name"}, true
			}
		}
		var parts []string
		for _, sub := range []string{"city", "state"} {
			for _, l := range item {
				if l.parent == n && l.name == sub {
					parts = append(parts, l.path)
				}
			}
		}
		if len(parts) > 0 {
			return fieldGuess{paths: parts, comment: "guess: by name (city and state joined)"}, true
		}
	}
	return fieldGuess{}, false
}

// jobFields maps a job list's fields by name and type.
func jobFields(items [][]leaf) ([]fieldGuess, bool) {
	key, ok := keyLeaf(items)
	if !ok {
		return nil, false
	}
	first := items[0]
	var out []fieldGuess
	out = append(out, fieldGuess{field: "key", path: key, comment: "guess: the id-like field, distinct in every item"})
	pub, tg, ok := timeLeaf(first, publishedNames)
	comment := "guess: by name, and its values read as " + describe(tg)
	if !ok {
		if pub, tg, ok = anyTimeLeaf(first); !ok {
			return nil, false
		}
		comment = "guess: the first field that reads as a time (" + describe(tg) + "); make sure it is when the job was published"
	}
	out = append(out, fieldGuess{field: "published_at", path: pub.path, time: tg, comment: comment})
	if l, g, ok := timeLeaf(first, expiresNames); ok {
		out = append(out, fieldGuess{field: "expires_at", path: l.path, time: g, comment: "guess: by name; " + describe(g)})
	}
	if f, ok := place(first, "origin", "from", "origin_name", "pickup_location", "origin_city"); ok {
		f.field = "origin"
		out = append(out, f)
	}
	if f, ok := place(first, "destination", "dest", "dest_name", "to", "delivery_location", "destination_city"); ok {
		f.field = "destination"
		out = append(out, f)
	}
	if l, ok := pick(first, equipNames...); ok && l.v.Type == gjson.String {
		out = append(out, fieldGuess{field: "equipment", path: l.path, comment: "guess: by name"})
	}
	for _, l := range first {
		if strings.HasPrefix(l.name, "weight") && isNumber(l.v) {
			unit, c := "lb", "guess: by name; no unit in the name, read as pounds"
			switch {
			case strings.HasSuffix(l.name, "kg"):
				unit, c = "kg", "guess: by name and unit"
			case strings.HasSuffix(l.name, "_t") || strings.Contains(l.name, "ton"):
				unit, c = "t", "guess: by name and unit"
			case strings.Contains(l.name, "lb") || strings.Contains(l.name, "pound"):
				c = "guess: by name and unit"
			}
			out = append(out, fieldGuess{field: "weight", path: l.path, unit: unit, comment: c})
			break
		}
	}
	hasDistance := false
	if l, ok := pick(first, distanceNames...); ok && isNumber(l.v) {
		unit, c := "mi", "guess: by name and unit"
		if strings.Contains(l.name, "km") {
			unit = "km"
		} else if !strings.Contains(l.name, "mi") {
			c = "guess: by name; no unit in the name, read as miles"
		}
		hasDistance = true
		out = append(out, fieldGuess{field: "distance", path: l.path, unit: unit, comment: c})
	}
	for _, l := range first {
		if !(strings.HasPrefix(l.name, "rate") || strings.HasPrefix(l.name, "price") || l.name == "pay") || !isNumber(l.v) {
			continue
		}
		cents := strings.Contains(l.name, "cent")
		unit, c := "usd", "guess: by name; read as dollars"
		switch {
		case strings.Contains(l.name, "per_mi") && hasDistance:
			unit, c = "usd_per_mile", "guess: by name: dollars per mile"
		case strings.Contains(l.name, "per_km") && hasDistance:
			unit, c = "usd_per_km", "guess: by name: dollars per km"
		case strings.Contains(l.name, "usd") || strings.Contains(l.name, "dollar"):
			c = "guess: by name and unit"
		}
		if cents {
			unit = strings.Replace(unit, "usd", "cents", 1)
		}
		out = append(out, fieldGuess{field: "rate", path: l.path, unit: unit, comment: c})
		break
	}
	if l, g, ok := timeLeaf(first, pickStartNames); ok {
		out = append(out, fieldGuess{field: "pickup_start", path: l.path, time: g, comment: "guess: by name; " + describe(g)})
	}
	if l, g, ok := timeLeaf(first, pickEndNames); ok {
		out = append(out, fieldGuess{field: "pickup_end", path: l.path, time: g, comment: "guess: by name; " + describe(g)})
	}
	return out, true
}

func isNumber(v gjson.Result) bool {
	if v.Type == gjson.Number {
		return true
	}
	return v.Type == gjson.String && regexp.MustCompile(`^-?\d+(\.\d+)?$`).MatchString(v.String())
}

func describe(g *timeGuess) string {
	switch {
	case g == nil:
		return "a time"
	case g.zoneInValue:
		return "layout " + g.layout + " with the zone's name at the end"
	case g.zonePath != "":
		return "layout " + g.layout + " in the zone at " + g.zonePath
	case g.noZone:
		return "layout " + g.layout + " with no zone found: read as UTC"
	case g.format == "layout":
		return "layout " + g.layout
	}
	return g.format
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
