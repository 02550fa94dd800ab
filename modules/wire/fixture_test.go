package wire

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// -update rewrites every fixture from the Go values below. It records new
// checksums only for versions still in development (> LatestReleased), so
// regenerating a released version's fixtures makes TestReleasedFixturesAreFrozen
// fail: the only way to change a released message is a new version.
var update = flag.Bool("update", false, "rewrite golden fixtures (released versions stay pinned by SHA256SUMS)")

const sumsFile = "testdata/SHA256SUMS"

var fixtureTime = time.Date(2026, 3, 14, 9, 26, 53, 589793000, time.UTC)

// Known secret values used in fixtures; tests look for them in logs.
const (
	fixtureToken    = "fwa_9d3f7c2b8e6a41f0b5c4d2e1a7f6b3c9"
	fixturePassword = "correct horse battery staple"
	fixtureTOTP     = "JBSWY3DPEHPK3PXP"
)

func ptr[T any](v T) *T { return &v }

func sampleConfig() Config {
	return Config{
		Paused: false,
		Account: Account{Key: "acct-0042", Region: "us-east", BoardURL: "https://board.example.test",
			Platform: &PlatformSpec{Name: "acme-board", Version: 3,
				Digest: "0178892ceb7910a0ffacd7b4a028763b9b7a22e7187b5720b16471170b1b04b6",
				Source: "version: 1\nname: acme-board\n"}},
		Workers: []WorkerSpec{
			{Name: "watcher-1", Kind: "watcher", Settings: map[string]string{"lane": "CHI-ATL"}},
			{Name: "actor-1", Kind: "actor"},
		},
	}
}

func sampleCredentials() Credentials {
	return Credentials{Username: "dispatch42", Password: NewSecret(fixturePassword), TOTPSecret: NewSecret(fixtureTOTP)}
}

// samples holds one fully populated value of every message type as a
// version-v peer sends it: every field appears in the fixtures.
func samples(v int) map[Type]Message {
	all := allSamples(v)
	out := map[Type]Message{}
	for _, typ := range Types(v) {
		if m, ok := all[typ]; ok {
			out[typ] = m
		}
	}
	return out
}

