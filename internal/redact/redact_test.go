package redact

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://hooks.example.com/services/T0/B0/token": "https://hooks.example.com/…",
		"https://hooks.example.com":                      "https://hooks.example.com",
		"https://hooks.example.com/":                     "https://hooks.example.com/",
		"https://user:pass@hooks.example.com:8443/x?k=v": "https://hooks.example.com:8443/…",
		"https://hooks.example.com?token=abc":            "https://hooks.example.com/…",
		"/relative/location":                             "/…",
		"":                                               "(unparsable URL)",
		"https://host\x1b[31m/x":                         "(unparsable URL)",
	} {
		if got := URL(raw); got != want {
			t.Errorf("URL(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":                     "plain text",
		"  tabs\tand\nnewlines \r\n":     "tabs and newlines",
		"esc \x1b[2J clear":              "esc \uFFFD[2J clear",
		"bidi \u202Egnp.exe":             "bidi \uFFFDgnp.exe",
		"csi \u009B31m":                  "csi \uFFFD31m",
		"bad \xff byte":                  "bad \uFFFD byte",
		"hangul filler \u3164 zwj\u200d": "hangul filler \uFFFD zwj\uFFFD",
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got := PrintableCut("abcdef", 3); got != "abc…" {
		t.Errorf("PrintableCut = %q", got)
	}
}

// A URL with user information and no password: net/http sends
// Authorization: Basic base64("KEY:"), which a receiver may echo.
func TestSecrets_BasicCredentialsWithoutAPassword(t *testing.T) {
	s := New("", nil, "https://sk_live_1234567890@hooks.example.com/in")
	basic := base64.StdEncoding.EncodeToString([]byte("sk_live_1234567890:"))
	echo := "you sent Authorization: Basic " + basic + " and user sk_live_1234567890"
	got := s.Scrub(echo)
	if strings.Contains(got, basic) || strings.Contains(got, "sk_live_1234567890") {
		t.Fatalf("Scrub(%q) = %q: the key shows", echo, got)
	}
}

func TestSecrets_Scrub(t *testing.T) {
	s := New("whsec_0123456789abcdef", []string{"Bearer tok_ABCDEFGHIJ"}, "https://h.example.com/services/T0001/B0002/XYZsecretXYZ?k=querysecret1")
	for in, want := range map[string]string{
		"no secret here":                                  "no secret here",
		"echo WHSEC_0123456789ABCDEF!":                    "echo …!",
		"404 /services/T0001/B0002/XYZsecretXYZ":          "404 …",
		"route services/T0001/B0002 not found":            "route … not found",
		"header: Bearer tok_ABCDEFGHIJ":                   "header: …",
		"q=querysecret1&x":                                "q=…&x",
		"next=%2Fservices%2FT0001%2FB0002%2FXYZsecretXYZ": "next=…",
	} {
		if got := s.Scrub(in); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", in, got, want)
		}
	}
	if got := s.ScrubCutTail("ends with whsec_0123"); got != "ends with " {
		t.Errorf("ScrubCutTail = %q", got)
	}
	if got := (Secrets{}).Scrub("anything at all"); got != "anything at all" {
		t.Errorf("zero Secrets scrubbed: %q", got)
	}
}

// The secret texts of a URL are linear in its segments: each segment
// brings at most a bounded number of runs and forms, whatever their count
// (the earlier scrubbing compared every text with every other, and looked
// for each in the answer: quadratic in the segments).
func TestSecrets_LinearInTheURL(t *testing.T) {
	for _, n := range []int{100, 1000, 3000} {
		var b strings.Builder
		b.WriteString("https://h.example.com")
		for i := range n {
			b.WriteString("/seg" + strconv.Itoa(i) + "x")
		}
		s := New("", nil, b.String())
		if per := float64(s.Len()) / float64(n); per > 4*maxRun {
			t.Errorf("%d segments: %d texts, %.1f per segment", n, s.Len(), per)
		}
	}
}

// BenchmarkScrub scrubs a 4 KiB answer that echoes part of a URL of n short
// segments: linear in n, and in the answer.
//
//	go test -run '^$' -bench Scrub ./internal/redact
func BenchmarkScrub(b *testing.B) {
	for _, n := range []int{300, 1000, 3000} {
		var u strings.Builder
		u.WriteString("https://h.example.com")
		for i := range n {
			u.WriteString("/s" + strconv.Itoa(i%1000))
		}
		answer := strings.Repeat("not found: "+u.String()[21:200]+" ", 4096/190+1)[:4096]
		b.Run("segments="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := New("whsec_0123456789abcdef", nil, u.String())
				s.Scrub(answer)
				s.ScrubCutTail(answer)
			}
		})
	}
}

// FuzzScrub checks that no secret text, in any ASCII case, survives Scrub,
// and that Printable's output has no control or format character.
func FuzzScrub(f *testing.F) {
	f.Add("whsec_0123456789abcdef", "https://h.example.com/a/bbbbbbbbbb/c?x=yyyyyyyyyy", "echo /a/bbbbbbbbbb/c and WHSEC_0123456789ABCDEF")
	f.Add("", "https://KEYKEYKEYKEY@h.example.com/", "Basic S0VZS0VZS0VZS0VZOg==")
	f.Fuzz(func(t *testing.T, secret, rawURL, text string) {
		// The sizes the library scrubs: a validated URL (8 KiB at most), a
		// logged excerpt (4 KiB); the check below is quadratic, the
		// scrubbing is not.
		if len(secret) > 256 || len(rawURL) > 2048 || len(text) > 4096 {
			t.Skip()
		}
		s := New(secret, []string{secret + " tail"}, rawURL)
		got := asciiLower(s.Scrub(text))
		for _, ts := range s.byPrefix {
			for _, secretText := range ts {
				if strings.Contains(got, secretText) {
					t.Fatalf("Scrub left %q in %q", secretText, got)
				}
			}
		}
		for _, r := range Printable(text) {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' || r == '\u200b' {
				t.Fatalf("Printable(%q) has %U", text, r)
			}
		}
	})
}
