package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A JSON encoder may write a character of a string literally ("+", "/",
// "é") or as an escape (\u002b, \/, \u00e9), and encoders differ: Go's
// json.Marshal escapes <, > and &; PHP's json_encode escapes / and every
// non-ASCII character; .NET's System.Text.Json escapes +, <, >, &, ' and
// non-ASCII characters in upper-case hex; Python's json.dumps escapes
// non-ASCII characters. A body decoded and re-encoded by another encoder
// is the same JSON in other bytes, and no longer matches its signature.
// escapeRewrites returns the body as the signing encoder may have written
// it: the common encoders' forms, and each kind of character escaped or
// unescaped alone, the rest as in body.

// jsonPiece is a run of JSON text outside string literals (char false),
// or one character of a string literal as the text writes it.
type jsonPiece struct {
	text string
	char bool
	r    rune // the character; -1 for text kept as it is (an invalid or lone surrogate escape)
}

// jsonPieces splits valid JSON text into pieces.
func jsonPieces(body []byte) []jsonPiece {
	s := string(body)
	var pieces []jsonPiece
	start := 0 // of the current run outside strings
	for i := 0; i < len(s); {
		if s[i] != '"' {
			i++
			continue
		}
		pieces = append(pieces, jsonPiece{text: s[start : i+1]})
		i++
		for i < len(s) && s[i] != '"' {
			n, r := stringUnit(s[i:])
			pieces = append(pieces, jsonPiece{text: s[i : i+n], char: true, r: r})
			i += n
		}
		start = i // the closing quote starts the next run
		if i < len(s) {
			i++
		}
	}
	return append(pieces, jsonPiece{text: s[start:]})
}

// stringUnit returns the length of the character that s, inside a string
// literal, starts with, and the character.
func stringUnit(s string) (int, rune) {
	if s[0] != '\\' {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n <= 1 {
			return 1, -1
		}
		return n, r
	}
	if len(s) < 2 {
		return len(s), -1
	}
	if s[1] != 'u' {
		r, ok := map[byte]rune{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[s[1]]
		if !ok {
			return 2, -1
		}
		return 2, r
	}
	r, ok := hex4(s[2:])
	switch {
	case !ok:
		return min(len(s), 6), -1
	case r >= 0xd800 && r < 0xdc00: // a high surrogate: its pair follows
		if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if lo, ok := hex4(s[8:]); ok && lo >= 0xdc00 && lo < 0xe000 {
				return 12, 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
			}
		}
		return 6, -1
	case r >= 0xdc00 && r < 0xe000:
		return 6, -1
	}
	return 6, r
}

func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:4], 16, 32)
	return rune(n), err == nil
}

// minimalForm is how an encoder that escapes only what JSON requires
// writes r: JavaScript's JSON.stringify, Go's Encoder with
// SetEscapeHTML(false).
func minimalForm(r rune) string {
	switch r {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	if r < 0x20 {
		return uEscape(r, false)
	}
	return string(r)
}

// uEscape writes r as \uXXXX, a surrogate pair past the BMP.
func uEscape(r rune, upper bool) string {
	format := `\u%04x`
	if upper {
		format = `\u%04X`
	}
	if r < 0x10000 {
		return fmt.Sprintf(format, r)
	}
	r -= 0x10000
	return fmt.Sprintf(format+format, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
}

// escapeForm returns how an encoder writes r, or "" to keep the text as
// it is.
type escapeForm func(r rune) string

// escaping is an encoder that escapes the characters in set, in hex of
// the case given (/ as \/ when slash), and writes the rest as minimalForm
// does.
func escaping(set func(rune) bool, upper, slash bool) escapeForm {
	return func(r rune) string {
		switch {
		case r == '/' && slash:
			return `\/`
		case set(r):
			return uEscape(r, upper)
		}
		return minimalForm(r)
	}
}

// only changes the characters in set to form, and keeps the others.
func only(set func(rune) bool, form escapeForm) escapeForm {
	return func(r rune) string {
		if set(r) {
			return form(r)
		}
		return ""
	}
}

func isHTML(r rune) bool     { return r == '<' || r == '>' || r == '&' }
func isNonASCII(r rune) bool { return r >= 0x80 }
func none(rune) bool         { return false }

// escapeForms are the encoders and single rewrites escapeRewrites tries.
var escapeForms = func() []escapeForm {
	goMarshal := func(r rune) bool { return isHTML(r) || r == 0x2028 || r == 0x2029 }
	dotnet := func(r rune) bool { return isHTML(r) || strings.ContainsRune(`+'"`+"`", r) || r >= 0x80 }
	gson := func(r rune) bool { return isHTML(r) || r == '=' || r == '\'' }
	forms := []escapeForm{
		escaping(none, false, false),       // JSON.stringify, serde_json, Jackson
		escaping(goMarshal, false, false),  // Go's json.Marshal
		escaping(isNonASCII, false, false), // Python's json.dumps
		escaping(isNonASCII, false, true),  // PHP's json_encode
		escaping(dotnet, true, false),      // .NET's System.Text.Json
		escaping(gson, false, false),       // Gson
	}
	for _, set := range []func(rune) bool{
		func(r rune) bool { return r == '+' },
		func(r rune) bool { return r == '\'' },
		isHTML,
		isNonASCII,
	} {
		forms = append(forms, only(set, escaping(set, false, false)), only(set, escaping(set, true, false)), only(set, minimalForm))
	}
	slash := func(r rune) bool { return r == '/' }
	return append(forms, only(slash, escaping(none, false, true)), only(slash, minimalForm))
}()

// escapeRewrite is body with its string literals written another way,
// and how it differs from body.
type escapeRewrite struct {
	body []byte
	how  string
}

// escapeRewrites returns body as each of escapeForms writes it, when that
// differs from body. body must be valid JSON.
func escapeRewrites(body []byte) []escapeRewrite {
	pieces := jsonPieces(body)
	var rewrites []escapeRewrite
	for _, form := range escapeForms {
		var b strings.Builder
		var diffs []string
		seen := map[string]bool{}
		for _, p := range pieces {
			text := p.text
			if p.char && p.r >= 0 {
				if t := form(p.r); t != "" {
					text = t
				}
			}
			b.WriteString(text)
			if text != p.text {
				d := showForm(text, p.r) + " where this body has " + showForm(p.text, p.r)
				if !seen[d] {
					seen[d] = true
					diffs = append(diffs, d)
				}
			}
		}
		if len(diffs) == 0 {
			continue
		}
		more := ""
		if len(diffs) > 3 {
			more = fmt.Sprintf(" and %d more", len(diffs)-3)
			diffs = diffs[:3]
		}
		rewrites = append(rewrites, escapeRewrite{
			body: []byte(b.String()),
			how:  "JSON escapes were rewritten (the sender wrote " + strings.Join(diffs, ", ") + more + "); the body with the sender's escapes",
		})
	}
	return rewrites
}

// showForm shows how a character was written: an escape as it is, a
// character as a quoted Go rune literal, which escapes what does not
// print.
func showForm(text string, r rune) string {
	if strings.HasPrefix(text, `\`) {
		return text
	}
	return strconv.QuoteRune(r)
}
