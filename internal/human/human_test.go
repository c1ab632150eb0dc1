package human

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{412345 * time.Nanosecond, "410µs"},
		{3214 * time.Microsecond, "3.21ms"},
		{12345 * time.Microsecond, "12ms"},
		{1254 * time.Millisecond, "1.25s"},
		{72 * time.Hour, "72h0m0s"},
	} {
		if got := Duration(tc.in).String(); got != tc.want {
			t.Errorf("Duration(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
