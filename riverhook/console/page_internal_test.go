package console

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/signedhook/webhook"
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
