// Package human formats values for people, by the rules of the root
// module's attempt log: printable text, as [webhook.Attempt.ResponseText]
// makes it, and durations rounded as [webhook.Attempt.String] prints them;
// and its one way to cut a text to a budget at a rune boundary ([Cut]),
// which the attempt log and the console both use.
//
// The root module keeps these rules in internal packages, which riverhook
// must not import: under minimal version selection it may be built with
// any later root, whose internal API may differ. These are copies, and the
// tests hold them to the root's exported behaviour, against the root the
// go.mod requires and the newest (CI runs both).
//
// [webhook.Attempt.ResponseText]: https://pkg.go.dev/github.com/signedhook/webhook#Attempt.ResponseText
// [webhook.Attempt.String]: https://pkg.go.dev/github.com/signedhook/webhook#Attempt.String
package human

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Printable returns s as one line of text that is safe to print on a
// terminal and to store in a text column: valid UTF-8 without any control or
// format character. Line breaks and other white space become spaces; every
// other control or format character, every character that shows nothing
// (variation selectors, Hangul fillers, the combining grapheme joiner),
// every unassigned or private-use code point and every byte that is not
// UTF-8 becomes U+FFFD; the ends are trimmed.
func Printable(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range strings.TrimSpace(s) {
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

// invisible reports whether r is a printable character that shows nothing.
func invisible(r rune) bool {
	return unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r) ||
		r == '\u115F' || r == '\u1160' || r == '\u3164' || r == '\uFFA0'
}

// Duration rounds d to two or three significant digits, the precision a
// person reads: 1.25s, 12ms, 3.21ms, 410µs.
func Duration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}

// Cut returns the longest start of s, cut at a rune boundary, that fits in
// max bytes when each rune r takes size(r) bytes: size is how the text will
// be written (utf8.RuneLen for the bytes themselves, or an encoding's
// escaped length). When s does not fit whole, the start is ended with mark,
// whose length counts in max. It returns "" when max cannot hold the mark,
// and s itself, not a copy, when s fits.
func Cut(s string, max int, size func(rune) int, mark string) string {
	if max < len(mark) {
		return ""
	}
	n, end := 0, len(s)
	for i, r := range s {
		c := size(r)
		if n+c > max-len(mark) && end == len(s) {
			end = i // the cut if what follows does not fit
		}
		if n += c; n > max {
			return s[:end] + mark
		}
	}
	return s
}
