// Package notify delivers alarms to the notification channels an admin
// configured: webhooks (a JSON body signed with HMAC-SHA256, dialled
// through the SSRF egress guard) and e-mail (SMTP). It sends what
// alarm_events records — an alarm opened, an alarm resolved — so a
// condition seen on every sweep is one message, and its end is another
// (de-duplication and resolve messages come from the alarm's own life).
// Each (channel, event) is recorded in notify_deliveries: a restart
// neither loses nor repeats a message, and a receiver can drop a repeat of
// an uncertain send by its event id.
//
// Webhook request: POST, Content-Type application/json, headers
// X-Fleetwright-Event (the event id), X-Fleetwright-Signature
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the channel's
// secret>". The receiver recomputes the HMAC and refuses a timestamp older
// than a few minutes (replay).
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/mail"
	"net/smtp"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/egress"
	"github.com/fleetwright/fleetwright/app/logging"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/alarm"
)

// SMTP is the mail server e-mail channels send through.
type SMTP struct {
	// Addr is host:port; empty means e-mail channels cannot send.
	Addr     string
	From     string
	Username string
	Password string
}

// Config builds a Notifier.
type Config struct {
	Clock clock.Clock
	Log   *slog.Logger
	// HTTP sends webhooks; the panel passes the egress guard's client, so
	// a webhook URL cannot reach the panel's own network.
	HTTP *http.Client
	SMTP SMTP
	// ConsoleURL makes alarm links absolute in messages ("" leaves them
	// relative).
	ConsoleURL string
	// MaxAttempts before a delivery is given up (default 8), with a pause
	// of 10 s × 2^(attempt−1) between tries.
	MaxAttempts int
}

// Notifier delivers alarm events.
type Notifier struct {
	pool  *pgxpool.Pool
	vault *vault.Vault
	cfg   Config
}

// New returns a notifier on the application role's pool.
func New(pool *pgxpool.Pool, v *vault.Vault, cfg Config) *Notifier {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	logging.RegisterSecret(cfg.SMTP.Password)
	return &Notifier{pool: pool, vault: v, cfg: cfg}
}

// SetVault sets the key that seals webhook secrets, once the panel has
// loaded it (River's workers are registered before).
func (n *Notifier) SetVault(v *vault.Vault) { n.vault = v }

// Channel is a configured channel (its secret is never read back out).
type Channel struct {
	ID, Name, Kind, Target string
	MinSeverity            alarm.Severity
	Enabled                bool
	CreatedBy              string
	CreatedAt              time.Time
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// Invalid is a channel refused, with what to fix.
type Invalid string

func (e Invalid) Error() string { return string(e) }

// Create adds a channel. For a webhook it returns the signing secret, to
// be shown once: it is stored sealed and never shown again.
func (n *Notifier) Create(ctx context.Context, tx pgx.Tx, c Channel, by string) (secret string, err error) {
	c.Target = strings.TrimSpace(c.Target)
	if c.MinSeverity == "" {
		c.MinSeverity = alarm.Warning
	}
	switch {
	case !nameRE.MatchString(c.Name):
		return "", Invalid("name: 1 to 63 lower-case letters, digits, '.', '_' or '-'")
	case c.MinSeverity != alarm.Info && c.MinSeverity != alarm.Warning && c.MinSeverity != alarm.Critical:
		return "", Invalid("minimum severity: info, warning or critical")
	}
	switch c.Kind {
	case "webhook":
		u, err := url.Parse(c.Target)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "", Invalid("webhook URL: an http or https URL, like https://hooks.example.com/fleet")
		}
		if u.User != nil {
			return "", Invalid("webhook URL: no credentials in the URL; the body is signed with the channel's secret instead")
		}
	case "email":
		if _, err := mail.ParseAddress(c.Target); err != nil {
			return "", Invalid("e-mail: one address, like ops@example.com")
		}
		if n.cfg.SMTP.Addr == "" {
			return "", Invalid("e-mail: no mail server is configured (--smtp-addr, FLEET_SMTP_ADDR)")
		}
	default:
		return "", Invalid("kind: webhook or email")
	}
	var id string
	if err := tx.QueryRow(ctx, `INSERT INTO notify_channels (name, kind, target, min_severity, created_by)
		VALUES ($1, $2, $3, $4, $5) RETURNING id::text`, c.Name, c.Kind, c.Target, string(c.MinSeverity), by).Scan(&id); err != nil {
		var pe interface{ SQLState() string }
		if errors.As(err, &pe) && pe.SQLState() == "23505" {
			return "", Invalid("name: a channel named " + c.Name + " exists already")
		}
		return "", fmt.Errorf("notify: create channel: %w", err)
	}
	if c.Kind == "webhook" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("notify: secret: %w", err)
		}
		secret = "whsec_" + hex.EncodeToString(b)
		logging.RegisterSecret(secret)
		if _, err := tx.Exec(ctx, `UPDATE notify_channels SET secret_box = $2 WHERE id = $1`, id, n.vault.Seal([]byte(secret), "notify:"+id)); err != nil {
			return "", fmt.Errorf("notify: create channel: %w", err)
		}
	}
	return secret, nil
}

