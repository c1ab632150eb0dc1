package human

// The fuzz target goes beyond its seeds, which run in every go test, with
//
//	go test -run '^$' -fuzz FuzzPrintable -fuzztime 60s ./internal/human
//
// from riverhook's directory.

import (
	"testing"
	"time"

	"github.com/signedhook/webhook"
)

// FuzzPrintable holds Printable to the root's rule: the text
// webhook.Attempt.ResponseText makes of the same bytes.
func FuzzPrintable(f *testing.F) {
	for _, s := range []string{
		`{"ok":true}`, "", " {\n\t\"a\": 1\r\n}\n", "déjà vu, 東京 ✓", "\x1b[31mred\x1b[0m", "a\u009b2Jb",
		"paid\u202edeifirev", "\u2066x\u2069\u200by\ufeff", "a\x00b\x7fc", "a\xffb\xc3", "a\u2028b\u2029c",
		"pay\u034Fpal \u3164 \u115F\u1160\uFFA0 ok\uFE0F\U000E0100", "a\uE000b", "\u0378 unassigned",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := webhook.Attempt{ResponseBody: []byte(s)}.ResponseText()
		if got := Printable(s); got != want {
			t.Errorf("Printable(%q) = %q, want %q (webhook.Attempt.ResponseText)", s, got, want)
		}
	})
}

// Duration rounds as the root's attempt log prints a duration.
func TestDuration_RoundsAsTheAttemptLog(t *testing.T) {
	for _, d := range []time.Duration{0, 7 * time.Microsecond, 412345 * time.Nanosecond, 3214 * time.Microsecond,
		9996 * time.Microsecond, 12345 * time.Microsecond, 999600 * time.Microsecond, 1254 * time.Millisecond, 72 * time.Hour} {
		const prefix = "attempt 1: 200 delivered in "
		want := webhook.Attempt{N: 1, StatusCode: 200, Duration: d}.String()[len(prefix):]
		if got := Duration(d).String(); got != want {
			t.Errorf("Duration(%v) = %s, want %s (webhook.Attempt.String)", d, got, want)
		}
	}
}
