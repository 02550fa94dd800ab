package wire

// RequestLimit is the account's request budget (v4, in Welcome and
// Configure): the lowest of the tenant's and the installation's
// account_requests_hour limit. The agent counts every HTTP request its
// workers send to the platform for the account over a rolling hour; at the
// budget it stops polling and taking new work until the window frees (a
// claim already ACTING finishes). Absent: no limit.
type RequestLimit struct {
	// PerHour is the number of requests allowed in any rolling hour.
	PerHour int64 `json:"per_hour"`
	// From says where it was set: "tenant" or "global".
	From string `json:"from"`
}

// Agent event kinds of the request budget (Event.Kind).
const (
	// EventRequestLimitReached: the account's budget is spent; the agent
	// holds its workers. Fields: limit, value, from, counted, frees_at.
	EventRequestLimitReached = "request_limit_reached"
	// EventRequestLimitResumed: the window freed (or the limit was raised
	// or removed); the workers go on.
	EventRequestLimitResumed = "request_limit_resumed"
)
