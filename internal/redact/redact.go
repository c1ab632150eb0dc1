// Package redact makes text safe to show: printable text without control or
// format characters ([Printable]), an endpoint named by its origin alone
// ([URL]), and text without a connection's secret texts ([Secrets]), which a
// receiver may echo in its answer. Nested modules may not import it (they
// may be built with a later root): riverhook keeps a copy of [Printable]
// that its tests hold to webhook.Attempt.ResponseText.
package redact

import (
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable returns s as one line of text that is safe to print on a
// terminal and to store in a text column: valid UTF-8 without any control or
// format character. Line breaks and other white space become spaces; every
// other control or format character (C0 and C1 controls, DEL, bidi
// overrides and isolates, zero-width characters, NUL), every character that
// shows nothing (variation selectors, Hangul fillers, the combining grapheme
// joiner), every unassigned or private-use code point and every byte that is
// not UTF-8 becomes U+FFFD; the ends are trimmed.
func Printable(s string) string { return PrintableCut(s, 0) }

// PrintableCut is [Printable], cut after maxRunes runes with "…" when s is
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
// path (Slack, Zapier), in the query or in the user information, and none of
// them is shown. The result is printable.
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
