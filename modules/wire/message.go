package wire

import (
	"encoding/json"
	"errors"
	"time"
)

// Message is the body of one protocol message.
type Message interface {
	// MessageType names the message on the wire.
	MessageType() Type
}

// Hello is the agent's first message. Its shape is shared by every version
// (it is sent before a version is chosen), so it only ever gains fields.
type Hello struct {
	// Version is the newest protocol version the agent speaks.
	Version int `json:"version"`
	// MinVersion is the oldest protocol version the agent accepts.
	MinVersion int `json:"min_version"`
	// Build is the agent binary's build version.
	Build string `json:"build"`
	// Host is the agent's host name.
	Host string `json:"host"`
	// Clock is the agent's local clock when it sent hello: a first, coarse
	// look at its offset before ping/pong measures it properly.
	Clock time.Time `json:"clock"`
	// Token is the agent's token, issued once by the panel.
	Token Secret `json:"token"`
	// InstallKey is the public half of the agent's installation key (v4,
	// see credential.go): pinned by the panel at the first welcome; the
	// credentials are sealed to it.
	InstallKey string `json:"install_key,omitempty" since:"4"`
}

// WorkerSpec is one background worker the panel wants the agent to run.
type WorkerSpec struct {
	// Name is unique within the agent.
	Name string `json:"name"`
	// Kind selects the worker's code (for example "watcher", "actor").
	Kind string `json:"kind"`
	// Settings are kind-specific; never secrets.
	Settings map[string]string `json:"settings,omitempty"`
}

// Account is the platform account the agent works for (no secrets).
type Account struct {
	// Key is the account's identity on the platform; traits derive from it.
	Key string `json:"key"`
	// Region is the account's configured region; the timezone follows it.
	Region string `json:"region"`
	// BoardURL is the platform's base URL.
	BoardURL string `json:"board_url"`
	// Platform is the description of the account's platform the agent
	// builds its adapter from (v5; docs/ADAPTERS.md). Absent (a panel
	// before v5, or an account on the built-in sandbox): the agent uses
	// the sandbox platform's spec it ships with.
	Platform *PlatformSpec `json:"platform,omitempty" since:"5"`
}

// PlatformSpec is one version of a tenant's platform description, as the
// panel stores it: the agent compiles Source and refuses to claim with a
// spec it cannot build (reporting why).
type PlatformSpec struct {
	// Name is the platform's name (the spec's own `name`).
	Name string `json:"name"`
	// Version is the tenant's version number of this spec (1, 2, …).
	Version int `json:"version"`
	// Digest is the hex SHA-256 of Source, so both sides name one text.
	Digest string `json:"digest"`
	// Source is the spec's YAML text.
	Source string `json:"source"`
}

// Config is what the agent should be doing.
type Config struct {
	// Paused: start no new actions.
	Paused  bool         `json:"paused"`
	Account Account      `json:"account"`
	Workers []WorkerSpec `json:"workers"`
}

// Credentials are the account's sign-in secrets on the platform.
type Credentials struct {
	Username   string `json:"username"`
	Password   Secret `json:"password"`
	TOTPSecret Secret `json:"totp_secret"`
	// Origins are the origins (scheme://host[:port]) the panel sealed the
	// credentials for: the only ones an agent sends them to. They never
	// travel inside the credentials (welcome's credential_origins and
	// rotate_credentials' origins carry them, v5); the agent keeps them
	// with the credentials and hands them to the adapter's Login.
	Origins []string `json:"-"`
}

// credentialsWire is how Credentials travel: the real values. Only Encode
// builds it.
type credentialsWire struct {
	Username   string `json:"username"`
	Password   string `json:"password"`
	TOTPSecret string `json:"totp_secret"`
}

func (c Credentials) wire() credentialsWire {
	return credentialsWire{Username: c.Username, Password: c.Password.Reveal(), TOTPSecret: c.TOTPSecret.Reveal()}
}

