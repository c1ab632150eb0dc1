package redact

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestPrintable(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"as it came", `{"ok":true}`, `{"ok":true}`},
		{"empty", "", ""},
		{"lines join with spaces, ends trimmed", " {\n\t\"a\": 1\r\n}\n", `{  "a": 1  }`},
		{"text in any script", "déjà vu, 東京 ✓", "déjà vu, 東京 ✓"},
		{"terminal escapes", "\x1b[31mred\x1b[0m", "\uFFFD[31mred\uFFFD[0m"},
		{"C1 CSI", "a\u009b2Jb", "a\uFFFD2Jb"},
		{"bidi override", "paid\u202edeifirev", "paid\uFFFDdeifirev"},
		{"isolates and zero width", "\u2066x\u2069\u200by\ufeff", "\uFFFDx\uFFFD\uFFFDy\uFFFD"},
		{"NUL and DEL", "a\x00b\x7fc", "a\uFFFDb\uFFFDc"},
		{"invalid UTF-8", "a\xffb\xc3", "a\uFFFDb\uFFFD"},
		{"separators", "a\u2028b\u2029c", "a b c"},
		{"invisible but printable", "pay\u034Fpal \u3164 \u115F\u1160\uFFA0 ok\uFE0F\U000E0100", "pay\uFFFDpal \uFFFD \uFFFD\uFFFD\uFFFD ok\uFFFD\uFFFD"},
		{"private use", "a\uE000b", "a\uFFFDb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Printable(tc.in); got != tc.want {
				t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestPrintableCut(t *testing.T) {
	tests := []struct {
		in       string
		maxRunes int
		want     string
	}{
		{"abcdef", 3, "abc…"},
		{"abc", 3, "abc"},
		{"東京東京", 2, "東京…"},
		{"  ab  ", 2, "ab"}, // trimmed before counting
		{"a\x1bc", 2, "a\uFFFD…"},
		{"abcdef", 0, "abcdef"}, // no cut
	}
	for _, tc := range tests {
		if got := PrintableCut(tc.in, tc.maxRunes); got != tc.want {
			t.Errorf("PrintableCut(%q, %d) = %q, want %q", tc.in, tc.maxRunes, got, tc.want)
		}
	}
}

func TestURL(t *testing.T) {
	tests := []struct{ url, want string }{
		{"https://crm.example.com", "https://crm.example.com"},
		{"https://crm.example.com/", "https://crm.example.com/"},
		{"https://crm.example.com:8443/", "https://crm.example.com:8443/"},
		{"https://hooks.slack.example/services/T0001/B0002/token", "https://hooks.slack.example/…"},
		{"https://crm.example.com/?k=v", "https://crm.example.com/…"},
		{"https://crm.example.com?k=v", "https://crm.example.com/…"},
		{"https://crm.example.com?", "https://crm.example.com/…"},
		{"https://crm.example.com/#frag", "https://crm.example.com/"},
		{"https://u:p@[2001:db8::1]:443/x", "https://[2001:db8::1]:443/…"},
		{"https://KEY@crm.example.com", "https://crm.example.com"},
		{"https://evil\u009b2J\u202e.example/p", "https://evil\uFFFD2J\uFFFD.example/…"},
		{"https://crm.example.com/%zz", "(unparsable URL)"},
		{"", "(unparsable URL)"},
		{"/login?next=/token", "/…"}, // a relative Location: its path may carry a secret too
		{"crm.example.com/hooks", "/…"},
	}
	for _, tc := range tests {
		if got := URL(tc.url); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

func TestSecrets_Scrub(t *testing.T) {
	const url = "https://alice:s3cretPassword@crm.example.com/hooks/catch/1234567/abc1de2/?token=QUERYTOKEN9a7b&x=1"
	x := NewSecrets(url, []string{"Bearer HEADERTOKEN77ab"}, "whsec_SECRETTOKEN4f2d")
	tests := []struct {
		name, in, want string
	}{
		{"nothing secret", "all is well", "all is well"},
		{"the secret", "got whsec_SECRETTOKEN4f2d!", "got …!"},
		{"in another case", "got WHSEC_secrettoken4F2D", "got …"},
		{"the path", "Cannot POST /hooks/catch/1234567/abc1de2/", "Cannot POST …"},
		{"the path without its slashes", "route hooks/catch/1234567/abc1de2 not found", "route … not found"},
		{"without its last slash", "Cannot POST /hooks/catch/1234567/abc1de2", "Cannot POST /…"},
		{"a run of short segments", "no hook 1234567/abc1de2", "no hook …"},
		{"query-escaped", "next=%2Fhooks%2Fcatch%2F1234567%2Fabc1de2%2F", "next=…"},
		{"the query", "?token=QUERYTOKEN9a7b&x=1", "?…"},
		{"a query value", "token QUERYTOKEN9a7b", "token …"},
		{"a header value and its words", "Bearer HEADERTOKEN77ab; HEADERTOKEN77ab", "…; …"},
		{"the user information", "alice:s3cretPassword", "…"},
		{"the Basic credentials", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:s3cretPassword")), "Basic …"},
		{"every occurrence", "whsec_SECRETTOKEN4f2d whsec_SECRETTOKEN4f2d", "… …"},
		{"short words stay", "/hooks Bearer", "/hooks Bearer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := x.Scrub(tc.in); got != tc.want {
				t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestSecrets_ScrubsEscapedEchoes pins that a secret echoed as a receiver's
// JSON encoder or its query parser writes it is hidden too: Go's encoder
// writes <, > and & as \u003c, \u003e and \u0026, PHP's writes / as \/,
// and a query's value arrives percent-escaped as the URL has it.
func TestSecrets_ScrubsEscapedEchoes(t *testing.T) {
	x := NewSecrets("https://crm.example.com/hooks/abcdefgh12?sv=2024&sig=Zk9PYmFy%2BcXV4%3D",
		[]string{"Bearer abc<def>&ghi", `tok"en\value99`}, "whsec_SECRETTOKEN4f2d")
	tests := []struct {
		name, in, want string
	}{
		{"a query pair as written", `{"query":"sig=Zk9PYmFy%2BcXV4%3D"}`, `{"query":"…"}`},
		{"a query value as written", `bad signature Zk9PYmFy%2BcXV4%3D`, `bad signature …`},
		{"the query, JSON-escaped by Go", `{"query":"sv=2024\u0026sig=Zk9PYmFy%2BcXV4%3D"}`, `{"query":"…"}`},
		{"in upper-case hex", `sv=2024\u0026SIG=Zk9PYmFy%2bcXV4%3d`, `…`},
		{"a header value, JSON-escaped by Go", `{"auth":"Bearer abc\u003cdef\u003e\u0026ghi"}`, `{"auth":"…"}`},
		{"quotes and backslashes escaped", `{"h":"tok\"en\\value99"}`, `{"h":"…"}`},
		{"slashes escaped by PHP", `{"path":"\/hooks\/abcdefgh12"}`, `{"path":"…"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := x.Scrub(tc.in); got != tc.want {
				t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// A text shorter than MinLen is a word, not a secret, also escaped: its
// escaped form is longer, but hiding it would hide in a JSON answer what the
// same answer in plain text shows (a review's finding).
func TestSecrets_ShortTextsStayShortEscaped(t *testing.T) {
	x := NewSecrets("https://api.example.com/api/v2", []string{"a&b=c"}, "whsec_x_long_enough")
	for _, s := range []string{
		`{"self":"https://api.example.com/api/v2/users"}`, `{"self":"https:\/\/api.example.com\/api\/v2\/users"}`,
		`{"got":"a&b=c"}`, `{"got":"a\u0026b=c"}`,
	} {
		if got := x.Scrub(s); got != s {
			t.Errorf("Scrub(%s) = %s, want it whole", s, got)
		}
	}
}

// TestSecrets_EveryRunOfSegmentsIsHiddenWhole pins that any run of up to 8
// segments of the path at least MinLen long, with slashes or query-escaped,
// is hidden whole, as one mark, though only the shortest runs are secret
// texts.
func TestSecrets_EveryRunOfSegmentsIsHiddenWhole(t *testing.T) {
	segments := []string{"a", "bc", "12345678901", "d", "ef9", "g", "", "hij", "k", "lmnopq", "r", "st"}
	x := NewSecrets("https://crm.example.com/"+strings.Join(segments, "/"), nil, "whsec_x")
	for i := range segments {
		for j := i + 1; j <= min(len(segments), i+maxRun); j++ {
			for _, sep := range []string{"/", "%2F", "%2f"} {
				run := strings.Join(segments[i:j], sep)
				if len(run) < MinLen {
					continue
				}
				if got := x.Scrub("<" + run + ">"); got != "<…>" {
					t.Errorf("Scrub(%q) = %q, want %q", "<"+run+">", got, "<…>")
				}
			}
		}
	}
}

// TestSecrets_OverlappingTextsAreOneMark pins that texts that overlap in
// an answer are hidden whole, as one mark: hiding one first must not leave
// the rest of the other showing.
func TestSecrets_OverlappingTextsAreOneMark(t *testing.T) {
	x := NewSecrets("https://h/", []string{"abcdefghij ghijklmnop"}, "s")
	for in, want := range map[string]string{
		"<abcdefghijklmnop>":   "<…>",
		"<ABCDEFGHIJ>":         "<…>",
		"<abcdefghijkl>":       "<…kl>",
		"abcdefghijghijklmnop": "……", // adjacent, not overlapping
	} {
		if got := x.Scrub(in); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSecrets_UserWithoutPassword pins that the Basic credentials net/http
// makes of a URL's user information without a password, base64("KEY:"),
// are secret texts.
func TestSecrets_UserWithoutPassword(t *testing.T) {
	const key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	x := NewSecrets("https://"+key+"@crm.example.com/hook", nil, "whsec_x")
	basic := base64.StdEncoding.EncodeToString([]byte(key + ":"))
	for _, in := range []string{"Authorization: Basic " + basic, "Basic " + strings.TrimRight(basic, "="), "user " + key} {
		got := x.Scrub(in)
		if strings.Contains(got, basic[:12]) || strings.Contains(got, key[:12]) {
			t.Errorf("Scrub(%q) = %q, shows the key", in, got)
		}
	}
	// An escaped user name is sent decoded.
	x = NewSecrets("https://sk%5Flive%5F4eC39HqLyjWDarjtT1zdp7dc@crm.example.com/hook", nil, "whsec_x")
	if got := x.Scrub("Basic " + basic); strings.Contains(got, basic[:12]) {
		t.Errorf("Scrub of the Basic credentials of an escaped user = %q", got)
	}
}

func TestSecrets_CutTail(t *testing.T) {
	x := NewSecrets("https://crm.example.com/hooks/T0123456789abcdefghijKLMNOPQRSTUV", nil, "whsec_SECRETTOKEN4f2d")
	tests := []struct{ in, want string }{
		{"no route /hooks/T0123456789abc", "no route "},
		{"no route /hooks/t0123456789ABC", "no route "},
		{"secret whsec_SEC", "secret "},
		{"nothing at the end.", "nothing at the end."},
		{"", ""},
	}
	for _, tc := range tests {
		if got := x.CutTail(tc.in); got != tc.want {
			t.Errorf("CutTail(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// manySegments returns a URL of n short path segments and an answer of
// about 4 KiB quoting its start, as a receiver's 404 page would.
func manySegments(n int) (rawURL, page string) {
	var b strings.Builder
	b.WriteString("https://crm.example.com")
	for i := range n {
		b.WriteString("/s")
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(string(rune('a' + i/26%26)))
		b.WriteString(string(rune('0' + i/676%10)))
	}
	rawURL = b.String()
	page = "<h1>Not Found</h1><p>Cannot POST " + rawURL[len("https://crm.example.com"):]
	page = page[:4000] + strings.Repeat(" ", 96)
	return rawURL, page
}

// TestSecrets_WorkIsLinear pins that scrubbing an answer costs work
// proportional to the answer's length, whatever the number of secret texts
// (a URL of thousands of short segments has tens of thousands), and that
// the texts kept grow linearly with the URL. It counts bytes examined, not
// time.
func TestSecrets_WorkIsLinear(t *testing.T) {
	for _, n := range []int{1000, 3000, 6000} {
		rawURL, page := manySegments(n)
		x := NewSecrets(rawURL, nil, "whsec_x")
		_, scrubWork := x.scrub(page)
		_, cutWork := x.cutTail(page)
		if limit := 4 * len(page); scrubWork > limit || cutWork > limit {
			t.Errorf("%d segments: scrubbing %d bytes examined %d and %d bytes, want at most %d",
				n, len(page), scrubWork, cutWork, limit)
		}
		if size, limit := x.size(), 64*len(rawURL); size > limit {
			t.Errorf("%d segments: the secret texts of a %d-byte URL hold %d bytes, want at most %d", n, len(rawURL), size, limit)
		}
	}
}

// BenchmarkScrub measures the cost of one attempt's scrubbing: the secret
// texts of a URL of many short segments, and one 4 KiB answer scrubbed.
func BenchmarkScrub(b *testing.B) {
	b.Run("slack", func(b *testing.B) { // a usual URL
		rawURL := "https://hooks.slack.com/services/T0001ABCD/B0002EFGH/abcdefghijklmnopqrstuvwx"
		page := strings.Repeat("<p>Not Found</p>", 256)
		b.ReportAllocs()
		for b.Loop() {
			x := NewSecrets(rawURL, []string{"Bearer abc123def456"}, "whsec_0123456789abcdef0123456789abcdef")
			x.CutTail(x.Scrub(page))
		}
	})
	for _, n := range []int{1000, 1600, 3000, 6000} { // 1600 segments: the longest URL a Connection may hold
		rawURL, page := manySegments(n)
		b.Run(strconv.Itoa(n)+"segments", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				x := NewSecrets(rawURL, nil, "whsec_x")
				x.CutTail(x.Scrub(page))
			}
		})
	}
}

// requirePrintable fails unless s is valid UTF-8 with no control or format
// character (Unicode Cc, Cf, Zl, Zp).
func requirePrintable(t *testing.T, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("invalid UTF-8 in %q", s)
	}
	for i, r := range s {
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			t.Fatalf("%U at offset %d of %q", r, i, s)
		}
	}
}