// Delete removes a channel by name.
func Delete(ctx context.Context, tx pgx.Tx, name string) error {
	tag, err := tx.Exec(ctx, `DELETE FROM notify_channels WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("notify: delete channel: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return Invalid("no channel named " + name)
	}
	return nil
}

// Channels lists the channels.
func Channels(ctx context.Context, pool *pgxpool.Pool) ([]Channel, error) {
	rows, err := pool.Query(ctx, `SELECT id::text, name, kind, target, min_severity, enabled, created_by, created_at
		FROM notify_channels ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("notify: channels: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Channel, error) {
		var c Channel
		var sev string
		err := r.Scan(&c.ID, &c.Name, &c.Kind, &c.Target, &sev, &c.Enabled, &c.CreatedBy, &c.CreatedAt)
		c.MinSeverity = alarm.Severity(sev)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("notify: channels: %w", err)
	}
	return out, nil
}

// Message is what a channel receives for one alarm event.
type Message struct {
	EventID int64  `json:"event_id"`
	Event   string `json:"event"` // raised | resolved
	At      string `json:"at"`
	Alarm   struct {
		ID         int64  `json:"id"`
		Tenant     string `json:"tenant"`
		TenantSlug string `json:"tenant_slug,omitempty"`
		Kind       string `json:"kind"`
		Key        string `json:"key"`
		Severity   string `json:"severity"`
		Summary    string `json:"summary"`
		Detail     string `json:"detail,omitempty"`
		Link       string `json:"link,omitempty"`
		RaisedAt   string `json:"raised_at"`
		ResolvedBy string `json:"resolved_by,omitempty"`
	} `json:"alarm"`
}

func rank(s alarm.Severity) int {
	switch s {
	case alarm.Critical:
		return 2
	case alarm.Warning:
		return 1
	}
	return 0
}

type tenantRow struct{ id, slug string }

// Deliver sends every undelivered alarm event to every enabled channel
// whose minimum severity it reaches, oldest first; events from before a
// channel existed are not sent to it. The leader runs it every few
// seconds; tests call it directly.
func (n *Notifier) Deliver(ctx context.Context) error {
	chans, err := Channels(ctx, n.pool)
	if err != nil {
		return err
	}
	if len(chans) == 0 {
		return nil
	}
	rows, err := n.pool.Query(ctx, `SELECT id::text, slug FROM tenants`)
	if err != nil {
		return fmt.Errorf("notify: tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tenantRow, error) {
		var t tenantRow
		return t, r.Scan(&t.id, &t.slug)
	})
	if err != nil {
		return fmt.Errorf("notify: tenants: %w", err)
	}
	tenants = append(tenants, tenantRow{id: alarm.System, slug: ""})
	var errs []error
	for _, c := range chans {
		if !c.Enabled {
			continue
		}
		for _, t := range tenants {
			if err := n.deliverTenant(ctx, c, t); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

type pending struct {
	msg      Message
	attempts int
	lastTry  *time.Time
}

func (n *Notifier) deliverTenant(ctx context.Context, c Channel, t tenantRow) error {
	var todo []pending
	err := db.InTenant(ctx, n.pool, t.id, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT e.id, e.event, e.at, a.id, a.kind, a.key, a.severity, a.summary, a.detail, a.link,
				a.raised_at, COALESCE(a.resolved_by, ''), COALESCE(d.attempts, 0), d.last_try
			FROM alarm_events e JOIN alarms a ON a.id = e.alarm_id
			LEFT JOIN notify_deliveries d ON d.event_id = e.id AND d.channel_id = $1
			WHERE e.at >= $2 AND (d.status IS NULL OR d.status = 'retrying')
			ORDER BY e.id LIMIT 200`, c.ID, c.CreatedAt)
		if err != nil {
			return err
		}
		todo, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (pending, error) {
			var p pending
			var at, raised time.Time
			m := &p.msg
			err := r.Scan(&m.EventID, &m.Event, &at, &m.Alarm.ID, &m.Alarm.Kind, &m.Alarm.Key, &m.Alarm.Severity, &m.Alarm.Summary,
				&m.Alarm.Detail, &m.Alarm.Link, &raised, &m.Alarm.ResolvedBy, &p.attempts, &p.lastTry)
			m.At, m.Alarm.RaisedAt = at.UTC().Format(time.RFC3339Nano), raised.UTC().Format(time.RFC3339Nano)
			m.Alarm.Tenant, m.Alarm.TenantSlug = t.id, t.slug
			if m.Alarm.Link != "" && n.cfg.ConsoleURL != "" && strings.HasPrefix(m.Alarm.Link, "/") {
				m.Alarm.Link = strings.TrimRight(n.cfg.ConsoleURL, "/") + m.Alarm.Link
			}
			return p, err
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("notify: read events: %w", err)
	}
	now := n.cfg.Clock.Now()
	for _, p := range todo {
		if rank(alarm.Severity(p.msg.Alarm.Severity)) < rank(c.MinSeverity) {
			// Below the channel's bar: recorded, so it is not looked at again.
			if err := n.record(ctx, t.id, c.ID, p.msg.EventID, "sent", p.attempts, "below the channel's minimum severity", now); err != nil {
				return err
			}
			continue
		}
		if p.lastTry != nil && p.attempts > 0 {
			wait := 10 * time.Second << min(p.attempts-1, 10)
			if now.Sub(*p.lastTry) < wait {
				continue
			}
		}
		sendErr := n.send(ctx, c, p.msg)
		attempts := p.attempts + 1
		status, msg := "sent", ""
		if sendErr != nil {
			status, msg = "retrying", sendErr.Error()
			if attempts >= n.cfg.MaxAttempts {
				status = "failed"
			}
			n.cfg.Log.Warn("notify: delivery failed", "channel", c.Name, "event", p.msg.EventID, "attempt", attempts, "status", status, "err", sendErr)
		} else {
			n.cfg.Log.Info("notify: delivered", "channel", c.Name, "event", p.msg.EventID, "alarm", p.msg.Alarm.Kind, "what", p.msg.Event)
		}
		if err := n.record(ctx, t.id, c.ID, p.msg.EventID, status, attempts, msg, now); err != nil {
			return err
		}
	}
	return nil
}

func (n *Notifier) record(ctx context.Context, tenant, channel string, event int64, status string, attempts int, msg string, now time.Time) error {
	return db.InTenant(ctx, n.pool, tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO notify_deliveries (channel_id, event_id, status, attempts, last_error, last_try, sent_at)
			VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6::timestamptz, CASE WHEN $3::text = 'sent' THEN $6::timestamptz END)
			ON CONFLICT (channel_id, event_id) DO UPDATE SET status = EXCLUDED.status, attempts = EXCLUDED.attempts,
				last_error = EXCLUDED.last_error, last_try = EXCLUDED.last_try, sent_at = EXCLUDED.sent_at`,
			channel, event, status, attempts, msg, now)
		if err != nil {
			return fmt.Errorf("notify: record delivery: %w", err)
		}
		return nil
	})
}

func (n *Notifier) send(ctx context.Context, c Channel, m Message) error {
	switch c.Kind {
	case "webhook":
		return n.webhook(ctx, c, m)
	case "email":
		return n.email(c, m)
	}
	return fmt.Errorf("notify: unknown channel kind %q", c.Kind)
}

// Sign returns the X-Fleetwright-Signature value of body at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a signature header against body with secret, refusing one
// older than maxAge: what a receiver does.
func Verify(secret, header string, body []byte, now time.Time, maxAge time.Duration) error {
	var ts, v1 string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || v1 == "" {
		return errors.New("notify: malformed signature header")
	}
	if now.Sub(time.Unix(sec, 0)) > maxAge {
		return errors.New("notify: signature too old (replay?)")
	}
	want := Sign(secret, time.Unix(sec, 0), body)
	if !hmac.Equal([]byte(want), []byte("t="+ts+",v1="+v1)) {
		return errors.New("notify: signature does not match")
	}
	return nil
}

func (n *Notifier) webhook(ctx context.Context, c Channel, m Message) error {
	var box []byte
	if err := n.pool.QueryRow(ctx, `SELECT secret_box FROM notify_channels WHERE id = $1`, c.ID).Scan(&box); err != nil {
		return fmt.Errorf("notify: webhook secret: %w", err)
	}
	secret, err := n.vault.Open(box, "notify:"+c.ID)
	if err != nil {
		return fmt.Errorf("notify: webhook secret cannot be opened (was the panel's secret key changed?): %w", err)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.Target, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notify: webhook request: %w", egress.RedactError(err, c.Target))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "fleetwright-notify")
	req.Header.Set("X-Fleetwright-Event", strconv.FormatInt(m.EventID, 10))
	req.Header.Set("X-Fleetwright-Signature", Sign(string(secret), n.cfg.Clock.Now(), body))
	res, err := n.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("notify: webhook %s: %w", redactURL(c.Target), egress.RedactError(err, c.Target))
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("notify: webhook %s answered %s", redactURL(c.Target), res.Status)
	}
	return nil
}

// redactURL keeps a token in a webhook's path or query out of logs,
// stored errors and pages.
func redactURL(s string) string { return egress.RedactEndpoint(s) }

func (n *Notifier) email(c Channel, m Message) error {
	s := n.cfg.SMTP
	if s.Addr == "" {
		return errors.New("notify: no mail server configured (--smtp-addr)")
	}
	subject := fmt.Sprintf("[Fleetwright %s] %s", m.Alarm.Severity, m.Alarm.Summary)
	if m.Event == "resolved" {
		subject = "[Fleetwright resolved] " + m.Alarm.Summary
	}
	subject = strings.NewReplacer("\r", " ", "\n", " ").Replace(subject)
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: %s\r\nDate: %s\r\nMessage-ID: <alarm-%d-event-%d@fleetwright>\r\n",
		s.From, c.Target, subject, n.cfg.Clock.Now().UTC().Format(time.RFC1123Z), m.Alarm.ID, m.EventID)
	fmt.Fprintf(&b, "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nX-Fleetwright-Event: %d\r\n\r\n", m.EventID)
	fmt.Fprintf(&b, "Alarm %s: %s\r\n\r\n%s\r\n", m.Event, m.Alarm.Summary, m.Alarm.Detail)
	fmt.Fprintf(&b, "\r\nKind: %s\r\nKey: %s\r\nSeverity: %s\r\nTenant: %s\r\nRaised: %s\r\n", m.Alarm.Kind, m.Alarm.Key, m.Alarm.Severity,
		orSystem(m.Alarm.TenantSlug), m.Alarm.RaisedAt)
	if m.Alarm.ResolvedBy != "" {
		fmt.Fprintf(&b, "Resolved by: %s\r\n", m.Alarm.ResolvedBy)
	}
	if m.Alarm.Link != "" {
		fmt.Fprintf(&b, "Console: %s\r\n", m.Alarm.Link)
	}
	var auth smtp.Auth
	if s.Username != "" {
		host, _, _ := strings.Cut(s.Addr, ":")
		auth = smtp.PlainAuth("", s.Username, s.Password, host)
	}
	if err := smtp.SendMail(s.Addr, auth, s.From, []string{c.Target}, []byte(b.String())); err != nil {
		return fmt.Errorf("notify: smtp %s: %w", s.Addr, err)
	}
	return nil
}

func orSystem(s string) string {
	if s == "" {
		return "system"
	}
	return s
}

// DeliverArgs is the leader's periodic delivery.
type DeliverArgs struct{}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "notify.deliver" }

// InsertOpts keeps one delivery run at a time.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: river.QueueDefault, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled}}}
}

type deliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	n *Notifier
}

func (w *deliverWorker) Work(ctx context.Context, _ *river.Job[DeliverArgs]) error {
	return w.n.Deliver(ctx)
}

// Timeout bounds one delivery run.
func (w *deliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration { return 2 * time.Minute }

// AddWorkers registers the delivery worker.
func (n *Notifier) AddWorkers(w *river.Workers) { river.AddWorker(w, &deliverWorker{n: n}) }

// PeriodicJobs returns the leader-elected delivery, every interval.
func (n *Notifier) PeriodicJobs(interval time.Duration) []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return DeliverArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "notify.deliver"})}
}
