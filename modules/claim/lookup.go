package claim

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fleetwright/fleetwright/modules/wire"
)

// MaxLookupPages bounds one paged look-up (at 200 bookings a page, two
// million bookings): past it the look-up is incomplete and decides nothing.
const MaxLookupPages = 10000

// lookupAll asks for the client's bookings page by page: each answer's Next
// is the next request's Cursor, until an answer has none. The whole list is
// proven only when every page was: one incomplete or failed page makes the
// look-up incomplete, and nothing is decided on it. A v3 agent answers in
// one page (no Next), as before paging. The pages may come from different
// agents of the tenant: a cursor is the platform's and holds for any
// account of the same client. Each page has its own request id
// (req.RequestID, then "<id>.2", "<id>.3" …); the result carries the first.
func (e *Engine) lookupAll(ctx context.Context, lk Lookuper, tenant string, req wire.Lookup) (wire.LookupResult, error) {
	id := req.RequestID
	out := wire.LookupResult{RequestID: id, Bookings: []wire.Booking{}}
	req.Cursor = ""
	for page := 1; ; page++ {
		if page > MaxLookupPages {
			out.Complete, out.Error = false, fmt.Sprintf("more than %d pages of bookings", MaxLookupPages)
			out.Next = ""
			return out, nil
		}
		req.RequestID = id
		if page > 1 {
			req.RequestID = id + "." + strconv.Itoa(page)
		}
		res, err := lk.Lookup(ctx, tenant, req)
		if err != nil {
			return out, err
		}
		if out.Client == "" {
			out.Client = res.Client
		}
		if !res.Complete || res.Error != "" || (res.Client != "" && res.Client != out.Client) {
			out.Complete, out.Error = false, res.Error
			if out.Error == "" && res.Complete {
				out.Error = fmt.Sprintf("page %d was answered as client %q, page 1 as %q", page, res.Client, out.Client)
			}
			return out, nil
		}
		out.Bookings = append(out.Bookings, res.Bookings...)
		if res.Next == "" {
			out.Complete = true
			return out, nil
		}
		if res.Next == req.Cursor {
			out.Complete, out.Error = false, fmt.Sprintf("the look-up's cursor did not move (%s)", res.Next)
			return out, nil
		}
		req.Cursor = res.Next
	}
}
