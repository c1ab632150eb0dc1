package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/signedhook/webhook"
)

// samplePayload is the payload whose encoding is testdata/body_user_identified.json.
func samplePayload() webhook.Payload {
	return webhook.Payload{
		Event:     webhook.EventUserIdentified,
		Timestamp: webhook.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)),
		User: webhook.User{
			ID:        webhook.UserID("8f3a2b"),
			Email:     "ada@example.com",
			Name:      "Ada Lovelace",
			FirstName: "Ada",
			LastName:  "Lovelace",
			Phone:     "+44 20 7946 0000",
			Metadata:  webhook.Metadata{"plan": "pro", "source": "chrome_extension"},
			CreatedAt: webhook.NewTime(time.Date(2026, 11, 1, 8, 30, 0, 0, time.UTC)),
			UpdatedAt: webhook.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)),
		},
		Application: webhook.Application{ID: webhook.ApplicationID("42c0de"), Name: "Acme Sidebar"},
	}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	require.NoError(t, err)
	return b
}

func TestPayload_EncodesAsDocumented(t *testing.T) {
	got, err := json.Marshal(samplePayload())
	require.NoError(t, err)
	assert.Equal(t, string(readTestdata(t, "body_user_identified.json")), string(got))
}

func TestPayload_ZeroValueHasEveryField(t *testing.T) {
	got, err := json.Marshal(webhook.Payload{})
	require.NoError(t, err)
	const want = `{"event":"","timestamp":"0001-01-01T00:00:00.000Z",` +
		`"user":{"id":"","email":"","name":"","firstName":"","lastName":"","phone":"","metadata":{},` +
		`"createdAt":"0001-01-01T00:00:00.000Z","updatedAt":"0001-01-01T00:00:00.000Z"},` +
		`"application":{"id":"","name":""}}`
	assert.Equal(t, want, string(got))
}

