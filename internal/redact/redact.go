// Package redact makes what the webhook library prints safe to show: the
// printable text of what a receiver sent, an endpoint named by its origin
// alone, and texts scrubbed of a connection's secrets (its secret, its
// URL's path, query and user information, its custom header values), which
// a receiver may echo back.
package redact

import (
	"encoding/base64"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable returns s as printable text on one line: every space becomes a
// space, every control or format character, every character that shows
// nothing and every invalid UTF-8 byte becomes U+FFFD; the ends are
// trimmed. A receiver's answer, its status line and its certificate's names
// are not trusted to be text.
func Printable(s string) string { return PrintableCut(s, 0) }

// PrintableCut is Printable, cut after maxRunes runes with "…" when it is
// longer and maxRunes is positive.
func PrintableCut(s string, maxRunes int) string {
	var b strings.Builder
	b.Grow(len(s))
	n := 0
	for _, r := range strings.TrimSpace(s) {
		if maxRunes > 0 && n == maxRunes {
			b.WriteString("…")
			break
		}
		n++
		switch {
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		case !unicode.IsPrint(r) || invisible(r): // invalid bytes decode as U+FFFD, which is printable
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

// invisible reports whether r is a printable character that shows nothing
// (a variation selector, a Hangul filler, a combining grapheme joiner):
// text may hide in them, as in format characters.
func invisible(r rune) bool {
	return unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r) ||
		r == '\u115F' || r == '\u1160' || r == '\u3164' || r == '\uFFA0'
}

// URL names the endpoint of raw by its origin, scheme, host and port, and
// "/…" when it has more: many webhook URLs carry their credential in the
// path (Slack, Zapier), in the query or in the user information, and none
// of them is shown.
func URL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || raw == "":
		return "(unparsable URL)"
	case u.Host == "": // a relative URL, such as a Location's
		return "/…"
	}
	origin := Printable(u.Scheme + "://" + u.Host) // url.Parse lets any non-ASCII through in a host
	switch {
	case u.RawQuery != "" || u.ForceQuery || (u.Path != "" && u.Path != "/"):
		return origin + "/…"
	case u.Path == "/":
		return origin + "/"
	}
	return origin
}

// MinLen is the length of the shortest text Secrets scrubs: shorter ones
// ("Bearer", "/hooks") are words of any answer more than secrets.
const MinLen = 8

// maxRun is the most segments of a URL's path scrubbed as one run, beside
// each segment and the whole path.
const maxRun = 8

// Secrets are the texts of a connection that no text shown may hold, in
// ASCII lower case (they are matched in any case: a receiver may echo a
// hex token lowered), indexed by their first MinLen bytes so that scrubbing
// reads a text once, whatever their number. The zero Secrets scrubs nothing.
type Secrets struct {
	byPrefix map[string][]string // longest first
	n        int
}

// New returns the secret texts of a connection: its secret; the values of
// its custom headers and the words in them; its URL's path and every run of
// up to 8 of its segments, as written, decoded and query-escaped (a 404
// page quotes the route with or without its slashes, a login redirect's
// next= escapes it); its query and the values in it; its user information
// and the Basic credentials net/http makes of it, a password or not. Their
// number and size are linear in the URL's.
func New(secret string, headerValues []string, rawURL string) Secrets {
	s := Secrets{byPrefix: map[string][]string{}}
	seen := map[string]bool{}
	add := func(t string) {
		t = asciiLower(t)
		if len(t) < MinLen || seen[t] {
			return
		}
		seen[t] = true
		s.n++
		p := t[:MinLen]
		s.byPrefix[p] = append(s.byPrefix[p], t)
	}
	add(secret)
	for _, value := range headerValues {
		add(value)
		for word := range strings.FieldsSeq(value) {
			add(word)
		}
	}
	if u, err := url.Parse(rawURL); err == nil {
		for _, path := range []string{u.Path, u.EscapedPath()} {
			add(path)
			add(url.QueryEscape(path))
			segments := strings.Split(strings.Trim(path, "/"), "/")
			for i := range segments {
				add(segments[i])
				for j := i + 2; j <= min(len(segments), i+maxRun); j++ {
					run := strings.Join(segments[i:j], "/")
					add(run)
					add(url.QueryEscape(run))
				}
			}
		}
		add(u.RawQuery)
		for _, values := range u.Query() {
			for _, v := range values {
				add(v)
			}
		}
		if u.User != nil {
			add(u.User.String())
			add(u.User.Username())
			p, _ := u.User.Password()
			add(p)
			// What net/http sends as Authorization, with a password or not.
			add(base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + p)))
		}
	}
	for p, ts := range s.byPrefix {
		sortLongestFirst(ts)
		s.byPrefix[p] = ts
	}
	return s
}

func sortLongestFirst(ts []string) {
	for i := 1; i < len(ts); i++ { // few per prefix: insertion sort
		for j := i; j > 0 && len(ts[j]) > len(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// Len returns how many texts s holds.
func (s Secrets) Len() int { return s.n }

// Scrub returns text with every one of the secret texts replaced by "…",
// wherever text has it in any ASCII case, reading text once from left to
// right and taking the longest text at each place.
func (s Secrets) Scrub(text string) string {
	if s.n == 0 || len(text) < MinLen {
		return text
	}
	folded := asciiLower(text)
	var b strings.Builder
	last := 0 // text[last:i] is still to copy
	for i := 0; i+MinLen <= len(folded); {
		if t := s.match(folded[i:]); t != "" {
			if b.Len() == 0 {
				b.Grow(len(text))
			}
			b.WriteString(text[last:i])
			b.WriteString("…")
			i += len(t)
			last = i
			continue
		}
		i++
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// match returns the longest secret text that rest starts with, or "".
func (s Secrets) match(rest string) string {
	for _, t := range s.byPrefix[rest[:MinLen]] {
		if strings.HasPrefix(rest, t) {
			return t
		}
	}
	return ""
}

// ScrubCutTail returns text, an excerpt that a cut ended, less a tail that
// begins one of the secret texts: the cut may have split one, which Scrub
// then misses. Only the last longest-text bytes are looked at.
func (s Secrets) ScrubCutTail(text string) string {
	if s.n == 0 {
		return text
	}
	folded := asciiLower(text)
	for k := min(len(folded), s.longest()-1); k > 0; k-- {
		tail := folded[len(folded)-k:]
		if s.begins(tail) {
			return text[:len(text)-k]
		}
	}
	return text
}

// begins reports whether tail is the start of a secret text.
func (s Secrets) begins(tail string) bool {
	if len(tail) >= MinLen {
		for _, t := range s.byPrefix[tail[:MinLen]] {
			if strings.HasPrefix(t, tail) {
				return true
			}
		}
		return false
	}
	for p := range s.byPrefix { // a tail shorter than a prefix: the prefixes
		if strings.HasPrefix(p, tail) {
			return true
		}
	}
	return false
}

func (s Secrets) longest() int {
	n := 0
	for _, ts := range s.byPrefix {
		n = max(n, len(ts[0]))
	}
	return n
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
		if 'A' <= b[i] && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}
