// Package human formats values for people reading a log, a table or an
// error: the library's one rounding rule. Nested modules may not import it
// (they may be built with a later root): riverhook keeps a copy that its
// tests hold to [webhook.Attempt.String].
//
// [webhook.Attempt.String]: https://pkg.go.dev/github.com/signedhook/webhook#Attempt.String
package human

import "time"

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