func TestTime_EncodesUTCWithMilliseconds(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	tests := []struct {
		name string
		in   time.Time
		want string
	}{
		{"whole second", time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), `"2026-11-21T10:00:00.000Z"`},
		{"offset converted to UTC", time.Date(2026, 11, 21, 11, 0, 0, 0, paris), `"2026-11-21T10:00:00.000Z"`},
		{"nanoseconds truncated", time.Date(2026, 11, 21, 10, 0, 0, 123987654, time.UTC), `"2026-11-21T10:00:00.123Z"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(webhook.Time{Time: tc.in})
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
		})
	}
}

func TestTime_RefusesYearsWithoutAnRFC3339Form(t *testing.T) {
	for _, in := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -23*3600)), // year 10000 in UTC
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		_, err := json.Marshal(webhook.Time{Time: in})
		assert.ErrorContains(t, err, "outside years 0 to 9999", "%v", in)
	}
}

func TestTime_DecodesAnyRFC3339(t *testing.T) {
	want := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, in := range []string{
		`"2026-11-21T10:00:00.000Z"`,
		`"2026-11-21T10:00:00Z"`,
		`"2026-11-21T11:00:00+01:00"`,
		`"2026-11-21T10:00:00.000000000Z"`,
	} {
		var got webhook.Time
		require.NoError(t, json.Unmarshal([]byte(in), &got), in)
		assert.True(t, got.Equal(want), "%s decoded as %v, want %v", in, got.Time, want)
	}
	var bad webhook.Time
	assert.Error(t, json.Unmarshal([]byte(`"21/11/2026"`), &bad))
	assert.Error(t, json.Unmarshal([]byte(`1763719200000`), &bad))
}

// TestTime_DecodesTheISO8601FormsOfTheSpec: the spec's timestamp is "ISO
// 8601 UTC date-time with milliseconds". A receiver is lenient: an offset
// written +hhmm (Java's SSSZ) or +hh, or none (UTC, as the spec says), is
// the same time, and an empty string is a time not given, as null is.
// Refused, each was answered 400, and the service retried, then gave up
// (review).
func TestTime_DecodesTheISO8601FormsOfTheSpec(t *testing.T) {
	want := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, in := range []string{
		`"2026-11-21T10:00:00.000+0000"`,
		`"2026-11-21T11:00:00.000+0100"`,
		`"2026-11-21T08:30:00-0130"`,
		`"2026-11-21T11:00:00.000+01"`,
		`"2026-11-21T10:00:00.000"`,
		`"2026-11-21T10:00:00"`,
		`"2026-11-21t10:00:00.000"`,
	} {
		var got webhook.Time
		require.NoError(t, json.Unmarshal([]byte(in), &got), in)
		assert.True(t, got.Equal(want), "%s decoded as %v, want %v", in, got.Time, want)
	}
	for _, in := range []string{`""`, `null`} {
		got := webhook.NewTime(want)
		require.NoError(t, json.Unmarshal([]byte(in), &got), in)
		assert.True(t, got.Equal(want), "%s leaves a time as it was", in)
	}
	p, err := webhook.ParsePayload([]byte(`{"event":"user.identified","timestamp":"","user":{"email":"a@example.com","updatedAt":"2026-11-21T10:00:00.000+0000"}}`))
	require.NoError(t, err)
	assert.True(t, p.Timestamp.IsZero())
	assert.True(t, p.User.UpdatedAt.Equal(want))
	var bad webhook.Time
	for _, in := range []string{`"2026-11-21"`, `"2026-11-21T10:00"`, `"2026-11-21T10:00:00+1"`, `" "`, `"2026-11-21T10:00:00.000+00:00:00"`} {
		assert.Error(t, json.Unmarshal([]byte(in), &bad), in)
	}
}

func TestParsePayload(t *testing.T) {
	p, err := webhook.ParsePayload(readTestdata(t, "body_user_identified.json"))
	require.NoError(t, err)
	if diff := cmp.Diff(samplePayload(), p); diff != "" {
		t.Errorf("ParsePayload mismatch (-want +got):\n%s", diff)
	}
	assert.Equal(t, "pro", p.User.Metadata.Plan())
	assert.Equal(t, "chrome_extension", p.User.Metadata.Source())
}

func TestParsePayload_IgnoresUnknownFields(t *testing.T) {
	p, err := webhook.ParsePayload([]byte(`{"event":"user.identified","future":{"x":1},"user":{"email":"a@b.c","shoeSize":44}}`))
	require.NoError(t, err)
	assert.Equal(t, "a@b.c", p.User.Email)
}

func TestParsePayload_Errors(t *testing.T) {
	for _, body := range []string{
		``, `null`, `[]`, `"user.identified"`, `{"event":`, `{}`,
		`{"event":"user.identified","user":"ada"}`,
		`{"event":"user.identified","timestamp":"yesterday"}`,
		`{"event":"user.identified"} trailing`,
	} {
		_, err := webhook.ParsePayload([]byte(body))
		assert.ErrorIs(t, err, webhook.ErrMalformedPayload, "body %q", body)
	}
}

func TestMetadata_Accessors(t *testing.T) {
	var nilMeta webhook.Metadata
	assert.Equal(t, "", nilMeta.Plan())
	assert.Equal(t, "", webhook.Metadata{"plan": 3}.Plan(), "non-string plan")
	assert.Equal(t, "web", webhook.Metadata{"source": "web"}.Source())
}

func TestPayload_Validate(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*webhook.Payload)
		wantField string
	}{
		{"valid", func(*webhook.Payload) {}, ""},
		{"empty event", func(p *webhook.Payload) { p.Event = "" }, "event"},
		{"zero timestamp", func(p *webhook.Payload) { p.Timestamp = webhook.Time{} }, "timestamp"},
		{"user id without prefix", func(p *webhook.Payload) { p.User.ID = "8f3a2b" }, "user.id"},
		{"user id prefix only", func(p *webhook.Payload) { p.User.ID = "usr_" }, "user.id"},
		{"application id with user prefix", func(p *webhook.Payload) { p.Application.ID = "usr_1" }, "application.id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := samplePayload()
			tc.mutate(&p)
			err := p.Validate()
			if tc.wantField == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, webhook.ErrInvalidPayload)
			var fe *webhook.FieldError
			require.True(t, errors.As(err, &fe), "got %T, want *FieldError", err)
			assert.Equal(t, tc.wantField, fe.Field)
			assert.Contains(t, err.Error(), tc.wantField)
		})
	}
}

// FuzzParsePayload checks that no input panics and that whatever parses
// re-encodes to a fixed point. Run beyond the seed corpus with
//
//	go test -run '^$' -fuzz FuzzParsePayload
func FuzzParsePayload(f *testing.F) {
	f.Add(readTestdata(f, "body_user_identified.json"))
	f.Add(readTestdata(f, "body_minimal.json"))
	f.Add([]byte(`{"event":"x","user":{"metadata":{"n":1.5e300,"a":[1,{"b":null}]}}}`))
	f.Add([]byte(`{"event":"user.identified","timestamp":"2026-11-21T10:00:00.5+14:00"}`))
	f.Add([]byte(`{"event":"\u0000","user":null}`))
	f.Add([]byte(`{"event":"x","timestamp":"9999-12-31T23:59:59-23:00"}`)) // year 10000 in UTC
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := webhook.ParsePayload(body)
		if err != nil {
			return
		}
		first, err := json.Marshal(p)
		if err != nil {
			return // a time outside years 0-9999 cannot be encoded, which is reported
		}
		p2, err := webhook.ParsePayload(first)
		require.NoError(t, err, "re-parsing our own encoding %s", first)
		second, err := json.Marshal(p2)
		require.NoError(t, err)
		require.Equal(t, string(first), string(second))
	})
}

func TestTime_DecodesEscapedAndLowerCaseRFC3339(t *testing.T) {
	want := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, in := range []string{
		`"2026-11-21T12:00:00.000\u002B02:00"`, // .NET's default JSON escapes '+'
		`"2026\u002D11-21T10:00:00Z"`,
		`"2026-11-21t10:00:00z"`,
		`"2026-11-21t10:00:00.000Z"`,
		`"2026-11-21T10:00:00.000z"`,
	} {
		var got webhook.Time
		require.NoError(t, json.Unmarshal([]byte(in), &got), in)
		assert.True(t, got.Equal(want), "%s decoded as %v, want %v", in, got.Time, want)
	}
	var bad webhook.Time
	assert.Error(t, json.Unmarshal([]byte(`"2026-11-21x10:00:00Z"`), &bad))
	assert.Error(t, json.Unmarshal([]byte(`"2026-11-21T10:00:00Z`), &bad), "unterminated string")
}

func TestNewHandler_AcceptsEscapedTimes(t *testing.T) {
	body := []byte(`{"event":"user.identified","timestamp":"2026-11-21T12:00:00.000\u002B02:00",` +
		`"user":{"id":"usr_1","createdAt":"2026-11-21T10:00:00.000Z","updatedAt":"2026-11-21T10:00:00.000Z"},"application":{"id":"app_1"}}`)
	var got webhook.Payload
	h := webhook.NewHandler(newTestVerifier(t), func(_ context.Context, p webhook.Payload) error { got = p; return nil }, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newSignedRequest(testSecret, testNow.UnixMilli(), body))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.True(t, got.Timestamp.Equal(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)))
}

func TestSend_UnencodablePayloadIsInvalid(t *testing.T) {
	s := fakeSender(t, func(*http.Request) (*http.Response, error) {
		t.Error("nothing may be sent")
		return answer(200), nil
	}, nil)
	nan := samplePayload()
	nan.User.Metadata = webhook.Metadata{"score": math.NaN()}
	farFuture := samplePayload()
	farFuture.User.UpdatedAt = webhook.Time{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	for name, p := range map[string]webhook.Payload{"NaN in metadata": nan, "year 10000": farFuture} {
		res, err := s.Send(context.Background(), fakeConn, p)
		assert.ErrorIs(t, err, webhook.ErrInvalidPayload, name)
		assert.Empty(t, res.Attempts, name)
		results := s.SendAll(context.Background(), []webhook.Connection{fakeConn}, p)
		assert.ErrorIs(t, results[0].Err, webhook.ErrInvalidPayload, name)
	}
}

// A time that does not decode is named by its field, as every other field
// of the wrong type is: a body has three times.
func TestParsePayload_TimeErrorNamesItsField(t *testing.T) {
	for field, body := range map[string]string{
		"timestamp":      `{"event":"user.identified","timestamp":"yesterday"}`,
		"user.createdAt": `{"event":"user.identified","user":{"createdAt":"yesterday"}}`,
		"user.updatedAt": `{"event":"user.identified","user":{"updatedAt":12}}`,
	} {
		_, err := webhook.ParsePayload([]byte(body))
		require.ErrorIs(t, err, webhook.ErrMalformedPayload, field)
		assert.Contains(t, err.Error(), "field", field)
		assert.Contains(t, err.Error(), "."+field+" ", "the error names the field")
	}
}