func allSamples(v int) map[Type]Message {
	t1 := fixtureTime.Add(-250 * time.Millisecond)
	return map[Type]Message{
		TypeHello: Hello{Version: v, MinVersion: 1, Build: "v0.4.0", Host: "agent-17.fleet.internal",
			Clock: fixtureTime, Token: NewSecret(fixtureToken), InstallKey: "hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"},
		TypeWelcome: Welcome{Version: v, AgentID: "ag_01HZX4", InstallationID: "inst_7c1e",
			Config: sampleConfig(), Credentials: sampleCredentials(), SealedCredentials: sampleSealed(),
			CredentialsWithheld: WithheldKeyMismatch, AssistantLimits: sampleAssistantLimits(),
			RequestLimit: &RequestLimit{PerHour: 3600, From: "tenant"}, CredentialOrigins: []string{"https://board.example.test"}},
		TypeReject: Reject{Reason: RejectIncompatibleVersion, Message: "agent speaks 3..3, panel speaks 1..2",
			InstallationID: "inst_7c1e", MinVersion: 1, MaxVersion: 2},
		TypeConfigure: Configure{CommandID: "cmd_01", Config: sampleConfig(), AssistantLimits: sampleAssistantLimits(),
			RequestLimit: &RequestLimit{PerHour: 1200, From: "global"}},
		TypePause:         Pause{CommandID: "cmd_02", Reason: "tenant paused by operator"},
		TypeResume:        Resume{CommandID: "cmd_03"},
		TypeRestartWorker: RestartWorker{CommandID: "cmd_04", Worker: "actor-1"},
		TypeRetire:        Retire{CommandID: "cmd_05", Reason: "account deleted"},
		TypeRotateCredentials: RotateCredentials{CommandID: "cmd_06", Credentials: sampleCredentials(),
			Sealed: sampleSealed(), Withheld: WithheldCleartext, Origins: []string{"https://board.example.test"}},
		TypePing: Ping{CommandID: "cmd_07", SentAt: t1},
		TypePong: Pong{CommandID: "cmd_07", PingSentAt: t1, ReceivedAt: t1.Add(40 * time.Millisecond),
			SentAt: t1.Add(41 * time.Millisecond)},
		TypeState: State{Paused: true, MemoryRSSBytes: ptr(uint64(48 << 20)), StartedAt: ptr(t1.Add(-time.Hour)),
			BrowserSeconds: map[string]float64{"watcher": 3599.5, "crawler": 12.25}, Workers: []WorkerState{
				{Name: "watcher-1", Kind: "watcher", State: WorkerRunning, Restarts: 0, OldestTaskAgeMillis: ptr(int64(1250))},
				{Name: "actor-1", Kind: "actor", State: WorkerNeedsPerson, Restarts: 5,
					LastOperation:       &Operation{ID: "op_99", JobKey: "load-123456", Outcome: "confirmed", FinishedAt: t1},
					OldestTaskAgeMillis: ptr(int64(0))},
			}},
		TypeEvent: Event{Level: LevelWarn, Kind: "worker_needs_person", Worker: "actor-1",
			Message: "actor-1 failed 6 times within 300s", At: t1, Fields: map[string]string{"restarts": "5"}},
		TypeCommandResult: CommandResult{CommandID: "cmd_04", OK: false, Error: "no worker named actor-9"},
		TypeError:         Error{Code: CodeUnknownType, Message: `wire: unknown message type: "lease_grant"`},
		TypeDetected: Detected{Worker: "watcher-1", Sightings: []Sighting{{Job: sampleJob(), SeenAt: t1}},
			BoardClock: &BoardClock{OffsetMicros: -1250, ErrorMicros: 840, MeasuredAt: t1}},
		TypeOffer: Offer{OfferID: "off_01", Job: sampleJob(), SeenAt: t1, QueuedAt: t1.Add(3 * time.Millisecond), Cell: "cell-a",
			KeysHonoured: true},
		TypeLeaseRequest: LeaseRequest{RequestID: "req_01", Worker: "actor-1", Key: "LD-48213", OfferID: "off_01"},
		TypeLeaseResult: LeaseResult{RequestID: "req_01", Key: "LD-48213", Granted: true, Token: 90817,
			OperationID: "9b2f7f0e-7f7c-4b43-9a8c-1f3e2d4c5b6a", RemainingMillis: 4987, HardTimeoutMillis: 10000,
			BookingKey: "5d0c61c4-2f55-4b0e-8d7e-0a4f1f8d9e21", KeysHonoured: true},
		TypeActRequest: ActRequest{RequestID: "req_02", Worker: "actor-1", Key: "LD-48213", Token: 90817},
		TypeActResult: ActResult{RequestID: "req_02", Key: "LD-48213", OK: false, OperationID: "9b2f7f0e-7f7c-4b43-9a8c-1f3e2d4c5b6a",
			Reason: ReasonExpired},
		TypeOutcome: Outcome{RequestID: "req_03", Worker: "actor-1", Key: "LD-48213", Token: 90817,
			OperationID: "9b2f7f0e-7f7c-4b43-9a8c-1f3e2d4c5b6a", Result: ResultConfirmed,
			SentAt: ptr(t1.Add(20 * time.Millisecond)), ConfirmedAt: ptr(t1.Add(212 * time.Millisecond)),
			Detail: "booking #7731", FromJournal: false},
		TypeOutcomeAck:   OutcomeAck{RequestID: "req_03", OK: true, Disposition: AckApplied},
		TypeLookup:       Lookup{RequestID: "req_04", Keys: []string{"LD-48213"}, Since: t1.Add(-time.Hour), Cursor: "7600"},
		TypeLookupResult: LookupResult{RequestID: "req_04", Complete: true, Bookings: []Booking{{Key: "LD-48213", BookingID: "7731", BookedAt: t1, Account: "dispatch42"}}, Next: "7731", Client: "acme-freight"},
		TypePageTask:     samplePageTask(),
		TypePageResult:   samplePageResult(),
		TypeAssistantReport: AssistantReport{Model: "ollama qwen2.5:7b", TokensToday: 7223, CostTodayUSD: 0, Tasks: []AssistantTask{{ID: 3,
			Goal: "Draft the launch post and publish it", Status: "awaiting approval", Steps: 10, Tokens: 7223, Tabs: []string{"brief", "drafts", "calendar"},
			Progress:        "opened 3 tabs: brief, drafts, calendar · drafted post from the product brief · labelled as AI-generated",
			PendingApproval: "Publish to the Demo Studio page?", UpdatedAt: t1}}},
		TypeLeaseGrant: LeaseGrant{GrantID: "grant_01", Worker: "actor-1", Job: Job{Key: "LD-48213", PublishedAt: t1.Add(-time.Second),
			Origin: "Chicago, IL", Destination: "Atlanta, GA", RateCents: 245000}, Token: 90818,
			OperationID: "0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5", BookingKey: "5d0c61c4-2f55-4b0e-8d7e-0a4f1f8d9e21", KeysHonoured: true,
			GrantedAt: t1, SendBy: t1.Add(5 * time.Second), SendWithinMillis: 5000, ClockOffsetMillis: -12, ClockErrorMillis: 3,
			HardTimeoutMillis: 15000, SeenAt: t1.Add(-40 * time.Millisecond), QueuedAt: t1.Add(-39 * time.Millisecond), Cell: "default"},
		TypeGateCheck:  GateCheck{RequestID: "req_05", Worker: "actor-1", Key: "LD-48213", Token: 90818},
		TypeGateResult: GateResult{RequestID: "req_05", Key: "LD-48213", OK: false, Reason: ReasonPaused},
		TypeAssistantTask: AssistantTaskStart{CommandID: "cmd_08", Goal: "Draft the launch post from the brief and publish it",
			StartURLs: []string{"https://studio.example.test/brief", "https://studio.example.test/drafts"}, By: "ops@acme.test"},
	}
}