// Welcome accepts the agent.
type Welcome struct {
	// Version is the protocol version chosen for this connection.
	Version int `json:"version"`
	// AgentID is the panel's id for this agent.
	AgentID string `json:"agent_id"`
	// InstallationID identifies the panel installation (its database), so an
	// agent counts unknown-token answers only from the one that welcomed it.
	InstallationID string      `json:"installation_id"`
	Config         Config      `json:"config"`
	Credentials    Credentials `json:"credentials"`
	// SealedCredentials carries the credentials sealed to the agent's
	// installation key (v4); Credentials is then empty.
	SealedCredentials *SealedCredentials `json:"sealed_credentials,omitempty" since:"4"`
	// CredentialsWithheld says why no credentials came (v4; Withheld*).
	CredentialsWithheld string `json:"credentials_withheld,omitempty" since:"4"`
	// CredentialOrigins are the origins (scheme://host[:port]) the
	// credentials were sealed for at the panel (v5): the agent sends them
	// nowhere else, whatever its configuration's board URL says. A welcome
	// with credentials but without it (a v4 panel) leaves the agent unable
	// to sign in (see docs/PROTOCOL.md).
	CredentialOrigins []string `json:"credential_origins,omitempty" since:"5"`
	// AssistantLimits are the panel's limits for an enrolled assistant
	// (v4; absent when neither the tenant nor the installation sets one).
	AssistantLimits *AssistantLimits `json:"assistant_limits,omitempty" since:"4"`
	// RequestLimit is the account's request budget per rolling hour (v4;
	// absent: no limit; see requests.go).
	RequestLimit *RequestLimit `json:"request_limit,omitempty" since:"4"`
}

// RejectReason says why the panel refused an agent.
type RejectReason string

// Reject reasons (append-only).
const (
	// RejectUnknownToken: the panel has no such token. Counts toward
	// retirement only from the installation that last welcomed the agent.
	RejectUnknownToken RejectReason = "unknown_token"
	// RejectRetired: the token belongs to a deleted agent's tombstone; the
	// agent retires at once.
	RejectRetired RejectReason = "retired"
	// RejectIncompatibleVersion: no common protocol version; MinVersion and
	// MaxVersion carry the panel's range.
	RejectIncompatibleVersion RejectReason = "incompatible_version"
)

// Reject refuses the agent; the panel closes the connection after it.
type Reject struct {
	Reason RejectReason `json:"reason"`
	// Message is for a person reading the agent's log.
	Message string `json:"message"`
	// InstallationID identifies the panel installation that answered.
	InstallationID string `json:"installation_id"`
	// MinVersion and MaxVersion are the panel's range (incompatible_version).
	MinVersion int `json:"min_version,omitempty"`
	MaxVersion int `json:"max_version,omitempty"`
}

// RejectFor builds the reject for a failed Negotiate.
func RejectFor(err error, installationID string) Reject {
	var inc *IncompatibleError
	if errors.As(err, &inc) {
		return Reject{Reason: RejectIncompatibleVersion, Message: inc.Error(), InstallationID: installationID,
			MinVersion: inc.PanelMin, MaxVersion: inc.PanelMax}
	}
	return Reject{Reason: RejectIncompatibleVersion, Message: err.Error(), InstallationID: installationID,
		MinVersion: MinSupported, MaxVersion: Current}
}

// Configure replaces the agent's configuration.
type Configure struct {
	CommandID string `json:"command_id"`
	Config    Config `json:"config"`
	// AssistantLimits as in Welcome (v4).
	AssistantLimits *AssistantLimits `json:"assistant_limits,omitempty" since:"4"`
	// RequestLimit as in Welcome (v4): a configure always carries the
	// current one, so its absence lifts a limit.
	RequestLimit *RequestLimit `json:"request_limit,omitempty" since:"4"`
}

// Pause tells the agent to start no new actions.
type Pause struct {
	CommandID string `json:"command_id"`
	Reason    string `json:"reason,omitempty"`
}

// Resume lifts a pause.
type Resume struct {
	CommandID string `json:"command_id"`
}

// RestartWorker restarts one worker with a fresh restart budget (a person
// looked at it).
type RestartWorker struct {
	CommandID string `json:"command_id"`
	Worker    string `json:"worker"`
}

// Retire tells the agent to wipe its secrets and exit for good.
type Retire struct {
	CommandID string `json:"command_id"`
	Reason    string `json:"reason,omitempty"`
}

