package human

// The fuzz target goes beyond its seeds, which run in every go test, with
//
//	go test -run '^$' -fuzz FuzzPrintable -fuzztime 60s ./internal/human
//
// from riverhook's directory.

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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

// Cut keeps the longest start that fits, cut between runes, and counts the
// mark it adds in the budget.
func TestCut(t *testing.T) {
	double := func(r rune) int { return 2 * utf8.RuneLen(r) } // an encoding that doubles every byte
	for _, tc := range []struct {
		name string
		s    string
		max  int
		size func(rune) int
		mark string
		want string
	}{
		{"fits", "abc", 10, utf8.RuneLen, "…", "abc"},
		{"exact fit, no mark", "abc", 3, utf8.RuneLen, "…", "abc"},
		{"exact fit, multi-byte", "aé東", 6, utf8.RuneLen, "", "aé東"},
		{"one over", "abcd", 3, utf8.RuneLen, "", "abc"},
		{"mark counts", "abcdefgh", 7, utf8.RuneLen, "…", "abcd…"},
		{"mark exactly", "abcdefgh", 3, utf8.RuneLen, "…", "…"},
		{"no room for the mark", "abcdefgh", 2, utf8.RuneLen, "…", ""},
		{"no room for the mark, though s fits", "a", 2, utf8.RuneLen, "…", ""},
		{"budget 0", "abc", 0, utf8.RuneLen, "", ""},
		{"budget 0, empty", "", 0, utf8.RuneLen, "", ""},
		{"negative budget", "abc", -1, utf8.RuneLen, "", ""},
		{"empty", "", 5, utf8.RuneLen, "…", ""},
		{"rune split at the boundary is dropped", "a東京", 5, utf8.RuneLen, "", "a東"},
		{"rune split at the boundary, one byte in", "a東", 2, utf8.RuneLen, "", "a"},
		{"first rune does not fit", "東", 2, utf8.RuneLen, "", ""},
		{"rune split before the mark", "ab東京", 7, utf8.RuneLen, "…", "ab…"},
		{"rune ends at the mark", "ab東京x", 8, utf8.RuneLen, "…", "ab東…"},
		{"sized by the encoding", "abcd", 5, double, "", "ab"},
		{"sized by the encoding, exact", "abcd", 8, double, "", "abcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Cut(tc.s, tc.max, tc.size, tc.mark)
			if got != tc.want {
				t.Errorf("Cut(%q, %d, %q) = %q, want %q", tc.s, tc.max, tc.mark, got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("Cut(%q, %d, %q) = %q, not valid UTF-8", tc.s, tc.max, tc.mark, got)
			}
			if got == tc.s {
				return
			}
			kept, ok := strings.CutSuffix(got, tc.mark)
			if got != "" && !ok || !strings.HasPrefix(tc.s, kept) {
				t.Fatalf("Cut(%q, %d, %q) = %q, not a start of s ended with the mark", tc.s, tc.max, tc.mark, got)
			}
			n := len(tc.mark)
			for _, r := range kept {
				n += tc.size(r)
			}
			if got != "" && n > tc.max {
				t.Errorf("Cut(%q, %d, %q) = %q takes %d bytes, over the budget", tc.s, tc.max, tc.mark, got, n)
			}
		})
	}
}