func sampleAssistantLimits() *AssistantLimits {
	return &AssistantLimits{Tenant: AssistantLimitSet{TaskSteps: 40, TaskCostUSD: 0.5, DayCostUSD: 5},
		Global: AssistantLimitSet{TaskTokens: 200000, TaskWallSeconds: 1800, TaskTabs: 8, DaySteps: 500, DayTokens: 2000000}}
}

// sampleSealed is a fixed box (the fixture cannot seal afresh: that is random).
func sampleSealed() *SealedCredentials {
	return &SealedCredentials{Ephemeral: "3p7S2xjAuzrqhFcpHUsGc8tM4fZ6Jm0v9kqDTVqbQ1s", Nonce: "q1w2e3r4t5y6u7i8",
		Box: "mQ2aV7c0xZkq9P3rT8yLw1nB5dF6gH4jK2sE0uA7iOo"}
}

func samplePageTask() PageTask {
	return PageTask{TaskID: "task_01", RunID: "run_01", Kind: PageListing, URL: "https://shop.example.test/catalog?page=2",
		Render: "http", Rules: CrawlRules{Format: "html", Items: "li.product",
			Fields: []CrawlField{
				{Name: "url", CSS: "a.title", Attr: "href", Required: true, Transform: []string{"absolute_url"}},
				{Name: "tags", CSS: ".tag", All: true},
				{Name: "id", Path: "$.id"},
			},
			FollowCSS: "a.title", FollowAttr: "href", FollowLimit: 5, NextCSS: "a.next", NextAttr: "href",
			CursorPath: "$.next_cursor", CursorParam: "cursor"},
		AllowedDomains: []string{"shop.example.test"}, EgressAllow: []string{"127.0.0.0/8"}, EgressPorts: []int{8091},
		MaxBytes: 5 << 20, TimeoutMS: 30000, Snapshot: true,
		Proxy: &CrawlProxy{ID: "proxy_01", URL: "http://proxy.example.test:3128", Allow: []string{"10.8.0.0/16"},
			Sealed: &SealedCredentials{Ephemeral: "ZXBo", Nonce: "bm9uY2U", Box: "Ym94"}},
		Solution: &CaptchaSolution{Field: "g-recaptcha-response", Token: "03AFcWeA"}}
}

