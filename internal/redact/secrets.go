package redact

import (
	"encoding/base64"
	"net/url"
	"strings"
)

// MinLen is the length of the shortest secret text a [Secrets] hides:
// shorter ones ("Bearer", "/hooks") are words of any answer more than
// secrets.
const MinLen = 8

// maxRun is the most segments of a URL's path hidden as one run.
const maxRun = 8

// Secrets is the set of a connection's secret texts, which no text made for
// people may show, and a matcher that finds them all in one pass over a
// text. It is safe for concurrent use.
type Secrets struct {
	texts []string // in ASCII lower case, each once
	m     matcher
}

// NewSecrets returns the secret texts of a connection to rawURL, with
// custom header values headerValues, signed with secret. They are the
// secret; the header values and the words in them; the URL's query and the
// values in it; its user information, the user name and password, and the
// Basic credentials net/http makes of them (base64 of "user:password", or of
// "user:" without a password); and its path, as written and decoded, with
// slashes and query-escaped (a 404 page quotes the route, a login
// redirect's next= escapes it), with every run of up to 8 of its segments: a
// run of short segments may be the credential (Zapier), which a 404 page
// quotes with or without the slashes at its ends. A receiver may echo any of
// them. They are matched in any ASCII case: a receiver may echo a hex token
// lowered. Each is also matched as JSON encoders write it in a string:
// with quotes, backslashes and control characters escaped, as Go's
// encoding/json does (also <, > and & as \u003c, \u003e and \u0026), and
// as PHP's json_encode does (also / as \/); and the query's values as the
// URL writes them, percent-escaped: a receiver may echo its raw query.
//
// The work is linear in the length of the inputs: each run of segments is
// hidden by the shortest runs at least [MinLen] long that start or end
// where it does, which overlap to cover it whole.
func NewSecrets(rawURL string, headerValues []string, secret string) *Secrets {
	x := &Secrets{}
	seen := make(map[string]bool)
	add := func(t string) {
		if len(t) < MinLen { // a word, escaped or not
			return
		}
		for _, v := range [...]string{t, jsonEscape(t, true, false), jsonEscape(t, false, true)} {
			v = asciiLower(v)
			if !seen[v] {
				seen[v] = true
				x.texts = append(x.texts, v)
			}
		}
	}
	add(secret)
	for _, value := range headerValues {
		add(value)
		for word := range strings.FieldsSeq(value) {
			add(word)
		}
	}
	if u, err := url.Parse(rawURL); err == nil {
		addPath(add, u.Path)
		if u.EscapedPath() != u.Path {
			addPath(add, u.EscapedPath())
		}
		add(u.RawQuery)
		for _, pair := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
			add(pair) // as written, percent-escapes and all
			if _, value, ok := strings.Cut(pair, "="); ok {
				add(value)
			}
		}
		for _, values := range u.Query() {
			for _, v := range values {
				add(v)
			}
		}
		addUser(add, u.User)
	}
	x.m = newMatcher(x.texts)
	return x
}

// jsonEscape returns t as a JSON encoder writes it inside a string: quotes,
// backslashes and control characters escaped, and also <, > and & as
// \u003c, \u003e and \u0026 (html, as Go's encoding/json does) or / as \/
// (slash, as PHP's json_encode does).
func jsonEscape(t string, html, slash bool) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || html && (c == '<' || c == '>' || c == '&'):
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		case slash && c == '/':
			b.WriteString(`\/`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// addPath adds path, with and without the slashes at its ends, and the runs
// of its segments, each with slashes and query-escaped.
func addPath(add func(string), path string) {
	add(path)
	add(url.QueryEscape(path))
	segments := strings.Split(strings.Trim(path, "/"), "/")
	escaped := make([]string, len(segments))
	for i, s := range segments {
		escaped[i] = url.QueryEscape(s)
	}
	addRuns(add, segments, "/")
	addRuns(add, escaped, url.QueryEscape("/"))
}

// addRuns adds, for each segment, the shortest run of segments joined by sep
// that starts with it and is at least MinLen long, and the shortest that
// ends with it. Any longer run of at most maxRun segments holds one of each
// kind, at its start and at its end, and they overlap: a match of both
// hides it whole.
func addRuns(add func(string), segments []string, sep string) {
	runLen := func(i, j int) int { // of segments[i:j] joined
		n := (j - i - 1) * len(sep)
		for _, s := range segments[i:j] {
			n += len(s)
		}
		return n
	}
	for i := range segments {
		for j := i + 1; j <= min(len(segments), i+maxRun); j++ {
			if runLen(i, j) >= MinLen {
				add(strings.Join(segments[i:j], sep))
				break
			}
		}
		for k := i; k >= max(0, i+1-maxRun); k-- {
			if runLen(k, i+1) >= MinLen {
				add(strings.Join(segments[k:i+1], sep))
				break
			}
		}
	}
}

// addUser adds the user information and the Basic credentials net/http
// sends for it: base64 of "user:password", the password empty when absent.
func addUser(add func(string), user *url.Userinfo) {
	if user == nil {
		return
	}
	add(user.String())
	add(user.Username())
	p, _ := user.Password()
	add(p)
	basic := base64.StdEncoding.EncodeToString([]byte(user.Username() + ":" + p))
	add(basic)
	add(strings.TrimRight(basic, "="))
}

// Scrub returns s with every secret text replaced by "…" wherever s has it
// in any ASCII case; overlapping ones become one "…".
func (x *Secrets) Scrub(s string) string {
	s, _ = x.scrub(s)
	return s
}

// scrub is Scrub, also returning the work it did: the matcher's steps.
func (x *Secrets) scrub(s string) (_ string, work int) {
	var spans [][2]int // the bytes to replace, [start, end), in order, apart
	state := 0
	for i := 0; i < len(s); i++ {
		var steps int
		state, steps = x.m.step(state, lower(s[i]))
		work += steps
		n := x.m.match[state]
		if n == 0 {
			continue
		}
		start := i + 1 - int(n)
		for len(spans) > 0 && spans[len(spans)-1][1] > start {
			start = min(start, spans[len(spans)-1][0])
			spans = spans[:len(spans)-1]
		}
		spans = append(spans, [2]int{start, i + 1})
	}
	if len(spans) == 0 {
		return s, work
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp[0]])
		b.WriteString("…")
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String(), work
}

// CutTail returns s, an excerpt that a cut ended, less a tail that begins
// one of the secret texts: the cut may have split one, which Scrub then
// misses.
func (x *Secrets) CutTail(s string) string {
	s, _ = x.cutTail(s)
	return s
}

// cutTail is CutTail, also returning the work it did.
func (x *Secrets) cutTail(s string) (_ string, work int) {
	state := 0
	for i := 0; i < len(s); i++ {
		var steps int
		state, steps = x.m.step(state, lower(s[i]))
		work += steps
	}
	// state is the longest end of s that begins a text; a text whole is not
	// a split one, so take the longest end that begins a longer text.
	for state != 0 && !x.m.inner(state) {
		state = int(x.m.fail[state])
		work++
	}
	return s[:len(s)-int(x.m.depth[state])], work
}

// size returns the bytes the secret texts hold.
func (x *Secrets) size() int {
	n := 0
	for _, t := range x.texts {
		n += len(t)
	}
	return n
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// asciiLower returns s with ASCII letters in lower case, and every byte
// where it was, so that an index in it is one in s.
func asciiLower(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return 'A' <= r && r <= 'Z' })
	if i < 0 {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		b[i] = lower(b[i])
	}
	return string(b)
}
