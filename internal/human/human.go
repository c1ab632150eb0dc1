// Package human formats values for people reading a log, a table or an
// error: the one rounding rule the library and its nested modules share.
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