func samplePageResult() PageResult {
	return PageResult{TaskID: "task_01", URL: "https://shop.example.test/catalog?page=2",
		FinalURL: "https://shop.example.test/catalog?page=2", Status: 429, RetryAfterMS: 2000, Bytes: 5120, DurationMS: 42,
		Items:   []CrawlItem{{"url": "https://shop.example.test/item/p0001", "price": 12.5, "tags": []any{"new", "sale"}}},
		Links:   []string{"https://shop.example.test/item/p0001"},
		Next:    "https://shop.example.test/catalog?page=3",
		Missing: []string{"price"}, Body: "<html>…</html>", Headers: map[string]string{"Content-Type": "text/html"},
		Refused: "loopback (RFC 1122) 127.0.0.0/8", Captcha: true, Error: "timeout",
		ProxyError: "egress: upstream proxy http://proxy.example.test:3128: refused CONNECT 93.184.216.34:443: 502 Bad Gateway",
		Screenshot: "/9j/4AAQ",
		Challenge:  &CaptchaChallenge{Kind: "recaptcha", SiteKey: "6LcTEST", PageURL: "https://shop.example.test/catalog?page=2"}}
}

func sampleJob() Job {
	return Job{Key: "LD-48213", PublishedAt: fixtureTime.Add(-time.Second), ExpiresAt: fixtureTime.Add(10 * time.Minute),
		Origin: "Chicago, IL", Destination: "Atlanta, GA", Equipment: "dry_van", WeightLbs: 42000, Miles: 716,
		RateCents: 245000, PickupStart: fixtureTime.Add(24 * time.Hour), PickupEnd: fixtureTime.Add(30 * time.Hour)}
}

// sampleFrame is the frame of a fixture: fixed id and time.
func sampleFrame(v int, t Type) Frame {
	return Frame{Type: t, ID: "msg_" + string(t), Time: fixtureTime, Message: samples(v)[t]}
}

// expectedAt is what decoding version v's fixture must give.
func expectedAt(m Message, v int) Message {
	if s, ok := m.(State); ok {
		m = s.forVersion(v)
	}
	return ForVersion(m, v)
}

func fixturePath(v int, t Type) string {
	return filepath.Join("testdata", fmt.Sprintf("v%d", v), string(t)+".json")
}

func encodeFixture(t *testing.T, v int, typ Type) []byte {
	t.Helper()
	raw, err := Encode(v, sampleFrame(v, typ))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, json.Indent(&buf, raw, "", "  "))
	buf.WriteByte('\n')
	return buf.Bytes()
}

func TestSamplesCoverEveryType(t *testing.T) {
	for v := MinSupported; v <= Current; v++ {
		s := samples(v)
		for _, typ := range Types(v) {
			require.Contains(t, s, typ, "no sample for %s", typ)
		}
		require.Len(t, s, len(Types(v)))
	}
}

