package engine

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/go-rod/rod"

	"github.com/fleetwright/fleetwright/modules/platform"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// ErrNoBrowser: version 1 of the platform schema describes the platform
// over HTTP only; a browser worker on a spec-driven platform stops with it.
var ErrNoBrowser = errors.New("engine: the spec describes the platform over HTTP only (no browser side): run HTTP workers on it")

// browserSide answers from the spec what the spec says (the feed's and
// the booking's answers) and fails every page action with ErrNoBrowser.
type browserSide struct{ a *Adapter }

var _ platform.Browser = (*browserSide)(nil)

func (b *browserSide) fail() error { return fmt.Errorf("%w (%s)", ErrNoBrowser, b.a.s.Name) }

func (b *browserSide) Login(context.Context, *rod.Page, platform.Credentials, *platform.TOTP) error {
	return b.fail()
}

// JobsURL is empty: there is no jobs view to keep warm.
func (b *browserSide) JobsURL() string { return "" }

func (b *browserSide) IsJobsResponse(*url.URL) bool { return false }

func (b *browserSide) ParseJobs(body []byte) ([]wire.Job, error) { return b.a.parseJobs(body) }

func (b *browserSide) IsSignedOutResponse(status int) bool {
	for _, c := range b.a.signedOut {
		if len(c.status) > 0 && slices.Contains(c.status, status) && c.urlPath == "" && c.headerM == nil && c.jsonM == nil && c.htmlM == nil && c.bodyM == nil {
			return true
		}
	}
	return false
}

// BookRequestPattern matches nothing, so no request is ever let go.
func (b *browserSide) BookRequestPattern() string { return "" }

func (b *browserSide) IsBookRequest(string, *url.URL) bool { return false }

func (b *browserSide) BookRequestKey([]byte) string { return "" }

func (b *browserSide) IdempotencyHeader() string { return b.a.s.Booking.IdempotencyHeader }

func (b *browserSide) ClickBook(context.Context, *rod.Page, string) error { return b.fail() }

func (b *browserSide) ParseBookResponse(status int, body []byte) platform.BookResult {
	return b.a.readBook(&answer{status: status, header: map[string][]string{}, body: body}, data{})
}

func (b *browserSide) State(context.Context, *rod.Page) (platform.PageState, error) {
	return platform.PageOK, b.fail()
}

func (b *browserSide) Bookings(context.Context, *rod.Page, string) (platform.Bookings, error) {
	return platform.Bookings{}, b.fail()
}
