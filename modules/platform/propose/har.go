package propose

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// HAR is the part of a HAR 1.2 file (http://www.softwareishard.com/blog/har-12-spec/)
// a draft is made from: the log's entries in the order they were recorded.
type HAR struct {
	Log struct {
		Version string  `json:"version"`
		Entries []Entry `json:"entries"`
	} `json:"log"`
}

// Entry is one request and its answer.
type Entry struct {
	StartedDateTime string   `json:"startedDateTime"`
	Request         Request  `json:"request"`
	Response        Response `json:"response"`
	// ResourceType is Chromium's own field ("document", "fetch", "xhr").
	ResourceType string `json:"_resourceType,omitempty"`
}

// Request is an entry's request.
type Request struct {
	Method   string    `json:"method"`
	URL      string    `json:"url"`
	Headers  []NV      `json:"headers"`
	Cookies  []NV      `json:"cookies"`
	PostData *PostData `json:"postData,omitempty"`
}

// PostData is a request's body.
type PostData struct {
	MimeType string `json:"mimeType"`
	Text     string `json:"text"`
	Params   []NV   `json:"params,omitempty"`
}

// Response is an entry's answer.
type Response struct {
	Status      int     `json:"status"`
	Headers     []NV    `json:"headers"`
	Cookies     []NV    `json:"cookies"`
	Content     Content `json:"content"`
	RedirectURL string  `json:"redirectURL"`
}

// Content is an answer's body ("Save all as HAR with content" keeps it).
type Content struct {
	MimeType string `json:"mimeType"`
	Text     string `json:"text"`
	Encoding string `json:"encoding,omitempty"`
}

// NV is a name and a value (a header, a cookie, a form field).
type NV struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ErrNotHAR is the error of a file that is not a HAR.
var ErrNotHAR = errors.New("propose: not a HAR file")

// ReadHAR decodes a HAR file. A file that is not JSON, or JSON without a
// log of entries, is an error that says so and what to do.
func ReadHAR(raw []byte) (*HAR, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("propose: not JSON (byte %d: %s): a HAR file is the JSON Chromium's DevTools save (Network → Save all as HAR with content)", se.Offset, se.Error())
		}
		return nil, fmt.Errorf("propose: not a JSON object: a HAR file is the JSON Chromium's DevTools save (Network → Save all as HAR with content)")
	}
	logRaw, ok := probe["log"]
	if !ok {
		return nil, fmt.Errorf("%w: the JSON has no \"log\" object; save the session from Chromium's DevTools (Network → Save all as HAR with content)", ErrNotHAR)
	}
	var h HAR
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("%w: its log does not read as HAR 1.2 (%v); save the session again from Chromium's DevTools (Network → Save all as HAR with content)", ErrNotHAR, err)
	}
	var entries map[string]json.RawMessage
	if json.Unmarshal(logRaw, &entries) != nil || entries["entries"] == nil {
		return nil, fmt.Errorf("%w: its log has no \"entries\" list; save the session from Chromium's DevTools (Network → Save all as HAR with content)", ErrNotHAR)
	}
	if len(h.Log.Entries) == 0 {
		return nil, fmt.Errorf("%w: its log holds no requests; record the whole session (sign in, watch the board, book one load, open the bookings) with DevTools open", ErrNotHAR)
	}
	return &h, nil
}

// header returns the first value of a header (any case).
func header(hs []NV, name string) string {
	for _, h := range hs {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}

// body is the answer's body as bytes.
func (e *Entry) body() []byte {
	c := e.Response.Content
	if c.Encoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(c.Text)
		if err != nil {
			return nil
		}
		return b
	}
	return []byte(c.Text)
}

func (e *Entry) url() *url.URL {
	u, err := url.Parse(e.Request.URL)
	if err != nil {
		return &url.URL{}
	}
	return u
}

func (e *Entry) mime() string {
	m := e.Response.Content.MimeType
	if m == "" {
		m = header(e.Response.Headers, "Content-Type")
	}
	return strings.ToLower(m)
}

func (e *Entry) isJSON() bool {
	m := e.mime()
	if strings.Contains(m, "json") {
		return true
	}
	b := strings.TrimSpace(string(e.body()))
	return strings.HasPrefix(b, "{") && json.Valid([]byte(b))
}

func (e *Entry) isHTML() bool { return strings.Contains(e.mime(), "html") }

func (e *Entry) isRedirect() bool {
	switch e.Response.Status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// location is where a redirect leads, resolved against the request's URL.
func (e *Entry) location() string {
	loc := e.Response.RedirectURL
	if loc == "" {
		loc = header(e.Response.Headers, "Location")
	}
	if loc == "" {
		return ""
	}
	u, err := e.url().Parse(loc)
	if err != nil {
		return ""
	}
	return u.String()
}

// form is the request's form fields (a urlencoded body), in order.
func (e *Entry) form() []NV {
	pd := e.Request.PostData
	if pd == nil {
		return nil
	}
	if !strings.Contains(strings.ToLower(pd.MimeType), "x-www-form-urlencoded") && !strings.Contains(strings.ToLower(header(e.Request.Headers, "Content-Type")), "x-www-form-urlencoded") {
		return nil
	}
	var out []NV
	for _, part := range strings.Split(pd.Text, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		k, _ = url.QueryUnescape(k)
		v, _ = url.QueryUnescape(v)
		out = append(out, NV{k, v})
	}
	if len(out) == 0 {
		for _, p := range pd.Params {
			k, _ := url.QueryUnescape(p.Name)
			v, _ := url.QueryUnescape(p.Value)
			out = append(out, NV{k, v})
		}
	}
	return out
}

// jsonBody is the request's JSON body, if it has one.
func (e *Entry) jsonBody() string {
	pd := e.Request.PostData
	if pd == nil {
		return ""
	}
	t := strings.TrimSpace(pd.Text)
	if (strings.Contains(strings.ToLower(pd.MimeType), "json") || strings.HasPrefix(t, "{")) && json.Valid([]byte(t)) {
		return t
	}
	return ""
}

// setCookies are the cookies the answer set (name → value).
func (e *Entry) setCookies() []NV {
	var out []NV
	out = append(out, e.Response.Cookies...)
	for _, h := range e.Response.Headers {
		if !strings.EqualFold(h.Name, "Set-Cookie") {
			continue
		}
		for _, line := range strings.Split(h.Value, "\n") {
			if c, err := http.ParseSetCookie(line); err == nil {
				out = append(out, NV{c.Name, c.Value})
			}
		}
	}
	return out
}
