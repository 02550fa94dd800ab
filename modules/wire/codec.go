package wire

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"
)

// MaxMessageBytes is the largest message either side accepts or sends. The
// gateway also sets it as the WebSocket read limit, so a larger frame is cut
// off before it is buffered.
const MaxMessageBytes = 64 << 10

// Frame is one message with its envelope.
type Frame struct {
	// Type names the message; Encode takes it from Message.
	Type Type
	// ID is unique per sender (NewID).
	ID string
	// Time is the sender's clock when it sent the message.
	Time time.Time
	// Message is the body, a value type (Hello, Welcome, ...).
	Message Message
}

type envelope struct {
	Type Type            `json:"type"`
	ID   string          `json:"id"`
	Time time.Time       `json:"time"`
	Body json.RawMessage `json:"body"`
}

// Errors a decoder returns; test with errors.Is. The concrete error is a
// *DecodeError.
var (
	ErrOversized   = errors.New("wire: message too large")
	ErrMalformed   = errors.New("wire: malformed message")
	ErrUnknownType = errors.New("wire: unknown message type")
)

// DecodeError describes a message that could not be decoded. Its text never
// quotes the message's content beyond a shortened type name.
type DecodeError struct {
	// Kind is ErrOversized, ErrMalformed or ErrUnknownType.
	Kind error
	// Type is the message's type when it was readable.
	Type Type
	// Detail says what was wrong.
	Detail string
}

func (e *DecodeError) Error() string {
	if e.Type != "" {
		return fmt.Sprintf("%v: %s: %s", e.Kind, e.Type, e.Detail)
	}
	return fmt.Sprintf("%v: %s", e.Kind, e.Detail)
}

// Unwrap lets errors.Is match the kind.
func (e *DecodeError) Unwrap() error { return e.Kind }

// Code is the protocol error code to answer with.
func (e *DecodeError) Code() ErrorCode {
	switch e.Kind {
	case ErrOversized:
		return CodeOversized
	case ErrUnknownType:
		return CodeUnknownType
	}
	return CodeMalformed
}

// ErrorFor builds the protocol error message to send for a decode error.
func ErrorFor(err error) Error {
	var de *DecodeError
	if errors.As(err, &de) {
		return Error{Code: de.Code(), Message: de.Error()}
	}
	return Error{Code: CodeMalformed, Message: "wire: malformed message"}
}

// shortType makes an untrusted type name safe to print.
func shortType(t string) Type {
	if !utf8.ValidString(t) {
		return "(invalid utf-8)"
	}
	if len(t) > 40 {
		t = t[:40] + "…"
	}
	return Type(fmt.Sprintf("%q", t))
}

// Decode parses one message. It never panics; every failure is a
// *DecodeError (oversized, malformed or unknown type). Fields a newer peer
// added are ignored, as append-only versions require.
func Decode(data []byte) (Frame, error) {
	if len(data) > MaxMessageBytes {
		return Frame{}, &DecodeError{Kind: ErrOversized, Detail: fmt.Sprintf("%d bytes, limit %d", len(data), MaxMessageBytes)}
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return Frame{}, &DecodeError{Kind: ErrMalformed, Detail: "envelope: " + jsonDetail(err)}
	}
	if env.Type == "" {
		return Frame{}, &DecodeError{Kind: ErrMalformed, Detail: "envelope: no type"}
	}
	ptr := newMessage(env.Type)
	if ptr == nil {
		return Frame{}, &DecodeError{Kind: ErrUnknownType, Type: shortType(string(env.Type)), Detail: "not a message type of this protocol"}
	}
	if env.ID == "" || env.Time.IsZero() {
		return Frame{}, &DecodeError{Kind: ErrMalformed, Type: env.Type, Detail: "envelope: id and time are required"}
	}
	body := bytes.TrimSpace(env.Body)
	if len(body) == 0 || body[0] != '{' {
		return Frame{}, &DecodeError{Kind: ErrMalformed, Type: env.Type, Detail: "body must be a JSON object"}
	}
	if err := json.Unmarshal(body, ptr); err != nil {
		return Frame{}, &DecodeError{Kind: ErrMalformed, Type: env.Type, Detail: "body: " + jsonDetail(err)}
	}
	m := reflect.ValueOf(ptr).Elem().Interface().(Message)
	if err := validate(m); err != nil {
		return Frame{}, &DecodeError{Kind: ErrMalformed, Type: env.Type, Detail: err.Error()}
	}
	return Frame{Type: env.Type, ID: env.ID, Time: env.Time, Message: m}, nil
}

// jsonDetail shortens encoding/json's errors to what they say about shape,
// never the values.
func jsonDetail(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q has the wrong type (want %s)", te.Field, te.Type)
	}
	var ue *json.UnmarshalFieldError
	if errors.As(err, &ue) {
		return "invalid field"
	}
	return "invalid JSON"
}

// Encode serialises f for protocol version v: only the fields v has, secrets
// revealed, the envelope's type taken from the message and its time in UTC.
// It refuses a version this binary does not speak, a message type the
// version does not have, and a result over MaxMessageBytes.
func Encode(v int, f Frame) ([]byte, error) {
	if f.Message == nil {
		return nil, errors.New("wire: encode: no message")
	}
	if !Supported(v) {
		return nil, fmt.Errorf("wire: encode: version %d not spoken (window %d..%d)", v, MinSupported, Current)
	}
	t := f.Message.MessageType()
	if !InVersion(t, v) {
		return nil, fmt.Errorf("wire: encode: %s is not a message of version %d", t, v)
	}
	if f.ID == "" {
		f.ID = NewID()
	}
	if f.Time.IsZero() {
		return nil, fmt.Errorf("wire: encode %s: the envelope needs the sender's time", t)
	}
	body, err := json.Marshal(wireBody(f.Message, v))
	if err != nil {
		return nil, fmt.Errorf("wire: encode %s: %w", t, err)
	}
	out, err := json.Marshal(envelope{Type: t, ID: f.ID, Time: f.Time.UTC(), Body: body})
	if err != nil {
		return nil, fmt.Errorf("wire: encode %s: %w", t, err)
	}
	if len(out) > MaxMessageBytes {
		return nil, &DecodeError{Kind: ErrOversized, Type: t, Detail: fmt.Sprintf("encoded %d bytes, limit %d", len(out), MaxMessageBytes)}
	}
	return out, nil
}

// NewID returns a fresh random message or command id (128 bits, hex).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