// RotateCredentials replaces the account's credentials.
type RotateCredentials struct {
	CommandID   string      `json:"command_id"`
	Credentials Credentials `json:"credentials"`
	// Sealed and Withheld are as in Welcome (v4).
	Sealed   *SealedCredentials `json:"sealed,omitempty" since:"4"`
	Withheld string             `json:"withheld,omitempty" since:"4"`
	// Origins are as Welcome.CredentialOrigins (v5).
	Origins []string `json:"origins,omitempty" since:"5"`
}

// Ping asks for a pong; the four timestamps give the clock offset. The panel
// sends it; SentAt is the panel's clock (t0).
type Ping struct {
	CommandID string    `json:"command_id"`
	SentAt    time.Time `json:"sent_at"`
}

// Pong answers a ping. PingSentAt echoes the ping's t0; ReceivedAt (t1) and
// SentAt (t2) are the agent's clock.
type Pong struct {
	CommandID  string    `json:"command_id"`
	PingSentAt time.Time `json:"ping_sent_at"`
	ReceivedAt time.Time `json:"received_at"`
	SentAt     time.Time `json:"sent_at"`
}

// Worker states reported in State (append-only).
const (
	WorkerRunning     = "running"
	WorkerRestarting  = "restarting"
	WorkerDone        = "done"
	WorkerStopped     = "stopped"
	WorkerNeedsPerson = "needs_person"
	WorkerUnsupported = "unsupported" // the agent has no code for the worker's kind
)

// Operation is a completed external action.
type Operation struct {
	ID         string    `json:"id"`
	JobKey     string    `json:"job_key"`
	Outcome    string    `json:"outcome"`
	FinishedAt time.Time `json:"finished_at"`
}

// WorkerState is one worker in a state report.
type WorkerState struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	// LastOperation is the last operation the worker completed, if any.
	LastOperation *Operation `json:"last_operation,omitempty"`
	// OldestTaskAgeMillis is the age of the oldest task waiting for this
	// worker, in milliseconds (v2; nil when not reported).
	OldestTaskAgeMillis *int64 `json:"oldest_task_age_ms,omitempty"`
}

// State is the agent's report of itself, sent on connect, on change and
// periodically.
type State struct {
	Paused  bool          `json:"paused"`
	Workers []WorkerState `json:"workers"`
	// MemoryRSSBytes is the agent process's resident memory (v2).
	MemoryRSSBytes *uint64 `json:"memory_rss_bytes,omitempty"`
	// StartedAt is when the agent process started (v4): the panel counts
	// process starts to tell an agent in a crash loop.
	StartedAt *time.Time `json:"started_at,omitempty" since:"4"`
	// BrowserSeconds are the seconds the agent's browsers were open for
	// work since StartedAt, per worker kind, open ones counted up to now
	// (v4): the panel adds the growth between two reports to
	// fleet_browser_seconds_total.
	BrowserSeconds map[string]float64 `json:"browser_seconds,omitempty" since:"4"`
}

