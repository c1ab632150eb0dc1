package console

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/signedhook/webhook"
	"github.com/signedhook/webhook/riverhook"
)

// The pages round an attempt's duration by the one rule the attempt log
// prints it with (webhook.Attempt.String).
func TestPages_RoundDurationsAsTheAttemptLog(t *testing.T) {
	took := funcs["took"].(func(time.Duration) string)
	for _, d := range []time.Duration{0, 7 * time.Microsecond, 412345 * time.Nanosecond, 3214 * time.Microsecond,
		12345 * time.Microsecond, 999600 * time.Microsecond, 1254 * time.Millisecond, 72 * time.Hour} {
		const prefix = "attempt 1: 200 delivered in "
		want := webhook.Attempt{N: 1, StatusCode: 200, Duration: d}.String()[len(prefix):]
		if got := took(d); got != want {
			t.Errorf("took(%v) = %q, want %q", d, got, want)
		}
	}
}

// A listing's unknown status is named in the answer, cut and escaped: the
// answer never carries what the request sent as it came.
func TestListQuery_NamesAnUnknownStatusCutAndEscaped(t *testing.T) {
	_, err := listQuery(url.Values{"status": {"\x1b[2J\u202e" + strings.Repeat("x", 100)}}, time.Now())
	if err == nil {
		t.Fatal("got no error, want one for an unknown status")
	}
	if got, want := err.Error(), `unknown status "\x1b[2J\u202e`+strings.Repeat("x", 35)+`"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// cut keeps at most n bytes, at a rune boundary, of valid UTF-8.
func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"alice", 200, "alice"},
		{strings.Repeat("é", 150), 200, strings.Repeat("é", 100)},
		{"a" + strings.Repeat("é", 150), 200, "a" + strings.Repeat("é", 99)},
		{"a\xffb", 200, "a\uFFFDb"},
		{"ab\xff", 3, "ab"},
		{"東京", 5, "東"},
		{"東京", 2, ""},
	} {
		if got := cut(tc.in, tc.n); got != tc.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// A delivery's row counts the attempts of its policy: neither an
// interrupted run, nor a probe that found the endpoint still down, nor a
// refusal to send (the give-up after MaxWait) is one.
func TestRowOf_CountsNoProbeThatFoundTheEndpointDown(t *testing.T) {
	refused := webhook.Attempt{N: 1, Kind: webhook.KindRefused, Err: webhook.ErrEndpointDown}
	probe := refused
	probe.Probe = true
	d := &riverhook.Delivery{Attempts: []riverhook.Attempt{
		{Attempt: refused}, {Attempt: probe}, {Attempt: probe}, {Attempt: webhook.Attempt{N: 2, Kind: webhook.KindInterrupted}},
		{Attempt: webhook.Attempt{N: 2, Kind: webhook.KindDown, Err: webhook.ErrEndpointDown}}, // gave up waiting: nothing sent
	}}
	rw := rowOf("crm", d)
	if rw.Attempts != 1 || !rw.Interrupted {
		t.Errorf("row: %d attempts, interrupted %v; want 1, true", rw.Attempts, rw.Interrupted)
	}
}

// The week's chart sums the hours of each day: its bars are the days of the
// count by the hour that the day's chart shows the last 24 of.
func TestByDay_SumsEachDaysHours(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	hours := make([]riverhook.Period, 6*24+7) // six days, and seven hours of the seventh
	want := make([]riverhook.Period, 7)
	for i := range hours {
		hours[i] = riverhook.Period{Start: start.Add(time.Duration(i) * time.Hour), Delivered: i, GivenUp: i % 3, Cancelled: 1}
		d := &want[i/24]
		d.Start = start.Add(time.Duration(i/24) * 24 * time.Hour)
		d.Delivered += i
		d.GivenUp += i % 3
		d.Cancelled++
	}
	got := byDay(hours)
	if len(got) != len(want) {
		t.Fatalf("got %d days, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("day %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// printableJSON escapes what a page would not show as itself (a control, a
// format character, an invisible one): a space other than U+0020, which a
// page shows as the blank it is, stays as typed. Japanese text separates a
// family name from a given name with an ideographic space (U+3000), French
// a number from its unit with a no-break space (U+00A0): the payload view
// showed them as \u3000 and \u00a0, every other space of the text as itself.
func TestPrintableJSON_KeepsTheSpacesAPageShows(t *testing.T) {
	for _, js := range []string{
		"{\n  \"name\": \"山田\u3000太郎\"\n}",
		"{\n  \"amount\": \"12\u00a0€\"\n}",
		"{\n  \"note\": \"5\u202f%\"\n}",
	} {
		if got := printableJSON(js); got != js {
			t.Errorf("printableJSON(%q) = %q: a space the page shows is escaped", js, got)
		}
	}
	// What it is for still holds: a right-to-left override is escaped.
	if got := printableJSON("\"a\u202eb\""); got != `"a\u202eb"` {
		t.Errorf("a bidi override: got %q", got)
	}
}
