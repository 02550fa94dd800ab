package spec

// Browser is the platform seen through a real page (the watcher and the
// browser actor): how the page signs in, which of the page's own responses
// carry jobs, which control books a job and which request that sends, and
// what the page shows when it needs a person or signed out. Without it the
// platform runs over HTTP only.
type Browser struct {
	// SignIn is the sign-in in the page: fields and buttons by selector.
	SignIn PageSignIn `yaml:"sign_in"`
	// Jobs is the jobs view and the responses of it that carry jobs.
	Jobs PageJobs `yaml:"jobs"`
	// Booking is the booking control of one job and the request it sends.
	Booking PageBooking `yaml:"booking"`
	// Page says what the page shows: a captcha, a sign-in page, the jobs
	// view working.
	Page PageStates `yaml:"page"`
	// Vars are values read from the signed-in page ({{.vars.NAME}} in the
	// requests the page sends for the engine: the bookings look-up).
	Vars map[string]PageValue `yaml:"vars"`
}

// PageSignIn is the sign-in in the page: URL is opened, then the steps run
// in order.
type PageSignIn struct {
	// URL is the sign-in page (a path from the base URL, or absolute).
	URL   string     `yaml:"url"`
	Steps []PageStep `yaml:"steps"`
}

// PageStep is one form of the sign-in: its fields are typed, its submit
// control clicked, and the page that follows read by the rules.
type PageStep struct {
	// Name names the step in errors.
	Name string `yaml:"name"`
	// OneTimeCode: a field of the step types the one-time code
	// ({{.code}}); when CodeReused holds on the page that follows, the next
	// step's code is waited for and the step done again (at most twice).
	OneTimeCode bool      `yaml:"one_time_code"`
	CodeReused  *PageCond `yaml:"code_reused"`
	// Fields are typed in order.
	Fields []PageField `yaml:"fields"`
	// Submit is the CSS selector of the control that submits the step.
	Submit string `yaml:"submit"`
	// Navigates (default true): submitting loads a new page; the rules
	// are read on it. false: the page answers in place (a script), and
	// the rules are read on the same page until one holds.
	Navigates *bool `yaml:"navigates"`
	// Fail rules are tried in order before Success.
	Fail []PageFailRule `yaml:"fail"`
	// Success must hold for the step to count.
	Success PageCond `yaml:"success"`
}

// PageField is one input of a sign-in form.
type PageField struct {
	// Selector is the field's CSS selector.
	Selector string `yaml:"selector"`
	// Value is a template over .base, .username, .password (and .code on
	// the one_time_code step).
	Value string `yaml:"value"`
}

// PageFailRule maps a page to a sign-in error.
type PageFailRule struct {
	When PageCond `yaml:"when"`
	// Error is credentials, code_refused, captcha or unavailable.
	Error string `yaml:"error"`
}

// PageCond is a condition on what the page shows: every test it names must
// hold.
type PageCond struct {
	// URLPath is the page's path.
	URLPath string `yaml:"url_path"`
	// Element is a CSS selector that must find an element.
	Element string `yaml:"element"`
	// Visible is a CSS selector that must find an element that is shown.
	Visible string `yaml:"visible"`
	// Text tests the first element a selector finds (its text, or Attr).
	Text *HTMLMatch `yaml:"text"`
}

// PageJobs is the jobs view and its jobs responses.
type PageJobs struct {
	// URL is the jobs view a watcher and a browser actor keep open.
	URL string `yaml:"url"`
	// Responses: a response to a request any of these match carries jobs,
	// read with the feed's fields.
	Responses []RequestMatch `yaml:"responses"`
	// Items is the gjson path of the array of jobs in such a response
	// (default: feed.items).
	Items string `yaml:"items"`
	// ServerTime, when set, is where such a response carries the
	// platform's own clock (finer than its Date header).
	ServerTime *Field `yaml:"server_time"`
}

// RequestMatch tells one kind of request the page sends: its method, its
// URL, and a condition on its body (a GraphQL operation name, a form
// field).
type RequestMatch struct {
	// Method (default GET for jobs, POST for a booking).
	Method string `yaml:"method"`
	// URL is a path from the base URL or an absolute URL, without its
	// query; * stands for any run of characters.
	URL string `yaml:"url"`
	// JSON tests a value of the request's JSON body.
	JSON *JSONMatch `yaml:"json"`
	// Form tests a field of the request's form body.
	Form *HeaderMatch `yaml:"form"`
	// Body tests the raw request body.
	Body *Match `yaml:"body"`
}

// PageBooking is the booking in the page.
type PageBooking struct {
	// Control is the CSS selector of one job's booking control, a template
	// over .key (write {{css .key}} for a quoted CSS string).
	Control string `yaml:"control"`
	// Request tells the booking request the control sends (intercepted
	// through CDP Fetch before it leaves); the booking's results read its
	// answer.
	Request RequestMatch `yaml:"request"`
	// Key says where that request carries the job's key.
	Key KeyAt `yaml:"key"`
}

// KeyAt is where a request carries the job's key: exactly one of JSON (a
// gjson path of the body), Form (a form field of the body), Query (a query
// parameter) or Path (a regular expression on the URL's path, its group
// the key).
type KeyAt struct {
	JSON  string `yaml:"json"`
	Form  string `yaml:"form"`
	Query string `yaml:"query"`
	Path  string `yaml:"path"`
}

// PageStates are the page's states a worker reacts to.
type PageStates struct {
	// Captcha: any of these means the page asks a person to verify.
	Captcha []PageCond `yaml:"captcha"`
	// SignedOut: any of these means the page is signed out.
	SignedOut []PageCond `yaml:"signed_out"`
	// Ready is a CSS selector the working jobs view always has: the jobs
	// view without it is an error page the platform served.
	Ready string `yaml:"ready"`
}

// PageValue reads a value from the signed-in page: the first element the
// selector finds, its text or Attr.
type PageValue struct {
	Selector string `yaml:"selector"`
	Attr     string `yaml:"attr"`
}