// Event levels.
const (
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

// Event is something that happened on the agent that a person may want to
// see (a worker needing a person, a captcha, a sign-in).
type Event struct {
	Level   string            `json:"level"`
	Kind    string            `json:"kind"`
	Worker  string            `json:"worker,omitempty"`
	Message string            `json:"message"`
	At      time.Time         `json:"at"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// CommandResult acknowledges a command. A command stays pending on the panel
// until its result arrives.
type CommandResult struct {
	CommandID string `json:"command_id"`
	OK        bool   `json:"ok"`
	Error     string `json:"error,omitempty"`
}

// ErrorCode classifies a protocol error.
type ErrorCode string

// Protocol error codes (append-only).
const (
	CodeMalformed   ErrorCode = "malformed"
	CodeOversized   ErrorCode = "oversized"
	CodeUnknownType ErrorCode = "unknown_type"
	// CodeUnexpected: a valid message the receiver did not expect now
	// (anything but hello first, a command sent to the panel, ...).
	CodeUnexpected ErrorCode = "unexpected"
)

// Error reports a protocol error; the sender closes the connection after it.
type Error struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
}

// MessageType implements Message.
func (Hello) MessageType() Type { return TypeHello }

// MessageType implements Message.
func (Welcome) MessageType() Type { return TypeWelcome }

// MessageType implements Message.
func (Reject) MessageType() Type { return TypeReject }

// MessageType implements Message.
func (Configure) MessageType() Type { return TypeConfigure }

// MessageType implements Message.
func (Pause) MessageType() Type { return TypePause }

// MessageType implements Message.
func (Resume) MessageType() Type { return TypeResume }

// MessageType implements Message.
func (RestartWorker) MessageType() Type { return TypeRestartWorker }

// MessageType implements Message.
func (Retire) MessageType() Type { return TypeRetire }

// MessageType implements Message.
func (RotateCredentials) MessageType() Type { return TypeRotateCredentials }

// MessageType implements Message.
func (Ping) MessageType() Type { return TypePing }

// MessageType implements Message.
func (Pong) MessageType() Type { return TypePong }

// MessageType implements Message.
func (State) MessageType() Type { return TypeState }

// MessageType implements Message.
func (Event) MessageType() Type { return TypeEvent }

// MessageType implements Message.
func (CommandResult) MessageType() Type { return TypeCommandResult }

// MessageType implements Message.
func (Error) MessageType() Type { return TypeError }

// CommandID returns the command id of a panel→agent command, and false for
// any other message.
func CommandID(m Message) (string, bool) {
	switch c := m.(type) {
	case Configure:
		return c.CommandID, true
	case Pause:
		return c.CommandID, true
	case Resume:
		return c.CommandID, true
	case RestartWorker:
		return c.CommandID, true
	case Retire:
		return c.CommandID, true
	case RotateCredentials:
		return c.CommandID, true
	case Ping:
		return c.CommandID, true
	case AssistantTaskStart:
		return c.CommandID, true
	}
	return "", false
}

// wireBody returns what Encode marshals for m at version v: the fields of
// that version only, and secrets revealed.
func wireBody(m Message, v int) any {
	m = ForVersion(m, v)
	switch x := m.(type) {
	case Hello:
		type plain Hello
		return struct {
			plain
			Token string `json:"token"`
		}{plain(x), x.Token.Reveal()}
	case Welcome:
		type plain Welcome
		return struct {
			plain
			Credentials credentialsWire `json:"credentials"`
		}{plain(x), x.Credentials.wire()}
	case RotateCredentials:
		type plain RotateCredentials
		return struct {
			plain
			Credentials credentialsWire `json:"credentials"`
		}{plain(x), x.Credentials.wire()}
	case State:
		return x.forVersion(v)
	}
	return m
}

// forVersion drops the fields a version does not have.
func (s State) forVersion(v int) State {
	if v >= V2 {
		return s
	}
	s.MemoryRSSBytes = nil
	if s.Workers != nil {
		ws := make([]WorkerState, len(s.Workers))
		for i, w := range s.Workers {
			w.OldestTaskAgeMillis = nil
			ws[i] = w
		}
		s.Workers = ws
	}
	return s
}

// validate checks what JSON decoding cannot: required fields.
func validate(m Message) error {
	if id, ok := CommandID(m); ok && id == "" {
		return errors.New("command_id is empty")
	}
	switch x := m.(type) {
	case Hello:
		if x.Version < 1 || x.MinVersion < 1 || x.MinVersion > x.Version {
			return ErrBadVersionRange
		}
	case Welcome:
		if x.Version < 1 || x.InstallationID == "" || x.AgentID == "" {
			return errors.New("welcome needs version, agent_id and installation_id")
		}
	case Reject:
		if x.Reason == "" {
			return errors.New("reject needs a reason")
		}
	case RestartWorker:
		if x.Worker == "" {
			return errors.New("restart_worker needs a worker")
		}
	case Pong:
		if x.CommandID == "" {
			return errors.New("pong needs the ping's command_id")
		}
	case CommandResult:
		if x.CommandID == "" {
			return errors.New("command_result needs a command_id")
		}
	case Error:
		if x.Code == "" {
			return errors.New("error needs a code")
		}
	case AssistantTaskStart:
		if x.Goal == "" || len(x.StartURLs) == 0 {
			return errors.New("assistant_task needs a goal and at least one start URL")
		}
	}
	if err := validateCrawl(m); err != nil {
		return err
	}
	if err := validateGrant(m); err != nil {
		return err
	}
	return validateClaim(m)
}

var _ json.Unmarshaler = (*Secret)(nil)
