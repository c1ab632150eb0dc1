package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// This file holds the delivery body: Payload, User, Application, Metadata
// and Time (millisecond UTC JSON), their validation and decoding.

// EventUserIdentified is the event kind of a delivery sent when a user is
// identified through the customer's browser extension: a new sign-up or an
// update of an existing user. It is the only kind the service sends today.
const EventUserIdentified = "user.identified"

// Identifier prefixes used by the service.
const (
	UserIDPrefix        = "usr_"
	ApplicationIDPrefix = "app_"
)

// TimeLayout is the layout of every time the library writes in JSON, in a
// delivery body and in the attempt log ([AttemptJSON]): UTC with exactly
// three fractional digits, such as "2026-11-21T10:00:00.000Z".
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Payload is the JSON body of a delivery.
//
// Every field is always present in its encoding, even when zero. Decoding
// ignores unknown fields, so receivers keep working when the service adds
// some.
type Payload struct {
	Event       string      `json:"event"`     // event kind, such as EventUserIdentified
	Timestamp   Time        `json:"timestamp"` // when the event happened
	User        User        `json:"user"`
	Application Application `json:"application"`
}

// User is the identified user of a [Payload].
type User struct {
	ID        string   `json:"id"` // "usr_" followed by the user's id; see UserID
	Email     string   `json:"email"`
	Name      string   `json:"name"` // full name
	FirstName string   `json:"firstName"`
	LastName  string   `json:"lastName"`
	Phone     string   `json:"phone"`
	Metadata  Metadata `json:"metadata"`
	CreatedAt Time     `json:"createdAt"`
	UpdatedAt Time     `json:"updatedAt"`
}

// Application is the customer's browser extension that identified the user.
type Application struct {
	ID   string `json:"id"` // "app_" followed by the application's id; see ApplicationID
	Name string `json:"name"`
}

// UserID returns the identifier the service uses for the user with the given
// raw id: [UserIDPrefix] followed by raw.
func UserID(raw string) string { return UserIDPrefix + raw }

// ApplicationID returns the identifier the service uses for the application
// with the given raw id: [ApplicationIDPrefix] followed by raw.
func ApplicationID(raw string) string { return ApplicationIDPrefix + raw }

// Metadata is the free-form key/value data attached to a [User]. Values are
// whatever JSON holds (decoded as by encoding/json into an any). A nil
// Metadata encodes as an empty object, never as null.
type Metadata map[string]any

// Plan returns the "plan" entry, or "" when it is absent or not a string.
func (m Metadata) Plan() string { return m.str("plan") }

// Source returns the "source" entry, or "" when it is absent or not a string.
func (m Metadata) Source() string { return m.str("source") }

func (m Metadata) str(key string) string {
	s, _ := m[key].(string)
	return s
}

// MarshalJSON encodes m as a JSON object; nil encodes as {}.
func (m Metadata) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(map[string]any(m))
}

// Time is a point in time as the library's JSON holds it, in a delivery body
// and in the attempt log ([AttemptJSON]). It encodes as UTC with exactly
// three fractional digits ([TimeLayout]) and decodes any RFC 3339 time, and
// the spec's other ISO 8601 forms (see [Time.UnmarshalJSON]). The
// zero Time encodes as "0001-01-01T00:00:00.000Z".
type Time struct {
	time.Time
}

// NewTime returns t in UTC, truncated to the millisecond: the value a
// receiver decodes from its encoding.
func NewTime(t time.Time) Time {
	return Time{t.UTC().Truncate(time.Millisecond)}
}

// MarshalJSON encodes t as a JSON string in [TimeLayout]. A year outside
// 0 to 9999 in UTC has no such form and gives an error.
func (t Time) MarshalJSON() ([]byte, error) {
	u := t.UTC()
	if y := u.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("webhook: time %v is outside years 0 to 9999 and cannot be encoded", u)
	}
	b := make([]byte, 0, len(TimeLayout)+2)
	b = append(b, '"')
	b = u.AppendFormat(b, TimeLayout)
	return append(b, '"'), nil
}

// UnmarshalJSON decodes a JSON string holding an RFC 3339 time, with or
// without fractional seconds, in any offset, escaped or not (some encoders
// write "+" as "\u002B"), with "T" and "Z" in either case. It also takes the
// other ISO 8601 forms of the spec's UTC date-time: an offset written +hhmm
// or +hh, or none, read as UTC. JSON null and an empty string leave t
// unchanged.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) == 0 || b[0] != '"' {
		return timeError(jsonKind(b), "want a string")
	}
	var s string
	if bytes.IndexByte(b, '\\') < 0 && len(b) >= 2 && b[len(b)-1] == '"' {
		s = string(b[1 : len(b)-1]) // nothing escaped: skip the decoder
	} else if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("webhook: time is not a JSON string: %w", err)
	}
	if s == "" {
		return nil // as null: a time not given
	}
	s = upperTZ(s)
	parsed, err := time.Parse(time.RFC3339Nano, s)
	for _, layout := range isoLayouts {
		if err == nil {
			break
		}
		if p, isoErr := time.Parse(layout, s); isoErr == nil {
			parsed, err = p, nil
		}
	}
	if err != nil {
		return timeError("string "+strconv.Quote(s), "not an ISO 8601 (RFC 3339) date-time")
	}
	t.Time = parsed
	return nil
}