// TestFixturesMatchEncoding: each message encoded from its Go value must equal
// its fixture byte for byte, so a changed field (name, type, omission) fails.
func TestFixturesMatchEncoding(t *testing.T) {
	var newSums []string
	for v := MinSupported; v <= Current; v++ {
		for _, typ := range Types(v) {
			got := encodeFixture(t, v, typ)
			path := fixturePath(v, typ)
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, got, 0o644))
				if v > LatestReleased {
					newSums = append(newSums, sumLine(path, got))
				}
				continue
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "missing fixture for %s v%d (run go test -update for a version in development)", typ, v)
			require.Equal(t, string(want), string(got), "%s v%d changed without a version bump", typ, v)
		}
	}
	if *update {
		writeDevSums(t, newSums)
	}
}

// TestFixturesDecode: every fixture decodes to the Go value it came from
// (with the fields of its version only).
func TestFixturesDecode(t *testing.T) {
	for v := MinSupported; v <= Current; v++ {
		for _, typ := range Types(v) {
			data, err := os.ReadFile(fixturePath(v, typ))
			require.NoError(t, err)
			f, err := Decode(data)
			require.NoError(t, err, "%s v%d", typ, v)
			want := sampleFrame(v, typ)
			require.Equal(t, typ, f.Type)
			require.Equal(t, want.ID, f.ID)
			require.True(t, want.Time.Equal(f.Time))
			require.Equal(t, expectedAt(want.Message, v), f.Message, "%s v%d", typ, v)
		}
	}
}

// TestReleasedFixturesAreFrozen checks every fixture of every released
// version against SHA256SUMS, and that no file was added or dropped.
func TestReleasedFixturesAreFrozen(t *testing.T) {
	sums := readSums(t)
	for v := 1; v <= LatestReleased; v++ {
		dir := fmt.Sprintf("v%d/", v)
		var listed []string
		for name := range sums {
			if strings.HasPrefix(name, dir) {
				listed = append(listed, name)
			}
		}
		require.NotEmpty(t, listed, "released version %d has no checksums", v)
		files, err := filepath.Glob(filepath.Join("testdata", fmt.Sprintf("v%d", v), "*"))
		require.NoError(t, err)
		var present []string
		for _, f := range files {
			present = append(present, filepath.ToSlash(strings.TrimPrefix(f, "testdata"+string(filepath.Separator))))
		}
		sort.Strings(listed)
		sort.Strings(present)
		require.Equal(t, listed, present, "released version %d: fixture files added or removed", v)
		for _, name := range listed {
			data, err := os.ReadFile(filepath.Join("testdata", name))
			require.NoError(t, err)
			h := sha256.Sum256(data)
			require.Equal(t, sums[name], hex.EncodeToString(h[:]),
				"%s is a fixture of released version %d and must never change; add a new protocol version instead", name, v)
		}
		if v >= MinSupported {
			for _, typ := range Types(v) {
				require.Contains(t, listed, fmt.Sprintf("v%d/%s.json", v, typ))
			}
		}
	}
}

func sumLine(path string, data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:]) + "  " + filepath.ToSlash(strings.TrimPrefix(path, "testdata"+string(filepath.Separator)))
}

func readSums(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(sumsFile)
	require.NoError(t, err)
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hash, name, ok := strings.Cut(line, "  ")
		require.True(t, ok, "bad line in SHA256SUMS: %q", line)
		sums[name] = hash
	}
	require.NoError(t, sc.Err())
	return sums
}

// writeDevSums keeps the released lines exactly as they are and replaces the
// lines of versions in development.
func writeDevSums(t *testing.T, dev []string) {
	t.Helper()
	old, err := os.ReadFile(sumsFile)
	if err != nil && !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	var kept []string
	for _, line := range strings.Split(string(old), "\n") {
		if line == "" {
			continue
		}
		_, name, _ := strings.Cut(line, "  ")
		var v int
		if _, err := fmt.Sscanf(name, "v%d/", &v); err == nil && v > LatestReleased {
			continue
		}
		kept = append(kept, line)
	}
	kept = append(kept, dev...)
	require.NoError(t, os.WriteFile(sumsFile, []byte(strings.Join(kept, "\n")+"\n"), 0o644))
}
