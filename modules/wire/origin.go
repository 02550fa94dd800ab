package wire

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Origin is the origin of a URL as credentials are bound to it:
// scheme://host[:port], scheme and host lower-case, the scheme's default
// port left out; "" when raw is no http(s) URL with a host.
func Origin(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return ""
	}
	h := strings.ToLower(u.Hostname())
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if p := u.Port(); p != "" && !(scheme == "http" && p == "80") && !(scheme == "https" && p == "443") {
		h += ":" + p
	}
	return scheme + "://" + h
}

// ErrOriginNotBound: the credentials are not sent to an origin the panel did
// not seal them for (or to any origin, when the panel named none).
var ErrOriginNotBound = errors.New("wire: the credentials are not sent there")

// CheckOrigin says whether the credentials may be sent to target (a URL or
// an origin): nil only when its origin is one of c.Origins. The error names
// both sides (origins are not secret) and what to do.
func (c Credentials) CheckOrigin(target string) error {
	o := Origin(target)
	if len(c.Origins) == 0 {
		return fmt.Errorf("%w: the panel did not say which board they were sealed for (a panel before protocol v5): nothing is sent to %s; upgrade the panel", ErrOriginNotBound, orNone(o))
	}
	for _, b := range c.Origins {
		if o != "" && Origin(b) == o {
			return nil
		}
	}
	return fmt.Errorf("%w: they were sealed for %s, not %s: nothing is sent to %s; if the board moved, an admin enters the account's credentials again for the new board",
		ErrOriginNotBound, strings.Join(slices.Compact(slices.Sorted(slices.Values(c.Origins))), ", "), orNone(o), orNone(o))
}

func orNone(o string) string {
	if o == "" {
		return "an address that is no http(s) origin"
	}
	return o
}