// timeError says why a JSON value is not a Time as a json.UnmarshalTypeError,
// which encoding/json completes with the field's path (such as
// "user.createdAt"): an error of another type would not say which of a
// body's times it is.
func timeError(value, why string) error {
	return &json.UnmarshalTypeError{Value: value + " (" + why + ")", Type: reflect.TypeFor[Time]()}
}

// jsonKind names the kind of the JSON value b, for an error.
func jsonKind(b []byte) string {
	switch {
	case len(b) == 0:
		return "nothing"
	case b[0] == '{':
		return "object"
	case b[0] == '[':
		return "array"
	case b[0] == 't' || b[0] == 'f':
		return "bool"
	}
	return "number"
}

// isoLayouts are the ISO 8601 forms of the spec's "UTC date-time" that
// Time decodes besides RFC 3339: an offset written +hhmm or +hh, or none,
// read as UTC. time.Parse takes a fraction of a second after the seconds
// in each.
var isoLayouts = [...]string{"2006-01-02T15:04:05Z0700", "2006-01-02T15:04:05Z07", "2006-01-02T15:04:05"}

// upperTZ returns s with a lower-case date-time separator "t" and zone "z",
// which RFC 3339 allows, in upper case, which time.Parse wants.
func upperTZ(s string) string {
	const sep = len("2006-01-02")
	lowerT := len(s) > sep && s[sep] == 't'
	lowerZ := len(s) > 0 && s[len(s)-1] == 'z'
	if !lowerT && !lowerZ {
		return s
	}
	b := []byte(s)
	if lowerT {
		b[sep] = 'T'
	}
	if lowerZ {
		b[len(b)-1] = 'Z'
	}
	return string(b)
}

// ErrMalformedPayload is returned by [ParsePayload] when a body is not a
// delivery body.
var ErrMalformedPayload = errors.New("webhook: malformed payload")

// ErrInvalidPayload matches every error returned by [Payload.Validate].
var ErrInvalidPayload = errors.New("webhook: invalid payload")

// ParsePayload decodes a delivery body. Unknown fields are ignored and
// missing ones are left zero; a body that is not a JSON object, that has a
// field of the wrong type, or that has no "event" gives an error matching
// [ErrMalformedPayload]. It does not check field contents: see
// [Payload.Validate].
func ParsePayload(body []byte) (Payload, error) {
	var p Payload
	if err := decodeObject(body, &p); err != nil {
		return Payload{}, err
	}
	if p.Event == "" {
		return Payload{}, fmt.Errorf("%w: no \"event\" field", ErrMalformedPayload)
	}
	return p, nil
}

// decodeObject decodes a JSON object into v, refusing trailing data.
func decodeObject(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return fmt.Errorf("%w: body is not a JSON object", ErrMalformedPayload)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedPayload, err)
	}
	return nil
}

// Validate reports the first field of p that the service would never send:
// an empty event, a zero timestamp, or an identifier without its prefix. The
// error is a [*FieldError] naming the field in JSON notation (such as
// "user.id") and matches [ErrInvalidPayload]. Which other fields are
// required is not specified, so Validate does not require them.
//
// The Sender validates what it sends. A receiver does not: [On] and
// [NewHandler] hand over any Payload with an event.
func (p *Payload) Validate() error {
	switch {
	case p.Event == "":
		return payloadError("event", "must not be empty")
	case p.Timestamp.IsZero():
		return payloadError("timestamp", "must be set")
	}
	if err := checkPrefixed("user.id", p.User.ID, UserIDPrefix); err != nil {
		return err
	}
	return checkPrefixed("application.id", p.Application.ID, ApplicationIDPrefix)
}

// IsSendTest reports whether p is a Send Test delivery, made by
// [SamplePayload]: its user's metadata "source" is [SendTestSource]. A
// receiver can acknowledge one without storing it.
func (p *Payload) IsSendTest() bool { return p.User.Metadata.Source() == SendTestSource }

func checkPrefixed(field, id, prefix string) error {
	if !strings.HasPrefix(id, prefix) || len(id) == len(prefix) {
		return payloadError(field, fmt.Sprintf("want %q followed by an id, got %q", prefix, id))
	}
	return nil
}

func payloadError(field, reason string) error {
	return &FieldError{Field: field, Reason: reason, kind: ErrInvalidPayload}
}

// FieldError reports which field of a value is invalid and why. It matches
// the sentinel of the value it describes with errors.Is (for example
// [ErrInvalidPayload]).
type FieldError struct {
	Field  string // the field, such as "user.id" or "url": the names of the JSON a service shows its user
	Reason string // what is wrong with it, never containing a secret
	kind   error
}

// Error returns "<sentinel text>: <field>: <reason>", or "<field>:
// <reason>" for a FieldError built outside the library (a Validate method
// of the caller's), which matches no sentinel.
func (e *FieldError) Error() string {
	if e.kind == nil {
		return e.Field + ": " + e.Reason
	}
	return e.kind.Error() + ": " + e.Field + ": " + e.Reason
}

// Unwrap returns the sentinel the error matches.
func (e *FieldError) Unwrap() error { return e.kind }
