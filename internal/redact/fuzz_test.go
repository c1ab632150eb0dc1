package redact

// Fuzz targets beyond the seeds, which run in every go test:
//
//	go test -run '^$' -fuzz FuzzScrub -fuzztime 60s ./internal/redact
//
// .ci/run gives it a short pass.

import (
	"slices"
	"strings"
	"testing"
)

// FuzzScrub checks that no secret text survives Scrub, in any ASCII case,
// that Scrub hides exactly what a naive search finds,
// that CutTail cuts the longest end that begins one, and that Printable makes
// printable text of anything. A secret text holding a byte of "…" is left
// out of the first check: the mark Scrub puts in its place could complete
// it, and only a receiver that has the connection's secrets could make one.
func FuzzScrub(f *testing.F) {
	f.Add("https://alice:s3cretPassword@crm.example.com/hooks/catch/1234567/abc1de2/?token=QUERYTOKEN9a7b",
		"Bearer HEADERTOKEN77ab", "whsec_SECRETTOKEN4f2d", "Cannot POST /hooks/catch/1234567/abc1de2/ hooks%2Fcatch%2F1234567")
	f.Add("https://KEY12345@h/", "", "s", "Basic S0VZMTIzNDU6")
	f.Add("https://h/aaaaaaaa/aaaaaaab", "x", "aaaaaaaab", "aaaaaaaaaaaaaaaaaab/aaaaaaab")
	f.Add("https://h/%E2%80%A6%E2%80%A6%E2%80%A6", "", "", "\x1b[2J\u202e\u2028…………")
	f.Fuzz(func(t *testing.T, rawURL, header, secret, text string) {
		// Inputs up to a quarter of what the library scrubs (a URL of 8 KiB,
		// an excerpt of 4 KiB): the naive checks below are quadratic, the
		// scrubbing is not (TestSecrets_WorkIsLinear shows it at full size),
		// and a 2 KiB URL of a thousand segments against a 4 KiB excerpt
		// outran the fuzz pass under the race detector.
		if len(rawURL) > 1024 || len(header)+len(secret) > 256 || len(text) > 1024 {
			t.Skip()
		}
		x := NewSecrets(rawURL, []string{header}, secret)
		out := x.Scrub(text)
		folded := asciiLower(out)
		for _, s := range x.texts {
			if !strings.ContainsAny(s, "\xe2\x80\xa6") && strings.Contains(folded, s) {
				t.Fatalf("Scrub(%q) = %q, which shows %q", text, out, s)
			}
		}
		if want := naiveScrub(text, x.texts); out != want {
			t.Fatalf("Scrub(%q) = %q, want %q", text, out, want)
		}
		cut := x.CutTail(out)
		if !strings.HasPrefix(out, cut) {
			t.Fatalf("CutTail(%q) = %q, not a start of it", out, cut)
		}
		// What was cut is the longest end of out that begins a longer text.
		folded = asciiLower(out)
		removed := len(out) - len(cut)
		if removed > 0 && !beginsText(x.texts, folded[len(cut):]) {
			t.Fatalf("CutTail(%q) = %q: %q begins no text", out, cut, out[len(cut):])
		}
		longest := 0
		for _, s := range x.texts {
			longest = max(longest, len(s))
		}
		for k := removed + 1; k <= min(len(folded), longest); k++ { // a longer end begins no text
			if beginsText(x.texts, folded[len(folded)-k:]) {
				t.Fatalf("CutTail(%q) = %q, leaving %q, the start of a text", out, cut, out[len(out)-k:])
			}
		}
		requirePrintable(t, Printable(text))
		requirePrintable(t, PrintableCut(text, 3))
	})
}

// beginsText reports whether end is the start of one of texts, shorter than
// it.
func beginsText(texts []string, end string) bool {
	for _, t := range texts {
		if len(end) < len(t) && strings.HasPrefix(t, end) {
			return true
		}
	}
	return false
}

// naiveScrub is Scrub the slow way: every occurrence of every text found
// apart, the overlapping ones merged.
func naiveScrub(s string, texts []string) string {
	folded := asciiLower(s)
	var spans [][2]int
	for _, t := range texts {
		for i := 0; i+len(t) <= len(folded); i++ {
			if folded[i:i+len(t)] == t {
				spans = append(spans, [2]int{i, i + len(t)})
			}
		}
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var b strings.Builder
	last := 0
	for i := 0; i < len(spans); {
		start, end := spans[i][0], spans[i][1]
		for i++; i < len(spans) && spans[i][0] < end; i++ {
			end = max(end, spans[i][1])
		}
		b.WriteString(s[last:start] + "…")
		last = end
	}
	return b.String() + s[last:]
}
